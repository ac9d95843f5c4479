"""Big answers, encoded and sent a piece at a time.

A space of many tasks, or a parent of many children holding large values, can make an
answer of many megabytes. Such an answer is never built whole: it is encoded as it is
sent, and each piece waits until the client has taken the previous one (the server's
`send` waits while the socket's buffer is full), so a client that stops reading holds
one piece, not the answer. The bytes are exactly those of the whole answer encoded at
once. A small answer is sent whole, with its `content-length`, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..domain.tasks import TaskView
from .responses import JSONResponse

_encode = msgspec.json.Encoder().encode

# Pieces are gathered up to this size before they are sent; an answer that ends before
# reaching it is sent whole.
PIECE_BYTES = 64 * 1024
# What a task's JSON takes besides its values, about: a run of childless tasks is cut
# when this and their values add up to PIECE_BYTES.
_ROUGH_TASK_BYTES = 400


def task_pieces(task: TaskView) -> Iterator[bytes]:
    """The JSON of a task: whole if it has no children, else its members before
    `children`, then its children a group of about PIECE_BYTES at a time."""
    if not task.children:
        yield _encode(task)
        return
    head = _encode(msgspec.structs.replace(task, children=[]))
    yield head[:-2]  # `children` is last: everything up to its `[`
    joined = getattr(task.children, "joined", None)
    if joined is not None:  # the family cache's, made once (`caches.families.ChildrenJSON`)
        whole = memoryview(joined)  # slices of it are sent, never copies of the whole
        for start in range(0, len(whole), PIECE_BYTES):
            yield whole[start : start + PIECE_BYTES]
        yield b"]}"
        return
    first = True
    held: list[Any] = []
    size = 0
    for child in task.children:
        encoded = child if isinstance(child, msgspec.Raw) else _encode(child)
        held.append(encoded)
        size += len(encoded)
        if size >= PIECE_BYTES:
            yield b",".join(held) if first else b"," + b",".join(held)
            first, held, size = False, [], 0
    if held:
        yield b",".join(held) if first else b"," + b",".join(held)
    yield b"]}"


async def space_pieces(
    head: dict[str, Any], pages: AsyncIterable[list[TaskView]]
) -> AsyncIterator[bytes]:
    """The JSON of a space read whose tasks arrive page by page. Childless tasks are
    encoded a run at a time, in one call, a run ending once its values reach about
    PIECE_BYTES; a task with children is split as `task_pieces` splits it."""
    opening = _encode({**head, "tasks": []})
    yield opening[:-2]  # `tasks` is last: everything up to its `[`
    comma = b""  # none before the first task
    async for page in pages:
        start = 0
        size = 0
        for index, task in enumerate(page):
            if isinstance(task, msgspec.Raw):  # a childless task's JSON, made already
                size += len(task)
            elif task.children:
                if start < index:
                    yield comma + _encode(page[start:index])[1:-1]
                    comma = b","
                pieces = task_pieces(task)
                yield comma + next(pieces)
                for piece in pieces:
                    yield piece
                comma, start, size = b",", index + 1, 0
                continue
            else:
                size += _ROUGH_TASK_BYTES + (len(task.progress.values) if task.progress else 0)
            if size >= PIECE_BYTES:
                yield comma + _encode(page[start : index + 1])[1:-1]
                comma, start, size = b",", index + 1, 0
        if start < len(page):
            yield comma + _encode(page[start:])[1:-1]
            comma = b","
    yield b"]}"


class JSONStream(Response):
    """A JSON answer produced in pieces: sent whole if it is small, else streamed.
    `started`: its start was sent (an error before it can still be answered)."""

    media_type = "application/json"
    rest_headers = True  # REST's headers are among its own (see `api.dispatch`)

    def __init__(
        self, pieces: AsyncIterable[bytes] | Iterable[bytes], *, vary_accept: bool = False
    ) -> None:
        self.status_code = 200
        self.background = None
        self.started = False
        self._pieces = pieces
        self.raw_headers = [
            (name, value)
            for name, value in JSONResponse(None).raw_headers
            if name != b"content-length"
        ]
        if vary_accept:  # the same URL is a page for browsers
            self.raw_headers.append((b"vary", b"Accept"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: list[bytes] = []
        size = 0
        async for piece in _aiter(self._pieces):
            held.append(piece)
            size += len(piece)
            if size >= PIECE_BYTES:
                if not self.started:
                    self.started = True
                    start = {"type": "http.response.start", "status": 200}
                    await send({**start, "headers": self.raw_headers})
                # Waits while the client is not reading: back-pressure, not buffering.
                await send(
                    {"type": "http.response.body", "body": b"".join(held), "more_body": True}
                )
                held, size = [], 0
        body = b"".join(held)
        if self.started:
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        # Small: one body with its length, like any other answer.
        headers = [*self.raw_headers, (b"content-length", str(len(body)).encode())]
        self.started = True
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _aiter(pieces: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(pieces, AsyncIterable):
        async for piece in pieces:
            yield piece
    else:
        for piece in pieces:
            yield piece
