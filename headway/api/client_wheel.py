"""`GET /client`: the address of this server's own client wheel, and `GET /client/<wheel>`,
the wheel itself (see headway.api.wheel), for `pip install "$(curl -fsS http://HOST/client)"`.

The address starts with HEADWAY_PUBLIC_URL. Without it, with the request's Host only when
the server answers that host (as `/mcp` decides, `mcp_hosts.answered`), else with the
address the request reached: a Host header anyone can send never names where others
install from. Neither answer may be kept by a cache; the wheel is rated (`wheels`)."""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

from starlette.responses import PlainTextResponse, Response

from ..domain.errors import NotFound
from . import wheel
from .endpoints import Request, Route
from .mcp_hosts import answered
from .openapi_parts import TOO_MANY_REQUESTS, error, path_param
from .responses import NO_STORE

WHEEL_TYPE = "application/octet-stream"


class ClientWheel:
    """The wheel, built once, on the first request for it (in a thread: it takes a tenth
    of a second), then kept for the life of the app. Nothing is built at start."""

    def __init__(self) -> None:
        self._wheel: wheel.Wheel | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> wheel.Wheel:
        """The wheel. Raises NotFound when this server runs without being installed."""
        async with self._lock:  # concurrent first requests build it once
            if self._wheel is None:
                try:
                    self._wheel = await asyncio.to_thread(wheel.build)
                except importlib.metadata.PackageNotFoundError:
                    raise NotFound(
                        "This server runs headway without installing it, so it has no "
                        "client wheel to serve; install it (pip install '.[server]')."
                    ) from None
            return self._wheel


DEFAULT_PORTS = {"http": 80, "https": 443}


async def client_address(request: Request) -> Response:
    settings = request.app.state.settings
    if settings.public_url:
        base = settings.public_url.rstrip("/") + "/"
    else:
        scope = request.scope
        host = request.headers.get("host", "")
        if not answered(settings, host):
            name, port = scope.get("server") or (settings.host, settings.port)
            host = f"[{name}]" if ":" in name else name
            if port is not None and port != DEFAULT_PORTS.get(scope["scheme"]):
                host += f":{port}"
        base = f"{scope['scheme']}://{host}{scope.get('root_path', '')}/"
    return PlainTextResponse(f"{base}client/{wheel.file_name()}\n", headers=NO_STORE)


async def client_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name != wheel.file_name():
        raise NotFound(f"No such file; this server's client is {wheel.file_name()}.")
    await request.visitor.admit("wheels")
    built = await request.app.state.client_wheel.get()
    return Response(
        built.body,
        media_type=WHEEL_TYPE,
        headers={"content-disposition": f'attachment; filename="{built.name}"', **NO_STORE},
    )


routes = [
    Route("/client", client_address, methods=["GET"]),
    Route("/client/{name}", client_file, methods=["GET"]),
]

openapi_paths: dict[str, Any] = {
    "/client": {
        "get": {
            "operationId": "getClientAddress",
            "summary": "Where to install the client from",
            "description": "The absolute URL of a wheel of this server's own version of the "
            "`headway` package, for a machine that only reports: "
            '`pip install "$(curl -fsS http://HOST:PORT/client)"` installs the Python client '
            "and the `headway` command, with the client's dependencies only (httpx, rich). "
            "The URL starts with HEADWAY_PUBLIC_URL when it is set. Without it, with this "
            "request's Host only when the server answers that host (as `/mcp` does: "
            "loopback names, the address it listens on, HEADWAY_MCP_ALLOWED_HOSTS), else "
            "with the address the request reached (so a proxy, a port mapping or NAT "
            "needs HEADWAY_PUBLIC_URL). Never to be cached (`Cache-Control: no-store`).",
            "responses": {
                "200": {
                    "description": "The wheel's URL, then a newline.",
                    "content": {"text/plain": {"schema": {"type": "string", "format": "uri"}}},
                }
            },
        }
    },
    "/client/{name}": {
        "get": {
            "operationId": "getClientWheel",
            "summary": "The client wheel",
            "description": "A wheel of this server's own version of the `headway` package "
            "(`headway-VERSION-py3-none-any.whl`): its Python modules, the `headway` "
            "command, and metadata requiring only the client's dependencies (the `tqdm` "
            "extra offered). Built once by the server from its own files; the same bytes "
            "for the same version. Never to be cached (`Cache-Control: no-store`); rated "
            "per client address (HEADWAY_RATE_WHEELS).",
            "parameters": [
                path_param("name", "The wheel's file name, as `GET /client` gives it.", None)
            ],
            "responses": {
                "200": {
                    "description": "The wheel (a zip archive).",
                    "content": {WHEEL_TYPE: {"schema": {"type": "string", "format": "binary"}}},
                },
                "404": error("Not this server's wheel, or a server run without being installed."),
                "429": TOO_MANY_REQUESTS,
            },
        }
    },
}
