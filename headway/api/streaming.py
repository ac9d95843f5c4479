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

from .responses import JSONResponse

_encode = msgspec.json.Encoder().encode

# Pieces are gathered up to this size before they are sent; an answer that ends before
# reaching it is sent whole.
PIECE_BYTES = 64 * 1024


def object_pieces(value: dict[str, Any], items: Iterable[Any] | None = None) -> Iterator[bytes]:
    """The JSON of `value`, a dict whose last member is a list, in pieces: the members
    before the list, then each item of the list (`items`, when given, stands in for it,
    so that it can be produced lazily). Items that are tasks with children are split too.
    """
    *_, last = value
    head = _encode({key: member for key, member in value.items() if key != last})
    opening = b"{" if head == b"{}" else head[:-1] + b","
    yield opening + _encode(last) + b":["
    first = True
    for item in value[last] if items is None else items:
        if not first:
            yield b","
        first = False
        if isinstance(item, dict) and item.get("children"):
            yield from object_pieces(item)
        else:
            yield _encode(item)
    yield b"]}"


async def space_pieces(
    head: dict[str, Any], pages: AsyncIterable[list[Any]]
) -> AsyncIterator[bytes]:
    """The JSON of a space read whose tasks arrive page by page."""
    pieces = object_pieces({**head, "tasks": []})
    yield next(pieces)  # everything up to the opening of the task list
    first = True
    async for page in pages:
        for task in page:
            if not first:
                yield b","
            first = False
            if task["children"]:
                for piece in object_pieces(task):
                    yield piece
            else:
                yield _encode(task)
    yield b"]}"


class JSONStream(Response):
    """A JSON answer produced in pieces: sent whole if it is small, else streamed."""

    media_type = "application/json"

    def __init__(self, pieces: AsyncIterable[bytes] | Iterable[bytes]) -> None:
        self.status_code = 200
        self.background = None
        self._pieces = pieces
        self.raw_headers = [
            (name, value)
            for name, value in JSONResponse(None).raw_headers
            if name != b"content-length"
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pieces = _aiter(self._pieces)
        held: list[bytes] = []
        size = 0
        async for piece in pieces:
            held.append(piece)
            size += len(piece)
            if size >= PIECE_BYTES:
                break
        else:  # small: one body with its length, like any other answer
            body = b"".join(held)
            headers = [*self.raw_headers, (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": b"".join(held), "more_body": True})
        held, size = [], 0
        async for piece in pieces:
            held.append(piece)
            size += len(piece)
            if size >= PIECE_BYTES:
                # Waits while the client is not reading: back-pressure, not buffering.
                await send(
                    {"type": "http.response.body", "body": b"".join(held), "more_body": True}
                )
                held, size = [], 0
        await send({"type": "http.response.body", "body": b"".join(held), "more_body": False})


async def _aiter(pieces: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(pieces, AsyncIterable):
        async for piece in pieces:
            yield piece
    else:
        for piece in pieces:
            yield piece
