"""Reading a command's output as it passes: its latest line, and the count it shows.

Counts are recognised, in this order, from a pattern given with named groups `current`
and `end` (`end` optional), tqdm's bar (`45%|████▌     | 45/100 [00:01<00:01, 30.0it/s]`,
also with scaled units such as `4.50M/10.0M`), pip's and rich's download bar
(`━━━━━━━╸━━━━━━ 12.3/45.6 MB 5.0 MB/s`), a bare `N/M`, and a percentage (`NN%`, read as
NN out of 100).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Escape sequences (colours, cursor moves) and other control characters never reach a log.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")
_SCALE = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_NUMBER = r"\d+(?:\.\d+)?"
_TQDM = re.compile(
    rf"\d+%\|[^|]*\|\s*(?P<current>{_NUMBER})(?P<cs>[kKMGTP]?)/(?P<end>{_NUMBER})(?P<es>[kKMGTP]?)\b"
)
_PIP = re.compile(rf"(?P<current>{_NUMBER})/(?P<end>{_NUMBER})\s*(?:[kKMGT]i?B|bytes)\b")
_RATIO = re.compile(r"(?<![\w./:-])(?P<current>\d+)\s?/\s?(?P<end>\d+)(?![\w/:-]|\.\d)")
_PERCENT = re.compile(rf"(?<![\w.])(?P<current>{_NUMBER})\s?%")
# How many of a chunk's lines, from its end, are searched for a count.
_LINES_SEARCHED = 32
# A line never ends: keep at most this much of it between chunks.
_PARTIAL_MAX = 65_536


@dataclass(frozen=True, slots=True)
class Reading:
    """What a chunk of output showed: its latest non-empty line, and the latest count."""

    line: str | None
    current: float | None = None
    end: float | None = None


def find_count(
    line: str, pattern: re.Pattern[str] | None = None
) -> tuple[float, float | None] | None:
    """The count `line` shows, as (current, end), or None."""
    if pattern is not None:
        groups = match.groupdict() if (match := pattern.search(line)) else {}
        current = _number(groups.get("current"))
        return None if current is None else (current, _number(groups.get("end")))
    match = _TQDM.search(line)
    if match:
        current = float(match["current"]) * _SCALE[match["cs"]]
        return _tidy(current), _tidy(float(match["end"]) * _SCALE[match["es"]])
    for simple in (_PIP, _RATIO):
        match = simple.search(line)
        if match and float(match["end"]) > 0:
            return _tidy(float(match["current"])), _tidy(float(match["end"]))
    match = _PERCENT.search(line)
    if match and float(match["current"]) <= 100:
        return _tidy(float(match["current"])), 100
    return None


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return _tidy(float(text.replace(",", "")))
    except ValueError:
        return None


def _tidy(number: float) -> float:
    """Whole numbers as ints, so that `45` is reported as 45, not 45.0."""
    return int(number) if number.is_integer() else number


class OutputReader:
    """Follows one stream of output (stdout or stderr) chunk by chunk. A line ends at
    `\\n` or `\\r` (progress bars redraw with `\\r`); the unfinished last line counts as
    the latest, since a bar is usually drawn without a line end."""

    def __init__(self, pattern: re.Pattern[str] | None = None) -> None:
        self.pattern = pattern
        self._partial = b""

    def feed(self, data: bytes) -> Reading:
        lines = re.split(rb"[\r\n]", self._partial + data)
        self._partial = lines[-1][-_PARTIAL_MAX:]
        latest: str | None = None
        count: tuple[float, float | None] | None = None
        for raw in reversed(lines[-_LINES_SEARCHED:]):
            line = _CONTROL.sub("", raw.decode("utf-8", "replace")).strip()
            if not line:
                continue
            if latest is None:
                latest = line
            count = find_count(line, self.pattern)
            if count is not None:
                break
        return Reading(latest, *(count or ()))
