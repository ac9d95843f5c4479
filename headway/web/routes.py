"""Routes of the pages: `/` (a page for browsers, a small JSON index for others) and the
pages' static files. A space's and a share link's pages answer on the JSON routes of the
same URL (see `pages.wants_html`)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import __version__
from ..api.endpoints import Request, Route
from ..api.responses import JSONResponse
from .pages import home_page, static_files, wants_html

INDEX = {
    "name": "Headway",
    "description": "Progress reporting over plain HTTP. Create a space with POST /spaces.",
    "version": __version__,
    "links": {"openapi": "/openapi.json", "spaces": "/spaces", "health": "/up"},
}


async def home(request: Request) -> Response:
    if wants_html(request):
        return home_page()
    return JSONResponse(INDEX, headers={"vary": "Accept"})


_static = static_files()


async def static(request: Request) -> ASGIApp:
    """The pages' scripts, style and icon: the files under `/static/`, served by
    Starlette's static files, which read their path past `root_path`."""
    scope = request.scope
    root_path = scope.get("root_path", "")
    return _Under(_static, root_path + "/static", scope.get("app_root_path", root_path))


class _Under:
    """An ASGI app served under a path: what a mount hands the app it holds."""

    __slots__ = ("app", "app_root_path", "root_path")

    def __init__(self, app: ASGIApp, root_path: str, app_root_path: str) -> None:
        self.app = app
        self.root_path = root_path
        self.app_root_path = app_root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        under = {**scope, "root_path": self.root_path, "app_root_path": self.app_root_path}
        await self.app(under, receive, send)


routes = [
    Route("/", home, methods=["GET"]),
    Route("/static", static, prefix=True),
]

openapi_paths: dict[str, Any] = {
    "/": {
        "get": {
            "operationId": "index",
            "summary": "The service's index",
            "description": "A browser (an Accept preferring text/html) gets the home page, "
            "where a space can be created; other clients get this small JSON index.",
            "responses": {
                "200": {
                    "description": "The index.",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string"},
                                    "description": {"type": "string"},
                                    "version": {"type": "string"},
                                    "links": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    },
                                },
                                "required": ["name", "version", "links"],
                            }
                        },
                        "text/html": {"schema": {"type": "string"}},
                    },
                }
            },
        }
    }
}
