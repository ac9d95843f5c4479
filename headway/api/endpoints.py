"""What an endpoint is: a function of the `Request` the dispatcher builds (the request
with its client's `Visitor`) that returns its answer, and the `Route` that names it in
the one route table (`api.dispatch`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from starlette import requests
from starlette.types import ASGIApp

from .visitor import Visitor

if TYPE_CHECKING:
    from ..service import Service


class Request(requests.Request):
    """Starlette's request, with the `visitor` of its client (see `headway.api.visitor`)."""

    _visitor: Visitor | None = None

    @property
    def visitor(self) -> Visitor:
        """The visitor of this request's client, looked up once, when first asked for
        (an endpoint that needs none, like `/client`'s, does not pay for it). Not
        `functools.cached_property`, which takes a lock on every first access."""
        visitor = self._visitor
        if visitor is None:
            scope = self.scope
            visitor = self._visitor = Visitor(scope["app"].state.visitors, scope)
        return visitor

    @property
    def service(self) -> Service:
        """The use cases this app serves (see `headway.service`)."""
        return self.scope["app"].state.service


# An endpoint's answer: a Starlette `Response`, or any ASGI callable that writes its own
# (the MCP SDK's, the pages' static files).
Endpoint = Callable[[Request], Awaitable[ASGIApp]]


class Route:
    """The route of `path` for `methods` (HEAD comes with GET, as Starlette has it): a
    template whose parameters are each one whole, non-empty path segment
    (`/tasks/{task_uuid}`). `methods` None: every method (the endpoint answers a wrong
    one itself). `prefix`: `path` and every path under it (`/static/...`), the rest of
    the path being the endpoint's to read."""

    __slots__ = ("endpoint", "methods", "path", "prefix", "segments")

    def __init__(
        self,
        path: str,
        endpoint: Endpoint,
        methods: Iterable[str] | None = None,
        *,
        prefix: bool = False,
    ) -> None:
        if not path.startswith("/"):
            raise ValueError(f"a route's path starts with '/': {path}")
        self.path = path
        self.endpoint = endpoint
        self.prefix = prefix
        if methods is None:
            self.methods: frozenset[str] | None = None
        else:
            upper = {method.upper() for method in methods}
            self.methods = frozenset(upper | {"HEAD"} if "GET" in upper else upper)
        segments = []
        for segment in path.split("/"):
            name = segment[1:-1] if segment.startswith("{") and segment.endswith("}") else None
            if name is None and ("{" in segment or "}" in segment):
                raise ValueError(f"a parameter is a whole path segment: {path}")
            segments.append((segment, name))
        # Each segment of the template: its text, and a parameter's name or None.
        self.segments: tuple[tuple[str, str | None], ...] = tuple(segments)

    def __repr__(self) -> str:
        return f"Route({self.path!r}, methods={sorted(self.methods or ())!r})"
