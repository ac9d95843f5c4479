"""How every HTTP answer is encoded: JSON, `Cache-Control: no-store`."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from ..errors import HeadwayError, PayloadTooLarge, error_body
from ..schemas import MAX_BODY

_encode = msgspec.json.Encoder().encode
NO_STORE = {"cache-control": "no-store"}


class JSONResponse(Response):
    """A JSON answer. Headway's responses hold live state and credentials: never cached."""

    media_type = "application/json"

    def __init__(
        self, content: Any, status_code: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        self.status_code = status_code
        self.body = _encode(content)
        self.background = None
        # Built directly: this runs on every report, and Starlette's generic header
        # handling is a measurable share of it.
        self.raw_headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (b"content-length", str(len(self.body)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
        ]


def error_response(error: HeadwayError) -> JSONResponse:
    """The one place an error becomes a response."""
    return JSONResponse(error_body(error.message), error.status, error.headers)


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 as soon as it passes the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise _too_large()
    chunks = []
    size = 0
    receive = request.receive
    while True:  # the ASGI messages themselves: cheaper than request.stream() per report
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise _too_large()
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than {MAX_BODY} bytes.")
