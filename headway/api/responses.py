"""How every HTTP answer is encoded: JSON, `Cache-Control: no-store`, and the headers
every answer carries (`X-Content-Type-Options: nosniff`; CORS for any origin, on REST)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from ..domain.errors import HeadwayError, PayloadTooLarge, error_body
from ..domain.schemas import MAX_BODY

_encode = msgspec.json.Encoder().encode
NO_STORE = {"cache-control": "no-store"}

NOSNIFF = (b"x-content-type-options", b"nosniff")
ANY_ORIGIN = (b"access-control-allow-origin", b"*")
# Every answer forbids content sniffing. REST answers (every path but /mcp) are readable
# from any origin: there are no cookies, so a page gains nothing it did not already hold.
# (The policy is applied to every answer by `api.dispatch`.)
REST_ANSWER = (NOSNIFF, ANY_ORIGIN)
_JSON_HEADERS = ((b"content-type", b"application/json"), (b"cache-control", b"no-store"))


class JSONResponse(Response):
    """A JSON answer. Headway's responses hold live state and credentials: never cached."""

    media_type = "application/json"
    rest_headers = True  # REST's headers are among its own (see `api.dispatch`)

    def __init__(
        self, content: Any, status_code: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        self.status_code = status_code
        self.body = _encode(content)
        self.background = None
        # Built directly: this runs on every report, and Starlette's generic header
        # handling is a measurable share of it. REST's headers come along; answers of
        # /mcp drop CORS on their way out (`api.dispatch`).
        self.raw_headers = [
            *_JSON_HEADERS,
            *REST_ANSWER,
            (b"content-length", str(len(self.body)).encode()),
        ]
        if headers:
            self.raw_headers.extend((k.lower().encode(), v.encode()) for k, v in headers.items())


PREFLIGHT_MAX_AGE = 86_400
_HEADER_LIST = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*")


def preflight_response(methods: Iterable[str], requested_headers: str | None) -> Response:
    """The 204 answer to a CORS preflight on a REST path the routes of `methods` serve: any
    origin, those methods, the headers asked for (or `content-type`)."""
    allowed = ", ".join(sorted(methods)).encode()
    if requested_headers is None or not _HEADER_LIST.fullmatch(requested_headers.strip()):
        requested_headers = "content-type"
    response = Response(status_code=204)
    response.raw_headers = [
        *REST_ANSWER,
        (b"allow", allowed),
        (b"access-control-allow-methods", allowed),
        (b"access-control-allow-headers", requested_headers.strip().encode()),
        (b"access-control-max-age", str(PREFLIGHT_MAX_AGE).encode()),
    ]
    return response


def error_response(error: HeadwayError) -> JSONResponse:
    """The one place an error becomes a response."""
    return JSONResponse(error_body(error.message), error.status, error.headers)


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 as soon as it passes the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise PayloadTooLarge(f"The request body is larger than {MAX_BODY} bytes.")
    return await receive_body(request.receive, MAX_BODY)


async def receive_body(receive: Receive, limit: int) -> bytes:
    """The body from the ASGI messages themselves (cheaper than `request.stream()` on
    every report), refused with 413 as soon as it passes `limit` bytes."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
