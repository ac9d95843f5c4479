"""`GET /spaces/{space_uuid}/events` and `GET /shared/{share_uuid}/events`: a space live,
as Server-Sent Events. First `event: snapshot` (exactly what the space read answers with
the same `limit` and `state`), then `event: task` after each create, report and finish
(see `headway.live.streams`), `event: estimates` after the snapshot and after each running
task's event, and a comment line at least every `KEEPALIVE_S` seconds. No
history is kept: every connection, reconnections included, begins with a snapshot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from time import perf_counter
from typing import Any

import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..domain.errors import BadRequest
from ..domain.share_ids import ShareView
from ..domain.tasks import TaskView
from ..live.events import StreamFilter, estimates_event
from ..live.streams import KEEPALIVE_S, Live, Stream
from ..service import Service, parse_limit
from .decoding import query_params
from .endpoints import Request, Route
from .openapi_parts import RETRY_AFTER, SPACE, error, query_param
from .scope import CONNECTION
from .streaming import PIECE_BYTES, space_pieces

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]
# A comment line: read by no client as an event (a blank line after it would make some
# parsers dispatch an empty one).
_decode_task = msgspec.json.Decoder(TaskView).decode
_KEEPALIVE = b": keep-alive\n"
# A send that took longer than this waited on its reader (flow control), and is not
# counted as the time sending costs.
_BLOCKED_S = 0.05
# The running tasks of a snapshot whose estimates follow it, at most (a page shows 50).
SNAPSHOT_ESTIMATES = 200
# Browsers wait this long before reconnecting a dropped stream.
_RETRY = b"retry: 2000\n"


async def space_events(request: Request) -> Response:
    return await open_stream(request, request.path_params["space_uuid"], None)


async def open_stream(request: Request, space_uuid: str, share: ShareView | None) -> Response:
    """The stream of a space (as `share` shows it, if given). Every refusal (unknown
    space, bad parameter, too many streams) is a JSON error before any byte of it."""
    params = query_params(request.scope["query_string"])
    for name in ("before", "after"):
        if name in params:
            raise BadRequest(
                f"A stream follows the newest tasks and takes no {name!r}; read older "
                "tasks with GET on the space."
            )
    service: Service = request.app.state.service
    live: Live = request.app.state.live
    limit, state = params.get("limit"), params.get("state")
    visitor = request.visitor
    bill = await visitor.read_bill()  # the snapshot is paid for as it is rendered
    await service.spaces.head(space_uuid)  # 404 before anything is held
    stream = live.open(space_uuid, share, visitor)
    try:
        await live.feed.ready(space_uuid)  # across instances: subscribed before the snapshot
        head, pages = await service.reads.read(space_uuid, limit=limit, state=state)
    except BaseException:
        stream.close()
        raise
    filtering = limit is not None or state is not None
    shown: dict[str, str] = {}  # top-level tasks shown: their uuid and `created_at`
    oldest: list[str] = []
    running: list[str] = []  # the first SNAPSHOT_ESTIMATES running tasks shown
    count = 0

    async def noted(source: AsyncIterable[list[Any]]) -> AsyncIterator[list[Any]]:
        """The snapshot's pages, noting the tasks it holds for the stream's filter, and
        the running ones for their estimates."""
        nonlocal count
        async for page in source:
            for task in page:
                if len(running) < SNAPSHOT_ESTIMATES:
                    _note_running(task, running)
            if filtering:
                for task in page:
                    if isinstance(task, msgspec.Raw):  # a task's JSON, made already
                        task = _decode_task(task)
                    shown[task.uuid] = task.created_at
                    if not oldest or task.created_at < oldest[0]:
                        oldest[:] = [task.created_at]
                count += len(page)
            yield page if share is None else [share.task(task) for task in page]

    async def estimates() -> bytes:
        """`event: estimates` of the running tasks the snapshot showed (nothing if there
        are none, or they cannot be read: their next events carry them)."""
        found = await service.estimates.shown(running[:SNAPSHOT_ESTIMATES]) if running else {}
        return estimates_event(found, share) if found else b""

    window = parse_limit(limit)  # checked by the read above

    def filtered() -> StreamFilter | None:
        if not filtering:
            return None
        full = window is not None and oldest and count >= window
        return StreamFilter(state, oldest[0] if full else None, shown, window)

    snapshot = space_pieces(head, noted(bill.pages(pages)))
    return EventStream(stream, snapshot, filtered, estimates)


class _Shown(msgspec.Struct):
    """What a snapshot's task says of whether it runs: its uuid, finish and steps."""

    uuid: str
    finished_at: str | None = None
    children: list[_Shown] = []


_decode_shown = msgspec.json.Decoder(_Shown).decode


def _note_running(task: TaskView | msgspec.Raw, running: list[str]) -> None:
    """Note the task, and its steps, that run (not finished)."""
    shown: TaskView | _Shown = _decode_shown(task) if isinstance(task, msgspec.Raw) else task
    if shown.finished_at is None:
        running.append(shown.uuid)
        for child in shown.children:
            if isinstance(child, msgspec.Raw):
                child = _decode_shown(child)
            if child.finished_at is None:
                running.append(child.uuid)


class EventStream(Response):
    """The answer of a stream: the snapshot a piece at a time (waiting on the reader, like
    any big answer), then events as they come, until the reader goes, the stream is
    ended (revoked, too far behind, shutdown), or the reader stalls for `STALL_S`."""

    media_type = "text/event-stream"

    def __init__(
        self,
        stream: Stream,
        snapshot: AsyncIterable[bytes],
        make_filter: Callable[[], StreamFilter | None],
        estimates: Callable[[], Awaitable[bytes]],
    ) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = list(_HEADERS)
        self._stream = stream
        self._snapshot = snapshot
        self._make_filter = make_filter
        self._estimates = estimates

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self._stream
        connection = scope.get("extensions", {}).get(CONNECTION)
        if connection is not None:
            connection.on_shutdown = lambda: stream.end("shutdown")
            stream.abort = connection.abort
        elif (task := asyncio.current_task()) is not None:
            stream.abort = task.cancel  # another server: a stalled send is cancelled instead
        watcher = asyncio.create_task(_until_gone(receive, stream))
        try:
            await self._send(send)
        except asyncio.CancelledError:
            if stream.ended != "stalled":
                raise
        finally:
            watcher.cancel()
            stream.close()

    async def _send(self, send: Send) -> None:
        stream = self._stream
        watch = stream.watch
        loop = asyncio.get_running_loop()

        async def body(data: bytes, more: bool = True) -> bool:
            """Send `data`; False once the stream has ended as stalled (see `Live`)."""
            stream.sending_since = loop.time()
            started = perf_counter()  # not the loop's time: uvloop's is the iteration's
            message = {"type": "http.response.body", "body": data, "more_body": more}
            await send(message)
            stream.sending_since = None
            now = perf_counter()
            # Not waiting on its reader: the time since the stream woke is CPU (before its
            # first wake, only the send's own).
            if now - started < _BLOCKED_S:
                watch.sending_s += min(now - (stream.woke or started), _BLOCKED_S)
            return stream.ended != "stalled"

        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        opening = _RETRY + b"id: %d\nevent: snapshot\ndata: " % watch.last_id
        held = [opening]
        size = len(opening)
        async for piece in self._snapshot:
            held.append(piece)
            size += len(piece)
            if size >= PIECE_BYTES:
                if not await body(b"".join(held)):
                    return
                held, size = [], 0
        held.append(b"\n\n")
        held.append(await self._estimates())
        if not await body(b"".join(held)):
            return
        held = []
        stream.follow(self._make_filter())
        self._snapshot = self._make_filter = None  # type: ignore[assignment]
        stream.sent_at = loop.time()
        while True:
            events = await stream.next_events()
            if events is None:
                break
            if not events:
                if loop.time() - stream.sent_at < KEEPALIVE_S:
                    continue  # every event was filtered out: nothing to send yet
                events = _KEEPALIVE
            if not await body(events):
                return
            stream.sent_at = loop.time()
        if stream.ended not in ("gone", "stalled"):
            await body(b"", more=False)


async def _until_gone(receive: Receive, stream: Stream) -> None:
    """Ends the stream once its reader disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.end("gone")
            return


_SSE = {
    "description": "Server-Sent Events: `event: snapshot` first, whose `data` is exactly what "
    "the space read answers with the same `limit` and `state`; then `event: task` after each "
    "create, report and finish of a task, whose `data` is the task as `GET /tasks/{uuid}` "
    "answers it then, with `children` always `[]` (each child is its own event, followed by "
    "its parent's). Every event has an `id`; a comment line comes at least every 15 s. Under "
    "load intermediate states of a task may be skipped; its latest state always arrives. No "
    "history is kept: a reconnection, with or without `Last-Event-ID`, begins again with a "
    "snapshot. A stream whose reader falls far behind, or takes nothing for 30 s, is ended. "
    "A deleted task has no event: the streams that may show it end (their readers reconnect "
    "to a new snapshot). An owner's delete ends every stream of the space; a task removed to "
    "make room (`HEADWAY_TASKS_PER_SPACE`) ends only the streams that show it: those without "
    "`limit`, and those whose window (the newest `limit` top-level tasks sent) still holds it "
    "once the new task is sent. `event: estimates` (no `id`) follows the snapshot, and "
    "each running task's event: its `data` maps the running tasks' uuids (through a share "
    "link, their ids) to their estimates, as `GET /tasks/{uuid}/estimate` answers them "
    "(the snapshot's first 200 running tasks and steps).",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def stream_operation(operation_id: str, summary: str, path_parameter: dict[str, Any]) -> Any:
    """The OpenAPI operation of a stream (the space's own, or a share link's)."""
    return {
        "operationId": operation_id,
        "summary": summary,
        "parameters": [
            path_parameter,
            query_param(
                "limit", {"type": "integer", "minimum": 1}, "Newest top-level tasks shown."
            ),
            query_param(
                "state",
                {"type": "string", "enum": ["active", "finished"]},
                "Only running or only finished top-level tasks (a task that finishes "
                "under `active` sends its finish, then nothing more).",
            ),
        ],
        "responses": {
            "200": _SSE,
            "400": error(
                "A bad limit or state, a parameter given twice, or `before`/`after` (a "
                "stream follows the newest tasks)."
            ),
            "404": error("No such space or share link (or not a UUID)."),
            "429": error(
                "This client address holds as many live streams as one may "
                "(HEADWAY_STREAMS_PER_CLIENT), or its network, an IPv6 /48, does "
                "(HEADWAY_STREAMS_PER_NETWORK); or it is over its rate of reads "
                "(HEADWAY_RATE_READS), which the stream's snapshot pays for the tasks it shows.",
                RETRY_AFTER,
            ),
            "503": error(
                "The server holds as many live streams as it may, or a dependency is down.",
                RETRY_AFTER,
            ),
        },
    }


openapi_paths: dict[str, Any] = {
    "/spaces/{space_uuid}/events": {
        "get": stream_operation("streamSpace", "Watch a space live (SSE)", SPACE)
    }
}


routes = [Route("/spaces/{space_uuid}/events", space_events, methods=["GET"])]
