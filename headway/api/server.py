"""The HTTP server of `headway serve`: uvicorn with httptools, behind a protocol that
refuses what would freeze or exhaust the process (huge or slow request heads, slow bodies,
more connections than it can hold), each refusal a JSON error.

`server_config(settings)` builds the server, so tests run the very server users run;
`serve(settings, workers)` runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from collections.abc import Callable
from typing import Any

import httptools
import msgspec
import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState
from uvicorn.supervisors import Multiprocess

from ..config import Settings
from ..domain.errors import error_body
from ..ops import metrics
from ..ops.logs import server_log_config
from .responses import NOSNIFF
from .scope import CONNECTION

log = logging.getLogger("headway")

MAX_REQUEST_TARGET = 8 * 1024
"""Bytes of URL (the target in the request line) a request may send; beyond: 431."""

MAX_HEAD = 16 * 1024
"""Bytes a request may send before its headers are complete (request line and every
header); beyond: 431. httptools joins a header that arrives in pieces by copying it whole
at each piece, so an unbounded head costs time quadratic in its size (25 s of CPU for
128 MB), on the one thread every client of the process shares."""

FILES_BESIDES_CONNECTIONS = 256
"""Open files a process needs besides its connections: database and Redis pools,
listening sockets, logs."""


class ServerConfig(uvicorn.Config):
    """uvicorn's configuration, carrying the settings the protocol enforces. Picklable:
    with several workers, each process receives it."""

    def __init__(self, app: Any, *, settings: Settings, **options: Any) -> None:
        super().__init__(app, **options)
        self.settings = settings


def server_config(settings: Settings, *, workers: int = 1, app: Any = None) -> ServerConfig:
    """The server of `headway serve`: the app of `settings` (or `app`), on `settings.host`
    and `settings.port`, with `HeadwayProtocol`. With several workers, each process
    builds its own app from the environment."""
    if workers > 1:
        target: Any = "headway.app:app_from_env"
    elif app is not None:
        target = app
    else:
        from ..app import create_app

        target = create_app(settings)
    return ServerConfig(
        target,
        settings=settings,
        factory=workers > 1,
        host=settings.host,
        port=settings.port,
        workers=workers,
        http=HeadwayProtocol,
        # uvicorn would believe X-Forwarded-For from 127.0.0.1 and rewrite the client
        # address before Headway sees it; Headway believes forwarding headers from
        # HEADWAY_TRUSTED_PROXIES only (`api.addresses.ClientAddresses`).
        proxy_headers=False,
        ws="none",
        lifespan="on",
        log_level="warning",
        log_config=server_log_config(),
        access_log=False,  # uvicorn's own; HEADWAY_ACCESS_LOG is the app's (headway.ops.logs)
    )


def serve(settings: Settings, workers: int = 1) -> int:
    """Run the server until it is stopped; the process's exit status."""
    raise_open_file_limit(settings.max_connections + FILES_BESIDES_CONNECTIONS)
    config = server_config(settings, workers=workers)
    if workers > 1:
        supervisor = Multiprocess(config, sockets=[config.bind_socket()])
        supervisor.run()
        # A worker process that failed to start (its database unreachable, say) stops the
        # whole server: say so in the exit status, so that a supervisor restarts it.
        failed = any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes)
        return STARTUP_FAILURE if failed else 0
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else STARTUP_FAILURE


def raise_open_file_limit(needed: int) -> None:
    """Raise this process's soft limit on open files to its hard limit when the soft one
    is below `needed`: every connection holds a file, and a process out of files stops
    accepting anyone. Worker processes inherit the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open files limit from %d: %s", soft, exc)
        return
    if target < needed:
        log.warning(
            "open files are limited to %d, below the %d HEADWAY_MAX_CONNECTIONS needs",
            target,
            needed,
        )


class RequestTargetTooLong(Exception):
    """Raised from the parser's URL callback, which stops the parser at once."""


class ConnectionControl:
    """What a request's answer may do to its connection, given to the app in the scope's
    `extensions` under `CONNECTION`: close it at once (`abort`, for a reader that stopped
    reading), and be told when the server shuts down (`on_shutdown`, set by the answer)."""

    __slots__ = ("_transport", "on_shutdown")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.on_shutdown: Callable[[], None] | None = None

    def abort(self) -> None:
        self._transport.abort()


class HeadwayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing with a JSON error and closing:

    - 431 when a request's URL passes MAX_REQUEST_TARGET bytes or its head MAX_HEAD;
    - 408 when a head is not complete `header_timeout` seconds after the connection
      opened (first request) or after its first byte (later ones; the wait between
      requests stays uvicorn's keep-alive timeout); or a body `body_timeout` seconds
      after its head (without a 408 if the answer has begun);
    - 503 (`Retry-After: 1`) to every request of a connection accepted while the process
      held `max_connections`; the connections held before it are served as usual.

    Timers are armed only for a head or body still incomplete when a read ends: a request
    that arrives in one piece costs none.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        assert isinstance(config, ServerConfig)
        self._max_connections = config.settings.max_connections
        self._header_timeout = config.settings.header_timeout
        self._body_timeout = config.settings.body_timeout
        self._in_head = False  # a request has begun, its headers are not complete
        self._in_body = False  # its headers are complete, its body is not
        self._heads = 0  # heads completed on this connection
        self._head_room = MAX_HEAD
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._control: ConnectionControl | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._max_connections:
            self.app = _shed
        self._head_timer = self.loop.call_later(self._header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if not self._in_body:
            # Whatever is read outside a body is the head of a request; a read that passes
            # the room left is parsed only up to it, to learn whether the head ends there.
            room = self._head_room
            if len(data) > room:
                heads = self._heads
                self._feed(data[:room])
                if self.transport.is_closing():
                    return
                if self._heads == heads:
                    self._refuse(431, f"The request head is larger than {MAX_HEAD} bytes.")
                    return
                self.data_received(data[room:])
                return
            self._head_room = room - len(data)
        self._feed(data)
        if self._in_head:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self._header_timeout, self._head_timed_out)
        elif self._in_body and self._body_timer is None:
            self._body_timer = self.loop.call_later(self._body_timeout, self._body_timed_out)

    def _feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, RequestTargetTooLong):
                message = f"The request URL is longer than {MAX_REQUEST_TARGET} bytes."
                self._refuse(431, message)
            else:
                self._refuse(400, "Invalid HTTP request.")
        except httptools.HttpParserUpgrade:
            pass  # no upgrade is served: the request is answered as an ordinary one
        except httptools.HttpParserError:
            self._refuse(400, "Invalid HTTP request.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_REQUEST_TARGET:
            raise RequestTargetTooLong

    def on_headers_complete(self) -> None:
        self._in_head, self._in_body = False, True
        self._heads += 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._control = ConnectionControl(self.transport)
        self.scope.setdefault("extensions", {})[CONNECTION] = self._control  # type: ignore[typeddict-item]
        super().on_headers_complete()

    def shutdown(self) -> None:
        """At shutdown: a long answer (a live stream) is asked to end, then the rest of
        the connection's shutdown is uvicorn's."""
        control = self._control
        if control is not None and control.on_shutdown is not None:
            control.on_shutdown()
        super().shutdown()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._head_room = MAX_HEAD
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        seconds = f"{self._header_timeout:g}"
        self._refuse(408, f"The request headers did not arrive within {seconds} seconds.")

    def _body_timed_out(self) -> None:
        self._body_timer = None
        seconds = f"{self._body_timeout:g}"
        self._refuse(408, f"The request body did not arrive within {seconds} seconds.")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with `message` and close, unless an answer has begun: then only
        close. The request the app is handling, if any, sees the client gone."""
        if self.transport.is_closing():
            return
        metrics.refused("header_too_large" if status == 431 else "timeout")
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        body = msgspec.json.encode(error_body(message))
        head = [STATUS_LINE[status]]
        for name, value in (*self.server_state.default_headers, *_REFUSAL_HEADERS):
            head += (name, b": ", value, b"\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.transport.close()


_REFUSAL_HEADERS = (
    (b"content-type", b"application/json"),
    (b"cache-control", b"no-store"),
    NOSNIFF,
)

_SHED_BODY = msgspec.json.encode(
    error_body("The server holds as many connections as it can; retry in a second.")
)
_SHED_HEADERS = [
    *_REFUSAL_HEADERS,
    (b"retry-after", b"1"),
    (b"content-length", str(len(_SHED_BODY)).encode()),
    (b"connection", b"close"),
]


async def _shed(_scope: Any, _receive: Any, send: Any) -> None:
    """The app of a connection over `max_connections`: 503, then the connection closes."""
    metrics.refused("connections")
    await send({"type": "http.response.start", "status": 503, "headers": _SHED_HEADERS})
    await send({"type": "http.response.body", "body": _SHED_BODY})
