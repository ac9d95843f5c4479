"""`GET /client`: the address of this server's own client wheel, and `GET /client/<wheel>`,
the wheel itself (see headway.wheel), for `pip install "$(curl -fsS http://HOST/client)"`."""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

from starlette.responses import PlainTextResponse, Response

from .. import wheel
from ..errors import NotFound
from .endpoints import Request, Route
from .openapi_parts import error

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


async def client_address(request: Request) -> Response:
    public_url = request.app.state.settings.public_url
    base = public_url.rstrip("/") + "/" if public_url else str(request.base_url)
    return PlainTextResponse(f"{base}client/{wheel.file_name()}\n")


async def client_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name != wheel.file_name():
        raise NotFound(f"No such file; this server's client is {wheel.file_name()}.")
    built = await request.app.state.client_wheel.get()
    return Response(
        built.body,
        media_type=WHEEL_TYPE,
        headers={"content-disposition": f'attachment; filename="{built.name}"'},
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
            "The URL starts with HEADWAY_PUBLIC_URL when it is set, else with the "
            "address of this request.",
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
            "for the same version.",
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "The wheel's file name, as `GET /client` gives it.",
                    "schema": {"type": "string"},
                }
            ],
            "responses": {
                "200": {
                    "description": "The wheel (a zip archive).",
                    "content": {WHEEL_TYPE: {"schema": {"type": "string", "format": "binary"}}},
                },
                "404": error("Not this server's wheel, or a server run without being installed."),
            },
        }
    },
}
