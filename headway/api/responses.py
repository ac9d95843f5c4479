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
        super().__init__(_encode(content), status_code, {**NO_STORE, **(headers or {})})


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
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than {MAX_BODY} bytes.")
