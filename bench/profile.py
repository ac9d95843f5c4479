"""Where a server's time goes during a scenario: py-spy samples, summarized per function.

`py-spy record --format raw` writes collapsed stacks ("outer;...;inner count"). The
summary counts, per function (name and file, line numbers dropped), the share of samples
where it is running itself (self) and where it is anywhere on the stack (total). Only
samples of a busy thread count (py-spy leaves idle ones out), so shares are of the CPU
the server spent, not of wall time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    script = Path(sys.executable).parent / "py-spy"
    return str(script) if script.exists() else shutil.which("py-spy")


@dataclass
class Profiler:
    process: subprocess.Popen[bytes]
    output: Path
    limit_s: float


def start(pid: int, seconds: float, output: Path) -> Profiler | None:
    """Sample `pid` for `seconds` in the background; None when py-spy is not installed."""
    binary = py_spy()
    if binary is None:
        return None
    command = [
        binary, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
        "--rate", "200", "--format", "raw", "--nonblocking", "--output", str(output),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return Profiler(process, output, seconds + 30)


def finish(profiler: Profiler) -> dict[str, object]:
    """Wait for py-spy and summarize its samples (or say why there are none)."""
    try:
        _out, err = profiler.process.communicate(timeout=profiler.limit_s)
    except subprocess.TimeoutExpired:
        profiler.process.kill()
        profiler.process.communicate()
        return {"error": "py-spy did not finish in time"}
    if not profiler.output.exists():
        return {"error": f"py-spy wrote nothing: {err.decode(errors='replace').strip()[-300:]}"}
    return summarize(profiler.output.read_text())


def _short(frame: str) -> str:
    match = _FRAME.match(frame)
    if match is None:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/headway/", "/bench/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/headway/":
                path = "headway/" + path
            break
    return f"{match['name']} ({path})"


def summarize(collapsed: str, top: int = 30) -> dict[str, object]:
    """Self and total shares per function from collapsed stacks."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        count = int(match["count"])
        frames = [_short(f) for f in match["stack"].split(";") if f]
        # The first frame is the thread ("process 123:..."/"thread 0x..."), when present.
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for name in set(frames):
            anywhere[name] += count

    def share(counter: Counter[str]) -> list[dict[str, object]]:
        return [
            {"function": name, "percent": round(100 * n / samples, 1)}
            for name, n in counter.most_common(top)
        ]

    return {"samples": samples, "self": share(own), "total": share(anywhere)}


def render(name: str, summary: dict[str, object], top: int = 15) -> str:
    """A short plain-text report of one scenario's profile."""
    if "error" in summary:
        return f"{name}: {summary['error']}\n"
    lines = [f"{name}: {summary['samples']} samples"]
    for kind in ("self", "total"):
        lines.append(f"  top by {kind} time:")
        for entry in summary[kind][:top]:  # type: ignore[index]
            lines.append(f"    {entry['percent']:5.1f}%  {entry['function']}")
    return "\n".join(lines) + "\n"
