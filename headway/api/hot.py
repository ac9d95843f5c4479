"""The most used routes, declared once: Starlette's route and the short way past the
router (see `app.HeadwayApp`) are both built from each entry of `HOT`, so that they
cannot disagree."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import badges, rest

Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class HotRoute:
    """A route for `methods` that may skip the router: `prefix{param}suffix`, where the
    suffix may hold more parameters, each a whole path segment. `pages`: it may answer a
    browser's page (built without REST's headers)."""

    template: str
    endpoint: Endpoint
    methods: frozenset[str]
    pages: bool = False
    prefix: str = field(init=False)
    param: str = field(init=False)
    suffix: str = field(init=False)
    # With several parameters: each segment of the template, a parameter's name or None.
    segments: tuple[tuple[str, str | None], ...] = field(init=False)

    def __post_init__(self) -> None:
        prefix, _, rest_ = self.template.partition("{")
        param, _, suffix = rest_.partition("}")
        if not param:
            raise ValueError(f"a hot route has a path parameter: {self.template}")
        segments = []
        for segment in self.template.split("/"):
            name = segment[1:-1] if segment.startswith("{") and segment.endswith("}") else None
            if name is None and ("{" in segment or "}" in segment):
                raise ValueError(f"a parameter is a whole path segment: {self.template}")
            segments.append((segment, name))
        object.__setattr__(self, "prefix", prefix)
        object.__setattr__(self, "param", param)
        object.__setattr__(self, "suffix", suffix)
        object.__setattr__(self, "segments", tuple(segments) if "{" in suffix else ())

    def route(self) -> Route:
        """The route the router takes this path by."""
        return Route(self.template, self.endpoint, methods=sorted(self.methods))

    def params(self, method: str, path: str) -> dict[str, str] | None:
        """The path parameters if this is the route of `method` and `path`, else None. It
        matches exactly what the route's template does: each parameter one non-empty path
        segment."""
        if method not in self.methods or not path.startswith(self.prefix):
            return None
        if self.segments:
            return self._params(path)
        end = len(path) - len(self.suffix)
        if end <= len(self.prefix) or not path.endswith(self.suffix):
            return None
        value = path[len(self.prefix) : end]
        return None if "/" in value else {self.param: value}

    def _params(self, path: str) -> dict[str, str] | None:
        parts = path.split("/")
        if len(parts) != len(self.segments):
            return None
        found = {}
        for part, (segment, name) in zip(parts, self.segments, strict=True):
            if name is None:
                if part != segment:
                    return None
            elif not part:
                return None
            else:
                found[name] = part
        return found


# The most used first: the short way tries them in this order, and so does the router
# (the first route of a path names the methods in a 405's Allow header).
HOT = (
    HotRoute("/tasks/{task_uuid}", rest.task, frozenset({"GET", "PUT", "DELETE"})),
    HotRoute("/spaces/{space_uuid}/tasks", rest.create_task, frozenset({"POST"})),
    HotRoute("/spaces/{space_uuid}", rest.get_space, frozenset({"GET", "DELETE"}), pages=True),
    HotRoute("/tasks/{task_uuid}/report", rest.report_by_url, frozenset({"GET"})),
    # Badges: asked for by every view of every README and wiki page that shows one.
    HotRoute(
        "/shared/{share_uuid}/tasks/{task_id}/badge.svg", badges.task_badge, frozenset({"GET"})
    ),
    HotRoute("/shared/{share_uuid}/badge.svg", badges.space_badge, frozenset({"GET"})),
)

# REST's routes: the hot ones, then the others.
routes = [*(hot.route() for hot in HOT), *rest.routes]


def short_way(method: str, path: str) -> tuple[HotRoute, dict[str, str]] | None:
    """The hot route of a request, with its path parameter; None for every other."""
    for hot in HOT:
        params = hot.params(method, path)
        if params is not None:
            return hot, params
    return None
