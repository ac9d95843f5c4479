"""Real servers for the client's tests: one `headway serve` shared by the whole run, and
`Gate`, a small HTTP server in front of it that refuses (503, 429), delays, or is not
there at all, before it passes requests on, recording each one."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from .test_server import free_port, start_serve, wait_until_up

T = TypeVar("T")


@dataclass
class LiveServer:
    """A `headway serve` on 127.0.0.1 with its own SQLite file, rate limits off."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        self.process = start_serve(
            self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            PORT=str(self.port),
            RATE_LIMITS="false",
        )
        wait_until_up(self.process, self.url)
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def new_space(self, title: str = "Client tests") -> str:
        response = httpx.post(f"{self.url}/spaces", json={"title": title}, timeout=10)
        assert response.status_code == 201, response.text
        return response.json()["uuid"]

    def space(self, space: str) -> dict:
        response = httpx.get(f"{self.url}/spaces/{space}", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def task(self, task: str) -> dict:
        response = httpx.get(f"{self.url}/tasks/{task}", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()


_shared: LiveServer | None = None


def shared_server(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    """One server for every client test of the run, stopped when the run ends."""
    global _shared
    if _shared is None:
        _shared = LiveServer(tmp_path_factory.mktemp("headway-client")).start()
        config.add_cleanup(_shared.stop)
    return _shared


def wait_for(check: Callable[[], T | None], timeout: float = 5.0, interval: float = 0.02) -> T:
    """Call `check` until it returns something true; that value, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not true within {timeout} s: {check.__doc__ or check}")
        time.sleep(interval)


@dataclass(frozen=True)
class Arrival:
    at: float  # time.monotonic()
    method: str
    path: str
    status: int


class Gate:
    """An HTTP server on its own port in front of `upstream`. Until `open()`, nothing
    listens there (connections are refused). Each request takes the next refusal queued by
    `refuse()` (answered with that status and Retry-After, the way Headway refuses), or,
    once none is left, waits `delay` seconds and is passed on. Every answer is recorded."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.delay = 0.0
        self.arrivals: list[Arrival] = []
        self._refusals: deque[tuple[int, str | None]] = deque()
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._http = httpx.Client(base_url=upstream, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def refuse(self, count: int, status: int, retry_after: str | None = None) -> None:
        with self._lock:
            self._refusals.extend([(status, retry_after)] * count)

    def puts(self) -> list[Arrival]:
        return [arrival for arrival in self.arrivals if arrival.method == "PUT"]

    def open(self) -> Gate:
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle_one(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with gate._lock:
                    refusal = gate._refusals.popleft() if gate._refusals else None
                if refusal is not None:
                    status, retry_after = refusal
                    answer = json.dumps({"error": "Refused by the test's gate."}).encode()
                    headers = {"content-type": "application/json"}
                    if retry_after is not None:
                        headers["retry-after"] = retry_after
                else:
                    time.sleep(gate.delay)
                    upstream = gate._http.request(
                        self.command,
                        self.path,
                        content=body,
                        headers={"content-type": "application/json"},
                    )
                    status, answer = upstream.status_code, upstream.content
                    headers = {"content-type": upstream.headers.get("content-type", "")}
                gate.arrivals.append(Arrival(time.monotonic(), self.command, self.path, status))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = handle_one

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._http.close()


def environment(**variables: str) -> dict[str, str]:
    """This process's environment for a command: no HEADWAY_ variable but `variables`,
    and this virtualenv's `headway` first on the PATH."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("HEADWAY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(variables)
    return env
