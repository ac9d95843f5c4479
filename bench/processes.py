"""Server processes the harness starts: the bare-ASGI baseline and `headway serve`.

Every process is started here on a free 127.0.0.1 port, remembered by its PID and
stopped by that PID (SIGTERM, then SIGKILL after a grace period). Nothing else is ever
signalled.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _start_s() -> float:
    """Seconds a server has to answer once started: 30, or HEADWAY_BENCH_START_S (the test
    suite's bench smoke, at idle priority beside tests that can keep both cores busy for
    most of a minute, gives it 240)."""
    given = os.environ.get("HEADWAY_BENCH_START_S") or "30"
    try:
        seconds = float(given)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 3600:  # nan and inf fail this too
        raise SystemExit(f"HEADWAY_BENCH_START_S={given!r}: give seconds, above 0, at most 3600")
    return seconds


START_S = _start_s()


class StartError(RuntimeError):
    """A server did not come up; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    """One server the harness started, with its log file."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _log: object = field(repr=False, default=None)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def wait_ready(self, path: str, timeout: float = START_S) -> None:
        """Poll `path` until it answers 200; raise StartError with the log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StartError(f"{self.name} exited with {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(self.url + path, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise StartError(f"{self.name} did not answer {path} within {timeout} s: {self.log()}")

    def log(self, tail: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:].strip()
        except OSError:
            return ""

    def rss_bytes(self) -> int:
        """Resident set size of the server process (VmRSS from /proc)."""
        return _status_kib(self.pid, "VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        """The highest resident set size the process has had (VmHWM)."""
        return _status_kib(self.pid, "VmHWM") * 1024

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def stop(self, grace: float = 10.0) -> None:
        """Stop this process by its PID: SIGTERM, then SIGKILL if it lingers."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=grace)
        if hasattr(self._log, "close"):
            self._log.close()  # type: ignore[union-attr]


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


def _spawn(name: str, command: list[str], env: dict[str, str], workdir: Path) -> ServerProcess:
    port = int(env["BENCH_PORT"])
    log_path = workdir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    return ServerProcess(name, process, port, log_path, log)


def _clean_env(code: Path | None = None) -> dict[str, str]:
    """The harness's environment without any HEADWAY_ setting the caller may have set;
    with `code`, that checkout first on PYTHONPATH, so that its `headway` is imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
    paths = [str(code) if code else None, str(ROOT), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return env


def start_baseline(workdir: Path, env: Mapping[str, str] | None = None) -> ServerProcess:
    """The bare-ASGI app under uvicorn with Headway's server settings: uvloop, httptools,
    one worker, no access log (see `headway.api.server.server_config`). `env`: the calibration's
    `BENCH_BODY_BYTES` and `BENCH_BURN_US` (see `bench.baseline`)."""
    port = free_port()
    env = {**_clean_env(), "BENCH_PORT": str(port), **(env or {})}
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.baseline:app",
        "--host",
        HOST,
        "--port",
        str(port),
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--workers",
        "1",
        "--no-access-log",
        "--log-level",
        "warning",
        "--lifespan",
        "off",
    ]
    server = _spawn("baseline", command, env, workdir)
    try:
        server.wait_ready("/")
    except BaseException:
        server.stop()
        raise
    return server


def headway_command() -> list[str]:
    """`headway serve` from this interpreter's environment."""
    script = Path(sys.executable).parent / "headway"
    if script.exists():
        return [str(script), "serve"]
    found = shutil.which("headway")
    return [found, "serve"] if found else [sys.executable, "-m", "headway.cli", "serve"]


def start_headway(
    name: str,
    workdir: Path,
    database_url: str,
    redis_url: str | None = None,
    *,
    wait: bool = True,
    env: Mapping[str, str] | None = None,
    code: Path | None = None,
) -> ServerProcess:
    """`headway serve` on a free port. With no redis_url: the embedded default (SQLite
    file, progress in process memory, worker in process). `env` adds `HEADWAY_` settings
    (e.g. `{"HEADWAY_RATE_LIMITS": "false"}`); without it every other setting is the
    service's default. With `wait` false, the caller waits (`wait_ready("/up")`), so
    several servers can start at once. `code`: another checkout of the repository whose
    `headway` package the server runs (first on its PYTHONPATH; the venv is shared);
    without it, this checkout's."""
    port = free_port()
    settings = {
        **_clean_env(code),
        "BENCH_PORT": str(port),
        "HEADWAY_HOST": HOST,
        "HEADWAY_PORT": str(port),
        "HEADWAY_DATABASE_URL": database_url,
        "HEADWAY_RUN_WORKER": "true",
    }
    if redis_url is not None:
        settings["HEADWAY_REDIS_URL"] = redis_url
    settings.update(env or {})
    server = _spawn(name, headway_command(), settings, workdir)
    if not wait:
        return server
    try:
        server.wait_ready("/up")
    except BaseException:
        server.stop()
        raise
    return server


# --- CPU and memory of processes the harness did not start itself ----------------------
# PostgreSQL (pg_ctl daemonizes the postmaster, which forks a backend per connection) and
# Redis are started by tests/servers.py; their CPU is read here, never signalled.


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _children_of() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry.name))[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        found.setdefault(parent, []).append(int(entry.name))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of `pid` and every live descendant, plus what its
    children that already exited used (the root's cutime and cstime, which the kernel adds
    when it reaps them): e.g. a PostgreSQL postmaster and its backends."""
    children = _children_of()
    total = 0.0
    pending = [pid]
    root = True
    while pending:
        current = pending.pop()
        try:
            fields = _stat_fields(current)
        except OSError:
            continue
        ticks = int(fields[11]) + int(fields[12])
        if root:
            ticks += int(fields[13]) + int(fields[14])
            root = False
        total += ticks / CLOCK_TICKS
        pending.extend(children.get(current, []))
    return total


def postmaster_pid(data_directory: Path) -> int | None:
    """The PID PostgreSQL wrote in `postmaster.pid` (its first line), if it runs."""
    try:
        return int((data_directory / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, summed over its CPUs (from
    /proc/stat; idle and iowait count as not busy)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    idle = fields[3] + fields[4]
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


class RssSampler:
    """Samples a process's VmRSS every `interval` seconds in a thread, from `start()`
    until `stop()`: the RSS just before, and the peak of the samples (and of the last
    read at stop)."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.before = _status_kib(pid, "VmRSS") * 1024
        self.peak = self.before
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _read(self) -> None:
        try:
            rss = _status_kib(self.pid, "VmRSS") * 1024
        except (OSError, RuntimeError):
            return
        self.samples += 1
        self.peak = max(self.peak, rss)

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self._read()

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self._read()

    @property
    def growth(self) -> int:
        return self.peak - self.before
