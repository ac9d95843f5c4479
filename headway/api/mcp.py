"""`POST /mcp`: the endpoint that hands Model Context Protocol requests to the server of
`api.mcp_tools`.

The MCP SDK is large (tens of MB once imported), so the server is built, and the SDK
imported, on the first request to `/mcp`: a Headway nobody talks MCP to never pays for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import Settings
from ..domain import schemas
from ..domain.errors import BadRequest, error_body
from ..service import Service
from . import mcp_hosts
from .endpoints import Request
from .openapi_parts import TOO_MANY_REQUESTS, error, json_answer
from .responses import NO_STORE, JSONResponse, error_response, receive_body
from .visitor import Visitors

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

# Room for the JSON-RPC envelope around arguments that REST would accept as a body.
MAX_MCP_BODY = 2 * schemas.MAX_BODY

_JSON_RPC = {"type": "object", "description": "A JSON-RPC 2.0 message (or a batch)."}
openapi_paths: dict[str, Any] = {
    "/mcp": {
        "post": {
            "operationId": "mcp",
            "summary": "Model Context Protocol (JSON-RPC)",
            "description": "A Model Context Protocol server over Streamable HTTP, stateless, "
            "answering JSON. Tools: create_space, get_space, create_task, get_task, "
            "report_progress; list them with `tools/list`. Send `Accept: application/json, "
            "text/event-stream`. Any other method on /mcp is 405.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _JSON_RPC}},
            },
            "responses": {
                "200": json_answer(_JSON_RPC, "The JSON-RPC response."),
                "202": {"description": "A notification or response was accepted."},
                "400": json_answer(_JSON_RPC, "Not a valid JSON-RPC request for this protocol."),
                "403": error(
                    "The Origin header names an origin not allowed by "
                    "HEADWAY_MCP_ALLOWED_HOSTS (a web page of another site)."
                ),
                "406": error("The Accept header does not allow application/json."),
                "413": error(f"The body is larger than {MAX_MCP_BODY} bytes."),
                "421": error("The Host header is not in HEADWAY_MCP_ALLOWED_HOSTS."),
                "429": TOO_MANY_REQUESTS,
            },
        }
    }
}


class MCPEndpoint:
    """The MCP server of one app: `answer` is the endpoint of `Route("/mcp")`, for every
    method (it answers all but POST with a 405 of its own)."""

    def __init__(
        self,
        settings: Settings,
        service: Callable[[], Service],
        visitors: Callable[[], Visitors],
    ) -> None:
        self._settings = settings
        self._hosts = mcp_hosts.allowed_hosts(settings)
        self._service = service
        self._visitors = visitors
        self._serving = False
        self._manager: StreamableHTTPSessionManager | None = None
        self._starting = asyncio.Lock()
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve for the length of one app lifespan; stop the MCP server, if one was started.

        The SDK's session manager can run only once, so every lifespan gets a new one:
        the same app can be started again (tests do), and each app has its own server.
        """
        self._serving = True
        try:
            yield
        finally:
            self._serving = False
            if self._holder is not None:
                self._stop.set()
                await self._holder
            self._holder, self._manager = None, None

    async def _started_manager(self) -> StreamableHTTPSessionManager:
        """The running session manager, built and started by the first request."""
        async with self._starting:
            if self._manager is not None:
                return self._manager
            from mcp.server.transport_security import TransportSecuritySettings

            from . import mcp_tools

            server = mcp_tools.build_server(
                self._service, self._visitors, self._settings.public_url
            )
            server.streamable_http_app(
                stateless_http=True,
                json_response=True,
                # Headway's own check (`mcp_hosts`), before the request gets here.
                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                max_request_body_size=MAX_MCP_BODY,
            )
            manager = server.session_manager
            ready = asyncio.Event()
            self._stop = asyncio.Event()

            async def hold() -> None:
                # The manager's task group must be left by the task that entered it.
                async with manager.run():
                    ready.set()
                    await self._stop.wait()

            self._holder = asyncio.create_task(hold(), name="headway-mcp")
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({self._holder, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not ready.is_set():
                waiter.cancel()
                self._holder.result()  # raises why the manager did not start
            self._manager = manager
            return manager

    async def answer(self, request: Request) -> ASGIApp:
        """The answer to a request to `/mcp`: the SDK's, once the request is let through
        (a POST within the size limit, from an allowed Host and Origin, within its
        client's rate: each call counts like a task created)."""
        scope = request.scope
        method = scope["method"]
        if method != "POST":
            # Stateless: there is no server-to-client stream to open. Unanswered, the SDK
            # would hold a GET open forever.
            message = (
                f"Method {method} is not allowed here; allowed: POST. /mcp is a Model Context "
                "Protocol endpoint (Streamable HTTP): POST JSON-RPC messages to it."
            )
            return JSONResponse(error_body(message), 405, {"allow": "POST"})
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_MCP_BODY:
            message = f"The request body is larger than {MAX_MCP_BODY} bytes."
            return JSONResponse(error_body(message), 413)
        if not self._serving:
            return JSONResponse(error_body("The MCP endpoint is not running."), 503)
        if refused := mcp_hosts.refusal(self._hosts, headers):
            return error_response(refused)
        await request.visitor.admit("tasks")
        if refused := _not_json(headers):
            return JSONResponse(error_body(refused), 400)
        body = await _utf8_body(request.receive)
        manager = await self._started_manager()

        async def handled(scope: Scope, receive: Receive, send: Send) -> None:
            """The SDK's answer, the body read already."""
            await manager.handle_request(
                _json_by_default(scope), _replay(body, receive), _as_headway(send)
            )

        return handled


async def _utf8_body(receive: Receive) -> bytes:
    """The whole body, at most MAX_MCP_BODY bytes of valid UTF-8 (the SDK would read
    invalid bytes loosely and store mangled text)."""
    body = await receive_body(receive, MAX_MCP_BODY)
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"The request body is not valid UTF-8 (byte {exc.start}): send JSON as UTF-8."
        ) from None
    return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over `body`, already read, then the server's own messages
    (the disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _json_by_default(scope: Scope) -> Scope:
    """The request, said to be JSON if it does not say what it is, as REST takes it (the
    SDK refuses a missing Content-Type; a wrong one it still refuses)."""
    if any(name == b"content-type" for name, _ in scope["headers"]):
        return scope
    return {**scope, "headers": [*scope["headers"], (b"content-type", b"application/json")]}


def _not_json(headers: Headers) -> str | None:
    """Why a request whose Content-Type is not JSON is refused, in words that say what to
    send (curl's `-d` sends a form's type); None for JSON or no Content-Type (taken as
    JSON, as REST takes it). The SDK's own rule, which it answers "Invalid Content-Type
    header." alone: the type before any `;` is `application/json`."""
    declared = headers.get("content-type")
    if declared is None or "application/json" in (
        part.strip() for part in declared.split(";")[0].split(",")
    ):
        return None
    return (
        f"Invalid Content-Type header {declared!r}: /mcp takes JSON-RPC messages as JSON; "
        "send Content-Type: application/json (with curl: -H 'Content-Type: application/json')."
    )


def _as_headway(send: Send) -> Send:
    """`send`, answering like the rest of Headway: `Cache-Control: no-store`, and an error
    the SDK words as plain text (refused Host, Origin or Content-Type) as `{"error": ...}`."""
    held: dict[str, Any] = {}

    async def send_as_headway(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"
            ]
            headers.extend((k.encode(), v.encode()) for k, v in NO_STORE.items())
            message = {**message, "headers": headers}
            content_type = dict(headers).get(b"content-type", b"")
            if message["status"] >= 400 and not content_type.startswith(b"application/json"):
                held["start"], held["body"] = message, b""
                return
        elif message["type"] == "http.response.body" and "start" in held:
            held["body"] += message.get("body", b"")
            if message.get("more_body", False):
                return
            status = held["start"]["status"]
            text = held["body"].decode(errors="replace").strip().rstrip(".")
            hint = _HINTS.get(status, "")
            response = JSONResponse(error_body(f"{text}.{hint}"), status)
            await send({**held["start"], "headers": response.raw_headers})
            message = {"type": "http.response.body", "body": response.body}
        await send(message)

    return send_as_headway


_HINTS = {
    421: " This server answers MCP only for the hosts in HEADWAY_MCP_ALLOWED_HOSTS.",
    403: " This server answers MCP only for origins of HEADWAY_MCP_ALLOWED_HOSTS.",
}
