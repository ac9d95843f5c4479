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
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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

    def wait_ready(self, path: str, timeout: float = 30.0) -> None:
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


def _clean_env() -> dict[str, str]:
    """The harness's environment without any HEADWAY_ setting the caller may have set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def start_baseline(workdir: Path) -> ServerProcess:
    """The bare-ASGI app under uvicorn with Headway's server settings: uvloop, httptools,
    one worker, no access log (see `headway.cli._serve`)."""
    port = free_port()
    env = {**_clean_env(), "BENCH_PORT": str(port)}
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
) -> ServerProcess:
    """`headway serve` on a free port. With no redis_url: the embedded default (SQLite
    file, progress in process memory, worker in process). `env` adds `HEADWAY_` settings
    (e.g. `{"HEADWAY_RATE_LIMITS": "false"}`); without it every other setting is the
    service's default. With `wait` false, the caller waits (`wait_ready("/up")`), so
    several servers can start at once."""
    port = free_port()
    settings = {
        **_clean_env(),
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
