"""The text of channel messages: a task finished, failed, stalled or moving again, a
digest of several, and the test message. Pure functions; no I/O.

A task arrives as `GET /tasks/{uuid}` shows it (the completion event's `data`, decoded)
or as its `domain.TaskView`. A message never holds the uuid of the space or of any task
(not even where a title or log line quotes one): the family's own in any case, and any
uuid-shaped text in any spelling a person or a link turns back into one (`ANY_UUID`); a
read-only link (`share_link`) is added when the channel names a share link, since its
owner asked for it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from ..domain.durations import duration_words, left_words, run_seconds

Kind = Literal["completed", "failed", "stalled", "recovered", "late", "digest", "test"]
Level = Literal["info", "success", "warning", "failure"]

UNTITLED = "Untitled task"
MAX_LOG_CHARS = 300
MAX_FAILED_STEPS_NAMED = 3
MAX_DIGEST_LINES = 20

# A hex digit: as itself (any case), percent-encoded, or in full width.
_HEX = r"(?:[0-9a-f]|%3[0-9]|%[46][1-6]|[\uff10-\uff19\uff21-\uff26\uff41-\uff46])"
# What a reader or a link skips inside it: invisible characters (zero-width spaces and
# joiners, the word joiner, the BOM, the soft hyphen, direction marks...), raw or
# percent-encoded in UTF-8.
# Written out (as Unicode 16 has them: tests/test_notify_messages.py checks) so that this
# module needs no more than the standard library: `headway channels test` runs on a
# machine with only the client and Apprise.
FORMAT_OR_IGNORABLE = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160"
    "\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
DASHES = (
    "\\-\u058a\u05be\u1400\u1806\u2010-\u2015\u2e17\u2e1a\u2e3a-\u2e3b\u2e40\u2e5d"
    "\u301c\u3030\u30a0\ufe31-\ufe32\ufe58\ufe63\uff0d\U00010d6e\U00010ead\u2212"
)
_FILL = rf"(?:[{FORMAT_OR_IGNORABLE}]|%e2%80%8[b-f]|%e2%81%a0|%ef%bb%bf|%c2%ad)*"
_DASH = rf"(?:{_FILL}(?:[{DASHES}]|%2d))?"  # a hyphen or any dash, or none
_GROUPS = _DASH.join(f"(?:{_FILL}{_HEX}){{{n}}}" for n in (8, 4, 4, 4, 12))
ANY_UUID = re.compile(rf"(?<![0-9a-f]){_GROUPS}(?![0-9a-f])", re.IGNORECASE)
"""Any uuid-shaped text: 32 hex digits in the groups of a uuid, with or without hyphens
or other dashes between them, whatever invisible characters lie inside; not within a
longer run of hex digits (a 40-digit commit hash is not a uuid)."""

_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def without_bidi_controls(text: str) -> str:
    """Text a reporter wrote, without the characters that steer the direction of what
    follows (embeddings, overrides such as U+202E, isolates, marks): set beside the
    server's own words (a message's, a badge's), it cannot turn them around."""
    return _BIDI_CONTROLS.sub("", text)


_LEVELS: dict[str, Level] = {
    "completed": "success",
    "failed": "failure",
    "stalled": "warning",
    "recovered": "info",
    "late": "warning",
    "digest": "info",
    "test": "info",
}


class Message(NamedTuple):
    """A message's title and body (a `(title, body)` pair), what it tells, and the
    Apprise notification type that goes with it."""

    title: str
    body: str
    kind: Kind
    level: Level


def share_link(public_url: str, share_uuid: str) -> str:
    """The read-only page of a share link: `HEADWAY_PUBLIC_URL` + `/shared/{uuid}`."""
    return f"{public_url.rstrip('/')}/shared/{share_uuid}"


def failure(task: Any) -> str | None:
    """Why `task` failed, or None if it did not: its own `values.error` (a non-empty
    string), and for a parent its failed steps ("1 of 3 steps failed (Run migrations:
    exit code 3)"). Only a finished task has failed."""
    task = _plain(task)
    return _failure(task, _uuids(task)) if task.get("finished_at") else None


def finished(
    task: Any,
    *,
    space_title: str | None = None,
    link: str | None = None,
    usual_s: float | None = None,
) -> Message:
    """The message for a finish: "✓ Deploy finished in 3 min 12 s", or when it failed
    "✗ Deploy failed: exit code 3"; `usual_s`, how long its job usually takes, adds
    ", usually 2 min" (to a finish whose time is known, or "after 14 min, usually 12 min"
    to a failure)."""
    task = _plain(task)
    secrets = _uuids(task)
    name = _name(task, secrets)
    why = _failure(task, secrets)
    took = run_seconds(task.get("created_at"), task.get("finished_at"))
    if took is None and isinstance(task.get("duration"), int | float):
        took = task["duration"]  # no timestamps to measure: the whole seconds
    usually = (
        f", usually {duration_words(usual_s)}" if usual_s is not None and took is not None else ""
    )
    if why is not None:
        after = f" after {duration_words(took)}{usually}" if usually else ""
        title, kind = f"✗ {name} failed: {why}{after}", "failed"
    else:
        after = f" in {duration_words(took)}{usually}" if took is not None else ""
        title, kind = f"✓ {name} finished{after}", "completed"
    return _message(title, _body(task, secrets, space_title, link), kind)


def stalled(
    task: Any,
    *,
    reason: Literal["flat", "silent"],
    for_s: float,
    space_title: str | None = None,
    link: str | None = None,
    restarted: bool = False,
) -> Message:
    """The message for a stall: "⏸ Deploy stalled at 80%: no progress for 10 min"
    (`flat`: reports arrive, `current` does not move), "⏸ Deploy stalled at 80%: no report
    for 10 min" (`silent`), "... no report since it started 10 min ago" when it never
    reported, or "... no report since the server restarted 10 min ago" (`restarted`) when
    the server cannot know: its reports before a restart were lost with the process's
    memory. `for_s` is how long, by the stall's own clock."""
    task = _plain(task)
    secrets = _uuids(task)
    name = _name(task, secrets)
    progress = task.get("progress") or {}
    at = _percent(progress)
    where = f" at {at}" if at else ""
    took = duration_words(for_s)
    if reason == "flat":
        title = f"⏸ {name} stalled{where}: no progress for {took}"
    elif restarted:
        title = f"⏸ {name} stalled{where}: no report since the server restarted {took} ago"
    elif progress.get("updated_at") is None:
        title = f"⏸ {name} stalled: no report since it started {took} ago"
    else:
        title = f"⏸ {name} stalled{where}: no report for {took}"
    return _message(title, _body(task, secrets, space_title, link), "stalled")


def late(
    task: Any,
    *,
    elapsed_s: float,
    usual_s: float,
    space_title: str | None = None,
    link: str | None = None,
) -> Message:
    """The message for a late run: "⏰ Nightly ETL is running late: 40 min so far, usually
    12 min" (at its percent, when it has one)."""
    task = _plain(task)
    secrets = _uuids(task)
    at = _percent(task.get("progress") or {})
    where = f" at {at}" if at else ""
    title = (
        f"⏰ {_name(task, secrets)} is running late{where}: {duration_words(elapsed_s)} so far, "
        f"usually {duration_words(usual_s)}"
    )
    return _message(title, _body(task, secrets, space_title, link), "late")


def recovered(task: Any, *, space_title: str | None = None, link: str | None = None) -> Message:
    """The message for the end of a stall: "▶ Deploy is moving again: 85%"."""
    task = _plain(task)
    secrets = _uuids(task)
    at = _percent(task.get("progress") or {}, finished=bool(task.get("finished_at")))
    title = f"▶ {_name(task, secrets)} is moving again" + (f": {at}" if at else "")
    return _message(title, _body(task, secrets, space_title, link), "recovered")


def digest(
    messages: Sequence[Message],
    *,
    space_title: str | None = None,
    link: str | None = None,
    max_lines: int = MAX_DIGEST_LINES,
) -> Message:
    """One message for several: "12 tasks finished, 2 failed", and one line per message
    (its title), at most `max_lines` of them, then how many more there were."""
    counts = {kind: sum(1 for m in messages if m.kind == kind) for kind in _LEVELS}
    parts = [
        (counts["completed"], "finished"),
        (counts["failed"], "failed"),
        (counts["stalled"], "stalled"),
        (counts["recovered"], "moving again"),
        (counts["late"], "late"),
    ]
    said = [(count, verb) for count, verb in parts if count]
    if said:
        count, verb = said[0]
        title = ", ".join(
            [f"{count} {'task' if count == 1 else 'tasks'} {verb}"]
            + [f"{n} {v}" for n, v in said[1:]]
        )
    else:
        title = f"{len(messages)} {'update' if len(messages) == 1 else 'updates'}"
    lines = [_clip(space_title, 200)] if space_title else []
    lines += [m.title for m in messages[:max_lines]]
    if len(messages) > max_lines:
        lines.append(f"… and {len(messages) - max_lines} more")
    if link:
        lines.append(link)
    warned = counts["stalled"] or counts["late"]
    level: Level = "failure" if counts["failed"] else "warning" if warned else "info"
    return Message(title, "\n".join(lines), "digest", level)


# A live message's bar: ten cells that read in plain text, `▓▓▓▓▓▓░░░░ 62%`.
BAR_CELLS = 10
LiveState = Literal["running", "stalled", "late", "finished", "failed"]


class Live(NamedTuple):
    """A live message as it shows its task now: a title, its lines, and whether the task
    has ended (`state` finished or failed: the last edit)."""

    title: str
    lines: tuple[str, ...]
    state: LiveState

    @property
    def final(self) -> bool:
        return self.state in ("finished", "failed")


def bar(ratio: float) -> str:
    """`▓▓▓▓▓▓░░░░ 62%`: the ratio in ten cells (rounded down) and its percent."""
    part = min(max(ratio, 0.0), 1.0) if math.isfinite(ratio) else 0.0
    filled = math.floor(part * BAR_CELLS)
    return f"{'▓' * filled}{'░' * (BAR_CELLS - filled)} {math.floor(part * 100)}%"


def live(
    task: Any,
    *,
    state: LiveState,
    left_s: float | None = None,
    usual_s: float | None = None,
    quiet_s: float | None = None,
    space_title: str | None = None,
    link: str | None = None,
) -> Live:
    """The live message of a task: "Deploy: 62%" with its bar, its counts, its log line
    and the time left while it runs ("About 4 min left"; running late, "Usually 12
    min"; stalled, "No report for 10 min"); at its end, its finish's title ("✓ Deploy
    finished in 3 min 12 s") with a full bar. No uuid, as every message."""
    task = _plain(task)
    secrets = _uuids(task)
    name = _name(task, secrets)
    progress = task.get("progress") or {}
    ratio = progress.get("ratio")
    known = isinstance(ratio, int | float) and math.isfinite(ratio)
    if state in ("finished", "failed"):
        title = finished(task, usual_s=usual_s).title
        drawn = bar(1.0) if state == "finished" else bar(ratio) if known else None
    else:
        at = f": {math.floor(ratio * 100)}%" if known else ""
        mark = {"running": "⏳", "stalled": "⏸", "late": "⏰"}[state]
        said = {"running": "", "stalled": " (stalled)", "late": " (running late)"}[state]
        title = f"{mark} {name}{at}{said}"
        drawn = bar(ratio) if known else None
    lines = [drawn] if drawn else []
    lines += _body(task, secrets, space_title, None).split("\n")
    if state == "stalled" and quiet_s is not None:
        lines.append(f"No report for {duration_words(quiet_s)}")
    elif state == "late" and usual_s is not None:
        lines.append(f"Running late: usually {duration_words(usual_s)}")
    elif state == "running" and left_s is not None:
        lines.append(f"About {left_words(left_s)} left")
    if link:
        lines.append(link)
    return Live(title, tuple(lines), state)


def test_message(*, space_title: str | None = None, link: str | None = None) -> Message:
    """The message a channel's test sends."""
    where = f" for {_clip(space_title, 200)}" if space_title else ""
    lines = [f"This channel works: Headway will send task notifications here{where}."]
    if link:
        lines.append(link)
    return _message("Headway test message", "\n".join(lines), "test")


# --- The parts -----------------------------------------------------------------------------


def _message(title: str, body: str, kind: Kind) -> Message:
    return Message(title, body, kind, _LEVELS[kind])


def _body(
    task: Mapping[str, Any],
    secrets: re.Pattern[str] | None,
    space_title: str | None,
    link: str | None,
) -> str:
    name = _name(task, secrets)
    lines = [f"{_said(space_title, 200, secrets)} › {name}" if space_title else name]
    progress = task.get("progress") or {}
    if progress.get("aggregated"):
        done, count = _number(progress.get("current")), _number(progress.get("end"))
        lines.append(f"Steps: {done} of {count} done")
    elif progress.get("current") is not None:
        counts = _number(progress["current"])
        if progress.get("end"):
            counts += f" / {_number(progress['end'])}"
        at = _percent(progress, finished=bool(task.get("finished_at")))
        lines.append(f"Progress: {counts}" + (f" ({at})" if at else ""))
    values = progress.get("values") or {}
    log = values.get("log") if isinstance(values, Mapping) else None
    if isinstance(log, str) and log.strip():
        lines.append(f"Log: {_said(log.strip(), MAX_LOG_CHARS, secrets)}")
    if link:
        lines.append(link)
    return "\n".join(lines)


def _failure(task: Mapping[str, Any], secrets: re.Pattern[str] | None) -> str | None:
    values = (task.get("progress") or {}).get("values")
    own = values.get("error") if isinstance(values, Mapping) else None
    if not (isinstance(own, str) and own.strip()):
        own = None  # no error said: the task did not fail itself
    steps = [child for child in task.get("children") or () if isinstance(child, Mapping)]
    failed = [
        (child, why)
        for child in steps
        if child.get("finished_at") and (why := _failure(child, secrets))
    ]
    parts = [_said(own, MAX_LOG_CHARS, secrets)] if own else []
    if failed:
        named = "; ".join(
            f"{_name(child, secrets)}: {why}" for child, why in failed[:MAX_FAILED_STEPS_NAMED]
        )
        more = len(failed) - MAX_FAILED_STEPS_NAMED
        if more > 0:
            named += f"; {more} more"
        parts.append(f"{len(failed)} of {len(steps)} steps failed ({named})")
    return "; ".join(parts) or None


def _name(task: Mapping[str, Any], secrets: re.Pattern[str] | None) -> str:
    title = task.get("title")
    return _said(title, 200, secrets) if isinstance(title, str) and title.strip() else UNTITLED


def _percent(progress: Mapping[str, Any], *, finished: bool = False) -> str | None:
    ratio = progress.get("ratio")
    if finished:
        return "finished"
    if isinstance(ratio, int | float) and math.isfinite(ratio):
        return f"{math.floor(ratio * 100)}%"
    return None


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "?"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _uuids(task: Mapping[str, Any]) -> re.Pattern[str]:
    """A pattern of every uuid the task's JSON holds (its own, its space's, its parent's,
    its children's), in either spelling and even within a longer text, and of any other
    uuid-shaped text (`ANY_UUID`), to take out of the text users wrote."""
    found: set[str] = set()

    def collect(node: Mapping[str, Any]) -> None:
        for key in ("uuid", "space_uuid", "parent_uuid"):
            value = node.get(key)
            if isinstance(value, str) and value:
                found.add(value.lower())
        for child in node.get("children") or ():
            if isinstance(child, Mapping):
                collect(child)

    collect(task)
    spellings = {form for value in found for form in (value, value.replace("-", ""))}
    if not spellings:
        return ANY_UUID
    family = "|".join(re.escape(s) for s in sorted(spellings))
    return re.compile(f"{family}|{ANY_UUID.pattern}", re.IGNORECASE)


def _said(text: str, limit: int, secrets: re.Pattern[str] | None) -> str:
    """Text a reporter wrote, as a message shows it: its uuids taken out (before it is
    cut, so that no part of one is left), without bidi controls (it cannot turn the
    server's words around), on one line, at most `limit` characters."""
    return _clip(without_bidi_controls((secrets or ANY_UUID).sub("…", text)), limit)


def _plain(task: Any) -> Mapping[str, Any]:
    """The task as plain JSON values (a `domain.TaskView` is encoded and decoded once)."""
    if isinstance(task, Mapping):
        return task
    import msgspec

    decoded: dict[str, Any] = json.loads(msgspec.json.encode(task))
    return decoded
