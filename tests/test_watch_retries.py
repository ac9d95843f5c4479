"""`headway watch` refused by the server (429 over a rate, 503 over a budget or with a
dependency down): it waits what the answer's Retry-After asks, read as the Python client
reads it (seconds or an HTTP date in any zone, clamped to 0-60 s, garbage ignored), and
says why and how long on its last line, sending nothing meanwhile; without a Retry-After
it keeps its own backoff; Ctrl-C ends it while it waits. On a real server whose read rate
refuses it, and on a stand-in that refuses as a test says."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from headway.app import create_app
from headway.cli.board import Board
from headway.client.events import RECONNECTING, Event, follow
from headway.config import Settings

from .live_server import environment, serving, wait_for
from .test_watch import NOW, Refusal, StreamServer, Terminal, drawn

SNAPSHOT = [b'id: 0\nevent: snapshot\ndata: {"title":"Nightly","icon":null,"tasks":[]}\n\n']
EMPTY = r"live · 0 tasks"


def in_seconds(seconds: float, zone: timezone) -> str:
    """An HTTP date `seconds` from now, written in `zone`."""
    return format_datetime(datetime.now(UTC).astimezone(zone) + timedelta(seconds=seconds))


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def watch(url: str, terminals: list[Terminal]) -> Terminal:
    terminal = Terminal(f"headway watch {url}", environment())
    terminals.append(terminal)
    return terminal


def fixed(text: str | None) -> Callable[[], str | None]:
    return lambda: text


def date_in(seconds: float, hours: int) -> Callable[[], str]:
    """An HTTP date `seconds` from the time it is asked for, in the zone `hours` from UTC."""
    return lambda: in_seconds(seconds, timezone(timedelta(hours=hours)))


# What a refusal's Retry-After makes the follower wait, with its default backoff (0.5 s
# first): the client's reading of it (0-60 s), never less than the backoff.
WAITS = {
    "429 seconds": (429, fixed("2"), "rate limited", 2.0),
    "503 seconds": (503, fixed("7"), "service unavailable", 7.0),
    "inf": (429, fixed("inf"), "rate limited", 60.0),
    "far ahead": (503, fixed("1e9"), "service unavailable", 60.0),
    "date in -0500": (429, date_in(30, -5), "rate limited", (28.5, 30.0)),  # whole seconds
    "date in +0900": (503, date_in(30, 9), "service unavailable", (28.5, 30.0)),
    "negative": (503, fixed("-5"), "service unavailable", 0.5),
    "zero": (503, fixed("0"), "service unavailable", 0.5),
    "garbage": (429, fixed("soon, maybe"), "rate limited", 0.5),
    "nan": (429, fixed("nan"), "rate limited", 0.5),
    "none": (503, fixed(None), "service unavailable", 0.5),
    "a proxy's 502": (502, fixed("3"), "Refused. (HTTP 502)", 3.0),
}


@pytest.mark.parametrize(("status", "header", "why", "wait"), WAITS.values(), ids=WAITS)
def test_a_refused_stream_waits_what_retry_after_asks_clamped_or_its_backoff(
    status: int, header: Callable[[], str | None], why: str, wait: float | tuple[float, float]
) -> None:
    with StreamServer([Refusal(status, header())]) as server:
        events = follow(f"http://127.0.0.1:{server.port}/spaces/s/events")
        event = next(events)  # told before the wait begins
        events.close()
    assert (event.event, event.data) == (RECONNECTING, why)
    low, high = wait if isinstance(wait, tuple) else (wait, wait)
    assert event.retry_in is not None and low <= event.retry_in <= high


def test_follow_sends_nothing_before_retry_after_and_its_backoff_grows_without_one() -> None:
    scripts = [Refusal(429, "1"), Refusal(503, "soon"), Refusal(503, "0"), SNAPSHOT]
    with StreamServer(scripts) as server:
        events = follow(f"http://127.0.0.1:{server.port}/spaces/s/events", backoff=(0.1, 1.0))
        told = [next(events) for _ in range(4)]
        events.close()
    assert [(event.data, event.retry_in) for event in told[:3]] == [
        ("rate limited", 1.0),
        ("service unavailable", 0.2),  # no Retry-After it can read: the backoff, doubled
        ("service unavailable", 0.4),  # 0 asked: the backoff, doubled again
    ]
    assert told[3].event == "snapshot"
    assert len(server.arrivals) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(server.arrivals)]
    assert 1.0 <= gaps[0] < 2.0
    assert 0.2 <= gaps[1] < 1.0 and 0.4 <= gaps[2] < 1.2


def test_the_board_says_why_it_waits_and_counts_down() -> None:
    board = Board()
    board.apply(Event(RECONNECTING, "rate limited", retry_in=12.0), NOW)
    assert "rate limited; retrying in 12 s · 0 tasks" in drawn(board, NOW)[-1]
    assert "rate limited; retrying in 8 s ·" in drawn(board, NOW + timedelta(seconds=4.5))[-1]
    waited = drawn(board, NOW + timedelta(seconds=12))[-1]
    assert "reconnecting: rate limited ·" in waited and "retrying" not in waited


def test_watch_waits_out_a_503s_http_date_then_goes_live(terminals: list[Terminal]) -> None:
    asked = in_seconds(2, timezone(timedelta(hours=1)))  # whole seconds: 1 to 2 s from now
    with StreamServer([Refusal(503, asked), SNAPSHOT], hold=True) as server:
        terminal = watch(f"http://127.0.0.1:{server.port}/spaces/s", terminals)
        terminal.wait_for(r"service unavailable; retrying in [12] s")
        terminal.wait_for(EMPTY)
        first, second = server.arrivals
        # Waited for the date (whole seconds: 1 to 2 s; late on a busy machine, never early).
        assert 0.5 <= second - first < 30
        assert terminal.interrupt() == 0


def test_watch_survives_garbage_and_inf_and_quits_at_ctrl_c_while_it_waits(
    terminals: list[Terminal],
) -> None:
    with StreamServer([Refusal(429, "soon, maybe"), Refusal(429, "inf")]) as server:
        terminal = watch(f"http://127.0.0.1:{server.port}/spaces/s", terminals)
        terminal.wait_for(r"rate limited; retrying in (60|59) s")
        first, second = server.arrivals  # the garbage got the backoff, 0.5 s
        assert 0.5 <= second - first < 30  # the backoff, not the 60 s a number would ask
        asked_at = time.monotonic()
        assert terminal.interrupt() == 0
        assert time.monotonic() - asked_at < 30  # at once, not after its 60 s wait
        assert server.connections == 2  # nothing more was sent while it waited
    assert "Traceback" not in terminal.text


@dataclass(frozen=True)
class Request:
    at: float  # time.monotonic() when it arrived
    path: str
    status: int | None = None
    retry_after: str | None = None


class Recorder:
    """An ASGI app in front of `app` that notes every HTTP request it passes on: when it
    arrived, its path, and the status and Retry-After it was answered with."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[Request] = []

    def to(self, path: str) -> list[Request]:
        return [request for request in self.requests if request.path == path]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrived = Request(time.monotonic(), scope["path"])
        self.requests.append(arrived)
        index = len(self.requests) - 1

        async def noted(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", ()))
                retry_after = headers.get(b"retry-after")
                self.requests[index] = Request(
                    arrived.at,
                    arrived.path,
                    message["status"],
                    retry_after.decode() if retry_after is not None else None,
                )
            await send(message)

        return await self.app(scope, receive, noted)


class Cutter:
    """A TCP proxy on 127.0.0.1 in front of `upstream` (host, port); `cut()` drops every
    connection open through it, as a network that fails does; new ones pass."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                incoming, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                outgoing = socket.create_connection(self.upstream)
            except OSError:  # the upstream is gone: the connection drops, as it would
                incoming.close()
                continue
            with self._lock:
                self._open += [incoming, outgoing]
            for source, target in ((incoming, outgoing), (outgoing, incoming)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with self._lock:
            dropped, self._open = self._open, []
        for connection in dropped:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        self._listener.close()
        self.cut()


def test_watch_waits_out_the_read_rates_retry_after_and_sends_nothing_meanwhile(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    # One task read a second: the watch's snapshot of three tasks puts its address 2 s in
    # debt, so the stream it reopens after a drop is refused for 2 to 3 s.
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/headway.db", rate_reads="1/second", run_worker=False
    )
    recorder = Recorder(create_app(settings))
    with serving(settings, app=recorder) as address:
        url = f"http://{address[0]}:{address[1]}"
        space = httpx.post(f"{url}/spaces", json={"title": "Rated"}, timeout=10).json()["uuid"]
        for title in ("One", "Two", "Three"):
            answer = httpx.post(f"{url}/spaces/{space}/tasks", json={"title": title}, timeout=10)
            assert answer.status_code == 201, answer.text
        proxy = Cutter(address)
        try:
            terminal = watch(f"http://127.0.0.1:{proxy.port}/spaces/{space}", terminals)
            terminal.wait_for(r"live · 3 tasks")
            proxy.cut()
            terminal.wait_for(r"rate limited; retrying in \d+ s")
            terminal.wait_for(r"rate limited; retrying in \d+ s[\s\S]*live · 3 tasks")
            path = f"/spaces/{space}/events"
            first, refused, again = wait_for(lambda: recorder.to(path)[2:] and recorder.to(path))
            assert (first.status, refused.status, again.status) == (200, 429, 200)
            asked = int(refused.retry_after or "")
            assert 1 <= asked <= 3
            assert f"rate limited; retrying in {asked} s" in terminal.text
            assert asked <= again.at - refused.at < asked + 1.5
            assert terminal.interrupt() == 0
            assert len(recorder.to(path)) == 3  # nothing sent in between, nor after
        finally:
            proxy.close()
