"""Real servers for tests, started one way each:

- `LiveServer`: a real `headway serve`, a process of its own on a free port, with only the
  HEADWAY_ variables a test gives it, ready once `GET /up` answers 200, stopped by its PID
  (`HeadwayProcess` is the same for the commands that serve no port, `headway worker`);
- `serving`: the very server `headway serve` runs, in a thread of the test's process, for
  tests that reach into the app (its state, constants they patch);
- `Gate`: a small HTTP server in front of another that refuses (503, 429) or answers
  what a test crafts, delays, or is not there at all, before it passes requests on,
  recording each one;
- `LosingProxy`: a TCP proxy in front of another server that passes a request on, reads
  the whole answer (the server did the work), and resets the connection instead of
  passing the answer back: an answer lost on its way.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest

from .servers import free_port

if TYPE_CHECKING:
    from headway.config import Settings

T = TypeVar("T")

# A hang guard, not a speed bound: a server that exits fails at once; several worker
# processes starting beside a busy suite on two cores took more than 30 s.
STARTUP_SECONDS = 120
STOP_SECONDS = 15
# How `headway serve` exits once shut down by SIGTERM: uvicorn raises the signal again
# after its shutdown, so that the process ends as one ended by it.
STOPPED_BY_SIGTERM = -signal.SIGTERM
# SO_LINGER on, for 0 s: closing the socket resets the connection.
LINGER_NONE = struct.pack("ii", 1, 0)


def timing_its_exit(script: str) -> str:
    """`script`, printing at its very end `exit took SECONDS`: the time from the end of its
    code to its last exit handler (registered first, it runs after the client's flush),
    without the interpreter's start, which a busy machine makes slow."""
    return (
        "import atexit, time\n"
        "atexit.register(lambda: print(f'exit took {time.monotonic() - ENDED:.3f}'))\n"
        + script
        + "\nENDED = time.monotonic()\n"
    )


def exit_seconds(stdout: str) -> float:
    """What `timing_its_exit`'s script printed last."""
    return float(stdout.strip().splitlines()[-1].removeprefix("exit took "))


def environment(**variables: str) -> dict[str, str]:
    """This process's environment for a command: no HEADWAY_ variable but `variables`,
    and this virtualenv's `headway` first on the PATH."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("HEADWAY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(variables)
    return env


def headway_command() -> list[str]:
    """The `headway` command a user runs: this virtualenv's script, or the module."""
    script = Path(sys.executable).with_name("headway")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "headway.cli"]


class HeadwayProcess:
    """`headway ARGS` running in `directory` as a process of its own, with this process's
    environment but only the HEADWAY_ variables given (`env`, with their full names),
    its output and errors in files of `directory` (a pipe nobody reads could block it).
    `command` is the `headway` to run (default: this virtualenv's). `start()` may be
    called again once stopped; the files are then new."""

    def __init__(
        self, directory: Path, *args: str, command: list[str] | None = None, **env: str
    ) -> None:
        self.directory = Path(directory)
        self.args = args
        self.command = command or headway_command()
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._output: Path | None = None
        self._errors: Path | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def start(self) -> HeadwayProcess:
        assert self.process is None, "already running"
        prefix = f"headway-{self.args[0]}-"
        out, output = tempfile.mkstemp(dir=self.directory, prefix=prefix, suffix=".out")
        err, errors = tempfile.mkstemp(dir=self.directory, prefix=prefix, suffix=".err")
        try:
            self.process = subprocess.Popen(
                [*self.command, *self.args],
                cwd=self.directory,
                env=environment(**self.env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        finally:
            os.close(out)
            os.close(err)
        self._output, self._errors = Path(output), Path(errors)
        return self

    def output(self) -> str:
        """What it printed on its standard output so far."""
        return self._output.read_text(errors="replace") if self._output else ""

    def errors(self) -> str:
        """What it printed on its standard error so far."""
        return self._errors.read_text(errors="replace") if self._errors else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_SECONDS) -> int:
        """Send `sig` to its PID and wait for it to exit (killed after `timeout`); its
        exit status (negative: the signal that ended it)."""
        assert self.process is not None, "not started"
        process, self.process = self.process, None
        if process.poll() is None:
            os.kill(process.pid, sig)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"headway {self.args[0]} did not stop within {timeout} s of {sig!r}")

    def __enter__(self) -> HeadwayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.stop()


class LiveServer(HeadwayProcess):
    """A real `headway serve` on 127.0.0.1 (`args` after `serve`, `env` as for
    `HeadwayProcess`), on a free port unless given one. `start()` returns once it answers
    `GET /up` with 200, and fails if it exits first or does not answer within `startup_s`."""

    def __init__(
        self,
        directory: Path,
        *args: str,
        port: int | None = None,
        command: list[str] | None = None,
        startup_s: float = STARTUP_SECONDS,
        **env: str,
    ) -> None:
        self.startup_s = startup_s
        self.port = port or free_port()
        self._chosen = port is None  # a port taken meanwhile by another is chosen again
        super().__init__(
            directory, "serve", *args, command=command, HEADWAY_PORT=str(self.port), **env
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        super().start()
        assert self.process is not None
        deadline = time.monotonic() + self.startup_s
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/up", timeout=5).status_code == 200:
                    return self
            code = self.process.poll()
            if code is not None:
                self.process = None
                if self._chosen and "address already in use" in self.errors():
                    self.port = free_port()
                    self.env = {**self.env, "HEADWAY_PORT": str(self.port)}
                    return self.start()
                pytest.fail(f"headway serve exited with {code}:\n{self.errors()}")
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                pytest.fail(f"headway serve did not answer within {self.startup_s:g} s")
            time.sleep(0.05)

    def __enter__(self) -> LiveServer:
        return self.start()

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


@contextlib.contextmanager
def serving(settings: Settings, app: Any = None) -> Iterator[tuple[str, int]]:
    """The server `headway serve` runs (`server_config`), in a thread, on a free port;
    yields its address. Stops it (as `headway serve` stops at SIGTERM) on the way out."""
    import uvicorn

    from headway.api.server import server_config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    address = sock.getsockname()
    server = uvicorn.Server(server_config(settings, app=app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield address
    finally:
        server.should_exit = True
        thread.join(STOP_SECONDS)
        sock.close()


def wait_for(check: Callable[[], T | None], timeout: float = 15.0, interval: float = 0.02) -> T:
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
    key: str | None = None  # its Idempotency-Key


class Gate:
    """An HTTP server on its own port in front of `upstream`. Until `open()`, nothing
    listens there (connections are refused). Each request takes the next answer queued by
    `refuse()` (that status and Retry-After, the way Headway refuses) or `answer()`
    (whatever a test crafts), or, once none is left, waits `delay` seconds and is passed on
    (with its Idempotency-Key). Every answer is recorded."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.delay = 0.0
        self.arrivals: list[Arrival] = []
        self._refusals: deque[tuple[int, dict[str, str], bytes]] = deque()
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._http = httpx.Client(base_url=upstream, timeout=30)
        self._passing = threading.Event()  # cleared by `hold`: requests wait, unanswered
        self._passing.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def refuse(self, count: int, status: int, retry_after: str | None = None) -> None:
        headers = {"content-type": "application/json"}
        if retry_after is not None:
            headers["retry-after"] = retry_after
        body = json.dumps({"error": "Refused by the test's gate."}).encode()
        with self._lock:
            self._refusals.extend([(status, headers, body)] * count)

    def answer(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        """Answer the next request not yet answered so, as given, without passing it on."""
        with self._lock:
            self._refusals.append((status, headers or {}, body))

    def hold(self) -> Gate:
        """From now on, each request to be passed on waits, unanswered, until `release`."""
        self._passing.clear()
        return self

    def release(self) -> None:
        self._passing.set()

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
                key = self.headers.get("idempotency-key")
                with gate._lock:
                    refusal = gate._refusals.popleft() if gate._refusals else None
                if refusal is not None:
                    status, headers, answer = refusal
                else:
                    gate._passing.wait(60)
                    time.sleep(gate.delay)
                    passed = {"content-type": "application/json"}
                    if key is not None:
                        passed["idempotency-key"] = key
                    upstream = gate._http.request(
                        self.command, self.path, content=body, headers=passed
                    )
                    status, answer = upstream.status_code, upstream.content
                    headers = {"content-type": upstream.headers.get("content-type", "")}
                arrival = Arrival(time.monotonic(), self.command, self.path, status, key)
                gate.arrivals.append(arrival)
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


class LosingProxy:
    """A TCP proxy on its own port in front of `upstream` (`http://127.0.0.1:PORT`), for
    HTTP/1.1 with keep-alive. The first `losses` requests whose method is `method` are
    passed on and their whole answer read (so the server did the work and committed it);
    then the client's connection is reset (RST) instead of receiving that answer. Every
    other request and answer passes unchanged. `forwarded` counts the requests passed on."""

    def __init__(self, upstream: str, *, losses: int = 1, method: str = "POST") -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.losses = losses
        self.method = method.encode()
        self.forwarded = 0
        self.lost = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        incoming, answers = connection.makefile("rb"), upstream.makefile("rb")
        try:
            while True:
                request = _http_message(incoming)
                if request is None:
                    return
                upstream.sendall(request)
                answer = _http_message(answers)
                assert answer is not None, "the server closed the connection"
                with self._lock:
                    self.forwarded += 1
                    lose = request.startswith(self.method + b" ") and self.lost < self.losses
                    self.lost += lose
                if lose:  # close with a zero linger: the client reads a reset
                    connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    return
                connection.sendall(answer)
        except OSError:
            return
        finally:
            incoming.close()
            answers.close()
            connection.close()
            upstream.close()

    def close(self) -> None:
        self._listener.close()


def _http_message(stream: Any) -> bytes | None:
    """One whole HTTP/1.1 request or answer read from `stream` (its head, and a body of
    Content-Length bytes or chunks); None at the end of the stream."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = stream.readline()
        if not line:
            return None
        head += line
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = b""
        while True:
            size_line = stream.readline()
            body += size_line
            size = int(size_line.split(b";")[0], 16)
            body += stream.read(size + 2)
            if size == 0:
                return head + body
    return head + stream.read(int(fields.get(b"content-length", b"0")))
