"""The one way into the app: every HTTP request is matched in one route table
(`RouteTable`) and answered by `HeadwayApp`, with one error path, one metrics path and
one header policy, whatever its route.

The table is compiled once: a path is split into its segments, and only the routes with
as many segments and the same first one are tried, in the table's order (the most used
first; the first route of a path names the methods in a 405's Allow header). A
parameter is one whole, non-empty path segment. There are no slash redirects: `/spaces/`
is a JSON 404.

Starlette's router and its two exception middlewares cost about a tenth of a report;
they are not used. Starlette's app remains for its lifespan and `state`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from time import perf_counter
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import URL, Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..domain.errors import UNAVAILABLE_MESSAGE, HeadwayError, Unavailable, error_body
from ..ops import logs, metrics
from ..ops.dependencies import unavailable
from .endpoints import Request, Route
from .events import EventStream
from .responses import ANY_ORIGIN, NOSNIFF, JSONResponse, error_response, preflight_response
from .streaming import JSONStream

log = logging.getLogger("headway")

RETRY_SOON = {"retry-after": "5"}
# Answers that send their start before anything else (a whole answer, a live stream):
# none can fail before it starts, and none needs watching as it is sent.
_STARTS_AT_ONCE = frozenset({Response.__call__, EventStream.__call__})
# Answers that may fail before they start, and say whether they `started`: sent without a
# wrapper on each of their messages (a parent's answer is many).
_SAY_STARTED = frozenset({JSONStream.__call__})


class RouteTable:
    """Every route of the app, in the order they are tried."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        by_start: dict[tuple[int, str], list[_Compiled]] = {}
        prefixes = []
        for route in self.routes:
            if route.prefix:
                prefixes.append(route)
                continue
            segments = route.segments
            if segments[1][1] is not None:
                raise ValueError(f"a route's first segment is no parameter: {route.path}")
            # The first two segments are the key (the empty one before the first slash is
            # every path's); the others are compared here.
            literals = tuple(
                (index, text) for index, (text, name) in enumerate(segments) if name is None
            )[2:]
            params = tuple(
                (index, name) for index, (_, name) in enumerate(segments) if name is not None
            )
            by_start.setdefault((len(segments), segments[1][0]), []).append(
                (route, route.methods, literals, params)
            )
        for prefix in prefixes:
            under = [r.path for r in self.routes if r.path.startswith(prefix.path + "/")]
            if under:
                raise ValueError(f"routes under the prefix {prefix.path}: {under}")
        self._by_start = {key: tuple(routes) for key, routes in by_start.items()}
        self._prefixes = tuple((route.path + "/", route) for route in prefixes)

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route of `method` and `path`, with the path's parameters; None if none
        serves them (`matching` says which routes have the path).

        A template ending in text matches before one trailing newline, as Starlette's
        router (a regular expression's `$`) had it: `/spaces\\n` is `/spaces`.
        """
        parts = path.split("/")
        candidates = self._by_start.get((len(parts), parts[1] if parts[1:] else ""))
        if candidates is not None:
            for route, methods, literals, params in candidates:
                if methods is not None and method not in methods:
                    continue
                for index, text in literals:
                    if parts[index] != text:
                        break
                else:
                    values = {}
                    for index, name in params:
                        value = parts[index]
                        if not value:
                            break
                        values[name] = value
                    else:
                        return route, values
        for start, route in self._prefixes:
            if path.startswith(start) and (route.methods is None or method in route.methods):
                return route, {}
        if path.endswith("\n"):
            found = self.find(method, path[:-1])
            if found is not None and found[0].segments[-1][1] is None:
                return found
        return None

    def matching(self, path: str, *, again: bool = True) -> list[Route]:
        """Every route whose template matches `path`, whatever the method, in order (a
        trailing newline taken as `find` takes it; `again` False: not)."""
        parts = path.split("/")
        found = [
            route
            for route, _, literals, params in self._by_start.get(
                (len(parts), parts[1] if parts[1:] else ""), ()
            )
            if all(parts[index] == text for index, text in literals)
            and all(parts[index] for index, _ in params)
        ]
        found.extend(route for start, route in self._prefixes if path.startswith(start))
        if not found and again and path.endswith("\n"):
            found = [r for r in self.matching(path[:-1], again=False) if r.segments[-1][1] is None]
        return found


# A route as the table tries it: the route, its methods, the segments to compare past
# the first (index, text) and its parameters (index, name).
_Compiled = tuple[
    Route, frozenset[str] | None, tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]
]


class HeadwayApp(Starlette):
    """The app: each HTTP request goes through the one route table to its endpoint.

    The endpoint is handed a `Request` carrying its client's `Visitor`. Its answer is a
    `Response`, whose headers are completed before it is sent and which is counted
    (headway.ops.metrics) under its route's template as it is returned; or any other ASGI
    callable (the MCP SDK's answer, the static files), completed and counted as its
    answer starts. Requests no route serves are counted as `unmatched`, and a 405 under
    the route whose path it is.

    Every answer says `X-Content-Type-Options: nosniff`; every answer but those of
    `/mcp` and the paths under it (which check Host and Origin themselves) says
    `Access-Control-Allow-Origin: *`, and an OPTIONS on a REST path that routes serve is
    a CORS preflight. An error is answered by `answer_error`, and the connection lives on;
    once the answer has started, it cuts it short: the server logs it and drops the
    connection.
    """

    def __init__(
        self,
        *,
        routes: Iterable[Route],
        instruments: metrics.Instruments | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.table = RouteTable(routes)
        self._metrics = instruments  # None: metrics are off, nothing is counted

    @property
    def routes(self) -> list[Any]:
        return list(self.table.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # the lifespan
            return
        scope["app"] = self
        method = scope["method"]
        path = scope["path"]
        rest = not path.startswith("/mcp") or (path != "/mcp" and path[4] != "/")
        found = self.table.find(method, path)
        if found is None:
            await self._unrouted(scope, receive, send, rest)
            return
        started = perf_counter()
        route, scope["path_params"] = found
        request = Request(scope, receive, send)
        try:
            answer = await route.endpoint(request)
        except Exception as exc:
            answer = await answer_error(request, exc)
        way = type(answer).__call__
        if way not in _STARTS_AT_ONCE and way not in _SAY_STARTED:
            await self._send(request, send, answer, route.path, started, rest)
            return
        # The most used way: a `Response` whose headers are complete before it is sent.
        if not rest or not getattr(answer, "rest_headers", False):
            answer.raw_headers = _completed(answer.raw_headers, rest)
        if self._metrics is not None:
            self._observe(route.path, method, answer.status_code, started)
        if way in _STARTS_AT_ONCE:  # nothing of it can fail before the answer starts
            await answer(scope, receive, send)
            return
        try:
            await answer(scope, receive, send)
        except Exception as exc:
            if answer.started:
                raise  # cut short: the server logs it and drops the connection
            error = await answer_error(request, exc)
            await _send_whole(error, scope, receive, send, rest)

    async def _send(
        self,
        request: Request,
        send: Send,
        answer: ASGIApp,
        template: str,
        started: float,
        rest: bool,
    ) -> None:
        """Send an answer that may fail before it starts, or writes its own headers,
        with the header policy, counted once; an error before it starts is answered in
        its place."""
        scope = request.scope
        method = scope["method"]
        counted = None if self._metrics is None else (self._observe, template, method, started)
        if isinstance(answer, Response):
            answer.raw_headers = _completed(answer.raw_headers, rest)
            if counted is not None:
                self._observe(template, method, answer.status_code, started)
            counted = None  # counted already: its start goes out as it is
        sending = _Sending(send, rest, counted)
        try:
            await answer(scope, request.receive, sending)
        except Exception as exc:
            if sending.started:
                if sending.answered:  # whole already: nothing to cut short
                    log.exception("unexpected error after an answer", exc_info=exc)
                    return
                raise
            error = await answer_error(request, exc)
            await _send_whole(error, scope, request.receive, sending, rest)

    async def _unrouted(self, scope: Scope, receive: Receive, send: Send, rest: bool) -> None:
        """A request no route serves: a CORS preflight, a 405 or a 404."""
        started = perf_counter()
        method = scope["method"]
        matching = self.table.matching(scope["path"])
        template = metrics.UNMATCHED
        served = set().union(*(route.methods or () for route in matching))
        if rest and method == "OPTIONS" and served:
            requested = Headers(scope=scope).get("access-control-request-headers")
            answer: Response = preflight_response(served, requested)
        else:
            partial = next((route for route in matching if route.methods), None)
            if partial is None:
                answer = not_found(scope)
            else:
                template = partial.path
                allowed = ", ".join(sorted(partial.methods or ()))
                answer = JSONResponse(
                    error_body(f"Method {method} is not allowed here; allowed: {allowed}."),
                    405,
                    {"allow": allowed},
                )
        if self._metrics is not None:
            self._observe(template, method, answer.status_code, started)
        await _send_whole(answer, scope, receive, send, rest)

    def _observe(self, template: str, method: str, status: int, started: float) -> None:
        """Count an answer under its route's `template` (metrics on)."""
        assert self._metrics is not None
        label = method if method in metrics.METHODS else "other"
        self._metrics.observe(template, label, status, perf_counter() - started)


def not_found(scope: Scope) -> Response:
    path = URL(scope=scope).path
    return JSONResponse(error_body(f"No such path: {path}. See /openapi.json for the API."), 404)


async def _send_whole(
    answer: Response, scope: Scope, receive: Receive, send: Send, rest: bool
) -> None:
    answer.raw_headers = _completed(answer.raw_headers, rest)
    await answer(scope, receive, send)


def _completed(
    headers: list[tuple[bytes, bytes]], rest: bool, *, lower: bool = False
) -> list[tuple[bytes, bytes]]:
    """`headers` under the header policy: nosniff added at the end if missing, then CORS
    (`rest`) added if missing, or else taken out. The same list if nothing changes.
    `lower`: names may be in any case (a `Response`'s are lower case already)."""
    nosniff = cors = False
    for name, _ in headers:
        if lower:
            name = name.lower()
        if name == NOSNIFF[0]:
            nosniff = True
        elif name == ANY_ORIGIN[0]:
            cors = True
    if rest:
        if nosniff and cors:
            return headers
        return [
            *headers,
            *((NOSNIFF,) if not nosniff else ()),
            *((ANY_ORIGIN,) if not cors else ()),
        ]
    if cors:
        headers = [header for header in headers if header[0].lower() != ANY_ORIGIN[0]]
    return headers if nosniff else [*headers, NOSNIFF]


class _Sending:
    """`send` for an answer that may fail before it starts or writes its own start:
    notes whether it `started` and was `answered` whole; with `counted` (an answer not
    built as a `Response`), puts the header policy on its start and counts it then."""

    __slots__ = ("answered", "counted", "rest", "send", "started")

    def __init__(self, send: Send, rest: bool, counted: tuple[Any, str, str, float] | None) -> None:
        self.send = send
        self.rest = rest
        self.counted = counted
        self.started = False
        self.answered = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self.counted is not None:
                headers = list(message.get("headers", ()))
                message = {**message, "headers": _completed(headers, self.rest, lower=True)}
                observe, template, method, started = self.counted
                observe(template, method, message["status"], started)
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = True
        await self.send(message)


async def answer_error(request: Request, exc: Exception) -> Response:
    """The one answer to an error: a `HeadwayError` as itself (429 and 503 logged as
    refusals), an HTTPException's 404 and 405 in Headway's words, a dependency that is
    unavailable 503 (see `headway.ops.dependencies`), anything else 500, logged once."""
    if isinstance(exc, HeadwayError):
        _note_refusal(request, exc)
        return error_response(exc)
    if isinstance(exc, HTTPException):
        if exc.status_code == 404:
            return not_found(request.scope)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"Method {request.method} is not allowed here; allowed: {allowed}."
        else:
            message = exc.detail
        return JSONResponse(error_body(message), exc.status_code, dict(exc.headers or {}))
    if not unavailable(exc):
        log.exception("unexpected error", exc_info=exc)
        return JSONResponse(error_body("Internal error; it has been logged."), 500)
    log.warning("dependency unavailable: %s: %s", type(exc).__name__, exc)
    return error_response(Unavailable(UNAVAILABLE_MESSAGE, headers=RETRY_SOON))


def _note_refusal(request: Request, exc: HeadwayError) -> None:
    """Log a 429 or 503 refusal (see `logs.RefusalLog`): which limit, and to whom."""
    if exc.status not in (429, 503):
        return
    state = request.app.state
    visitors = getattr(state, "visitors", None)
    client = request.visitor.address if visitors is not None else "unknown"
    refusals: logs.RefusalLog = state.refusals
    refusals.refused(exc.status, exc.message, client)
