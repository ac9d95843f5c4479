"""Routes of the pages: `/` (a page for browsers, a small JSON index for others) and the
pages' static files. A space's and a share link's pages answer on the JSON routes of the
same URL (see `pages.wants_html`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from .. import __version__
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


routes = [
    Route("/", home, methods=["GET"]),
    Mount("/static", static_files(), name="static"),
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
