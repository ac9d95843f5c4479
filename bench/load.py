"""Driving a server with wrk: one bounded run, its figures, and the paths it covered."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LUA = Path(__file__).resolve().parent / "lua" / "spread.lua"
MARKER = "BENCH_RESULT "


class LoadError(RuntimeError):
    """wrk could not run or printed nothing the harness can read."""


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise LoadError("wrk is not installed: apt-get install wrk")
    return found


def wrk_version() -> str:
    try:
        out = subprocess.run([wrk_binary(), "--version"], capture_output=True, text=True).stdout
    except (LoadError, OSError):
        return "missing"
    return out.splitlines()[0].split(" Copyright")[0].strip() if out else "unknown"


@dataclass
class Load:
    """What to send: a method, the paths to spread requests over, and a body."""

    method: str
    paths: Sequence[str]
    body: str = ""


@dataclass
class LoadResult:
    """One wrk run as measured by wrk itself (latencies from its HdrHistogram, in µs)."""

    requests: int
    duration_s: float
    errors: dict[str, int]
    latency_us: dict[str, float]
    sent_per_thread: list[int]
    connections: int
    threads: int

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def run_wrk(
    url: str,
    load: Load,
    *,
    duration: float,
    connections: int,
    threads: int,
    workdir: Path,
    timeout: float = 10.0,
) -> LoadResult:
    """Run wrk against `url` for `duration` seconds and return its figures."""
    return finish(
        start_wrk(
            url,
            load,
            duration=duration,
            connections=connections,
            threads=threads,
            workdir=workdir,
            timeout=timeout,
        )
    )


@dataclass
class RunningLoad:
    process: subprocess.Popen[str]
    connections: int
    threads: int
    limit_s: float


def start_wrk(
    url: str,
    load: Load,
    *,
    duration: float,
    connections: int,
    threads: int,
    workdir: Path,
    timeout: float = 10.0,
) -> RunningLoad:
    """Start wrk without waiting for it (two at once measure two instances)."""
    threads = max(1, min(threads, connections))
    paths_file = workdir / f"paths-{abs(hash((url, load.method, len(load.paths))))}.txt"
    paths_file.write_text("\n".join(load.paths) + "\n")
    seconds = max(1, round(duration))
    command = [
        wrk_binary(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        f"--timeout={max(1, round(timeout))}s",
        "--latency",
        "-s",
        str(LUA),
        url,
        "--",
        load.method,
        str(paths_file),
        str(threads),
        load.body,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return RunningLoad(process, connections, threads, seconds + timeout + 30)


def finish(running: RunningLoad) -> LoadResult:
    """Wait for a wrk run (bounded) and parse its BENCH_RESULT line."""
    try:
        stdout, stderr = running.process.communicate(timeout=running.limit_s)
    except subprocess.TimeoutExpired:
        running.process.kill()
        running.process.communicate()
        raise LoadError(f"wrk did not finish within {running.limit_s:.0f} s") from None
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            data = json.loads(line[len(MARKER) :])
            return LoadResult(
                requests=data["requests"],
                duration_s=data["duration_us"] / 1e6,
                errors=data["errors"],
                latency_us=data["latency_us"],
                sent_per_thread=data["sent_per_thread"],
                connections=running.connections,
                threads=running.threads,
            )
    raise LoadError(f"wrk exited {running.process.returncode}: {(stderr or stdout).strip()[-500:]}")


def not_reached(paths: Sequence[str], result: LoadResult, in_flight: int) -> list[str]:
    """The paths a spread.lua run has not surely reached (see its striping rule).

    Thread k walks lines k, k+T, ... in order. The last `in_flight` requests it sent may
    not have been answered, so they do not count. Before the run, wrk calls `request()`
    once on its first thread to check the script and never sends that request, so the
    first path of a stripe only counts once the thread has wrapped around.
    """
    threads = len(result.sent_per_thread)
    left: list[str] = []
    for k, sent in enumerate(result.sent_per_thread):
        stripe = list(paths[k::threads])
        answered = sent - in_flight
        if answered - 1 >= len(stripe):
            continue
        left.append(stripe[0])
        left.extend(stripe[max(1, answered) :])
    return left
