"""Badges and the embed of a share link, never of a space's uuid:

- `/shared/{share_uuid}/badge.svg` and `/shared/{share_uuid}/tasks/{task_id}/badge.svg`:
  an SVG badge of the space or of one task (by its id under the link), with `label`,
  `style` and `bar`; an `ETag` and a short `Cache-Control: max-age` so that image
  proxies (GitHub's camo) show a change within a minute; `If-None-Match` answers 304;
- `.../shields.json`: the same as Shields' endpoint badge JSON;
- `/shared/{share_uuid}/embed`: the compact live page, the one page others may frame.

An unknown or revoked link (or task) is 404: a JSON error, or, for a client that prefers
an image (a browser's `<img>`), a grey "not found" badge.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import msgspec
from starlette.responses import Response

from ..badges import svg
from ..badges.states import SPACE_TASKS, Badge, shields_json
from ..badges.svg import STYLES, Style
from ..domain.errors import BadRequest, NotFound
from ..domain.schemas import MAX_TEXT
from ..web import pages
from .decoding import query_params
from .endpoints import Request, Route
from .openapi_parts import (
    SHARE,
    SHARED_TASK_ID,
    error,
    operation,
    query_param,
    ref,
)
from .responses import REST_ANSWER

# Seconds a badge may be shown before it is asked again (GitHub's camo honours it): a
# change shows within a minute. Shields' own cache is its `cacheSeconds` (300 at least).
BADGE_MAX_AGE = 30
_encode = msgspec.json.Encoder().encode
_BADGE_HEADERS = (
    (b"content-type", b"image/svg+xml"),
    (b"cache-control", f"max-age={BADGE_MAX_AGE}".encode()),
    # Opened on its own, the SVG is a document: it may run and load nothing.
    (b"content-security-policy", b"default-src 'none'"),
    *REST_ANSWER,
)
_NOT_FOUND_HEADERS = (
    (b"content-type", b"image/svg+xml"),
    (b"cache-control", b"no-store"),
    (b"content-security-policy", b"default-src 'none'"),
    (b"vary", b"Accept"),
    *REST_ANSWER,
)
_SHIELDS_HEADERS = (
    (b"content-type", b"application/json"),
    (b"cache-control", f"max-age={BADGE_MAX_AGE}".encode()),
    *REST_ANSWER,
)
_FLAGS = {"1": True, "true": True, "0": False, "false": False}


class _Options(NamedTuple):
    label: str | None
    style: Style
    bar: bool


def _options(request: Request, *, bar: bool = True) -> _Options:
    """`label`, `style` and (with `bar`) `bar` of a badge's query; other parameters are
    ignored (a cache-busting `?v=2` is common), a bad one of these is a 400."""
    query = request.scope["query_string"]
    if not query:
        return _DEFAULT
    params = query_params(query)
    label = params.get("label")
    if label is not None and len(label) > MAX_TEXT:
        raise BadRequest(f"label must be at most {MAX_TEXT} characters.")
    style = params.get("style", "flat")
    if style not in STYLES:
        raise BadRequest(f"style must be one of {', '.join(STYLES)}, not {style!r}.")
    return _Options(label, cast(Style, style), bar and _flag(params, "bar"))


_DEFAULT = _Options(None, "flat", False)


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "0").lower()
    if value not in _FLAGS:
        raise BadRequest(f"{name} must be 1 or 0, not {value!r}.")
    return _FLAGS[value]


async def _badge(request: Request, options: _Options) -> Badge:
    """The badge of the space or of the task (`task_id`) the path names, its read paid."""
    params = request.path_params
    if "task_id" not in params:
        await (await request.visitor.read_bill()).pay(SPACE_TASKS)  # a read of its newest tasks
        return await request.service.badges.space(params["share_uuid"], options.label)
    await request.visitor.read_bill()  # a read of one task
    return await request.service.badges.task(params["share_uuid"], params["task_id"], options.label)


async def svg_badge(request: Request) -> Response:
    options = _options(request)
    try:
        badge = await _badge(request, options)
    except NotFound as exc:
        return _not_found(request, exc)
    # The bar kept to a thousandth: the drawings kept are few, each as a pixel shows it.
    ratio = None if not options.bar or badge.ratio is None else round(badge.ratio, 3)
    drawn = svg.draw(badge.label, badge.message, badge.state, options.style, ratio, badge.title)
    etag = drawn.etag.encode()
    if _matches(request.scope["headers"], etag):
        return _Answer(304, b"", [*_BADGE_HEADERS[1:], (b"etag", etag)])
    length = str(len(drawn.svg)).encode()
    return _Answer(200, drawn.svg, [*_BADGE_HEADERS, (b"etag", etag), (b"content-length", length)])


class _Answer(Response):
    """A response whose headers are given whole (a badge is asked for as often as a task
    is read: Starlette's generic header handling would be a fair share of its cost)."""

    rest_headers = True  # each of its header lists holds REST's (see `api.dispatch`)

    def __init__(self, status: int, body: bytes, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status
        self.body = body
        self.background = None
        self.raw_headers = raw_headers


def _matches(headers: list[tuple[bytes, bytes]], etag: bytes) -> bool:
    """Whether `If-None-Match` names `etag` (weakly, as RFC 9110 compares for GET)."""
    for name, value in headers:
        if name == b"if-none-match":
            for tag in value.split(b","):
                tag = tag.strip()
                if tag == b"*" or tag.removeprefix(b"W/") == etag:
                    return True
    return False


def _not_found(request: Request, exc: NotFound) -> Response:
    """A 404: a grey badge for a client that prefers an image, else the JSON error."""
    if not pages.prefers(request, "image", "svg+xml"):
        raise exc
    drawn = svg.draw("progress", "not found", "waiting", "flat", None, exc.message)
    length = str(len(drawn.svg)).encode()
    return _Answer(404, drawn.svg, [*_NOT_FOUND_HEADERS, (b"content-length", length)])


async def shields(request: Request) -> Response:
    options = _options(request, bar=False)
    body = _encode(shields_json(await _badge(request, options), options.style))
    return _Answer(200, body, [*_SHIELDS_HEADERS, (b"content-length", str(len(body)).encode())])


async def embed(request: Request) -> Response:
    """The compact live page of a share link, for other pages to frame."""
    params = query_params(request.scope["query_string"])
    theme = params.get("theme", "auto")
    if theme not in pages.THEMES:
        raise BadRequest(f"theme must be one of {', '.join(pages.THEMES)}, not {theme!r}.")
    transparent = _flag(params, "transparent")
    limit = params.get("limit", str(pages.EMBED_TASKS))
    if not limit.isascii() or not limit.isdigit() or not 1 <= int(limit) <= pages.MAX_EMBED_TASKS:
        raise BadRequest(f"limit must be a whole number from 1 to {pages.MAX_EMBED_TASKS}.")
    # The page costs 1, as a share page does; its stream pays for its snapshot.
    await request.visitor.read_bill()
    service = request.service
    share_uuid = request.path_params["share_uuid"]
    looks: dict[str, Any] = {"theme": theme, "transparent": transparent, "limit": int(limit)}
    try:
        space_uuid = await service.shares.space_of(share_uuid)
        # The space may go in between: the link then no longer works either.
        head = await service.spaces.head(space_uuid)
    except NotFound:
        if pages.wants_html(request):
            return pages.embed_page(None, {}, status=404, **looks)
        raise
    return pages.embed_page(share_uuid, head, **looks)


# The SVG badges first: asked for by every view of every README and wiki page showing one.
routes = [
    Route("/shared/{share_uuid}/tasks/{task_id}/badge.svg", svg_badge, methods=["GET"]),
    Route("/shared/{share_uuid}/badge.svg", svg_badge, methods=["GET"]),
    Route("/shared/{share_uuid}/shields.json", shields, methods=["GET"]),
    Route("/shared/{share_uuid}/tasks/{task_id}/shields.json", shields, methods=["GET"]),
    Route("/shared/{share_uuid}/embed", embed, methods=["GET"]),
]

# --- OpenAPI ------------------------------------------------------------------------------


_BADGE_PARAMETERS = [
    query_param(
        "label",
        {"type": "string", "maxLength": MAX_TEXT},
        "The left text (default: the space's or the task's title); empty: none.",
    ),
    query_param(
        "style",
        {"type": "string", "enum": list(STYLES), "default": "flat"},
        "The badge's style, as Shields names them.",
    ),
]
_BAR = query_param(
    "bar",
    {"type": "string", "enum": ["0", "1", "true", "false"], "default": "0"},
    "1: a bar inside the message shows the ratio done.",
)
_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "The ETag of the badge held: 304 while it is unchanged.",
    "schema": {"type": "string"},
}
_CACHE_HEADERS = {
    "ETag": {"description": "Names this drawing of the badge.", "schema": {"type": "string"}},
    "Cache-Control": {
        "description": f"`max-age={BADGE_MAX_AGE}`: image proxies ask again within a minute.",
        "schema": {"type": "string"},
    },
}
_NO_LINK = (
    "No such share link (revoked, never created, or not a UUID), or no task of that id under it."
)
_SHIELDS = (
    "What the SVG badge says, in the JSON of Shields' endpoint badge: "
    "`https://img.shields.io/endpoint?url=` and this URL, encoded, draws it in any of "
    "Shields' styles. `style` is passed on as the JSON's `style`."
)


def _badge_operation(operation_id: str, summary: str, description: str, *, task: bool) -> Any:
    parameters = [SHARE, *([SHARED_TASK_ID] if task else []), *_BADGE_PARAMETERS]
    responses = {
        "200": {
            "description": "The badge, `image/svg+xml`.",
            "headers": _CACHE_HEADERS,
            "content": {"image/svg+xml": {"schema": {"type": "string"}}},
        },
        "304": {"description": "The badge named by If-None-Match is unchanged."},
        "400": error("A bad label, style or bar, or a parameter given twice."),
        "404": {
            **error(
                f"{_NO_LINK} A client that prefers an image (`Accept: image/svg+xml` or "
                "`image/*` above `application/json`) gets a grey `not found` badge instead "
                "of JSON."
            ),
            "content": {
                "application/json": {"schema": ref("ErrorOut")},
                "image/svg+xml": {"schema": {"type": "string"}},
            },
        },
    }
    parameters += [_BAR, _IF_NONE_MATCH]
    return operation(operation_id, summary, description, parameters, responses)


def _shields_operation(operation_id: str, summary: str, *, task: bool) -> Any:
    parameters = [SHARE, *([SHARED_TASK_ID] if task else []), *_BADGE_PARAMETERS]
    responses = {
        "200": {
            "description": "The badge in Shields' endpoint schema (schemaVersion 1).",
            "headers": {"Cache-Control": _CACHE_HEADERS["Cache-Control"]},
            "content": {"application/json": {"schema": ref("ShieldsOut")}},
        },
        "400": error("A bad label or style, or a parameter given twice."),
        "404": error(_NO_LINK),
    }
    return operation(operation_id, summary, _SHIELDS, parameters, responses)


_SPACE_BADGE = (
    "The space's newest 50 top-level tasks in a word: `3 running · 42%` (the mean ratio "
    "of the active tasks that have one), `· 1 stalled` (no report for 600 s), `· 1 "
    "failed`; `2 waiting`, `all done`, `1 failed` or `no tasks`. Blue while running, amber "
    "when stalled, red when failed, green when all done, grey when waiting."
)
_TASK_BADGE = (
    "One task: `62%`, `3 so far`, `2 of 5 steps` while it runs, `waiting` before its "
    "first report, `stalled` after 600 s without one, `done in 3 min` or `failed`."
)

openapi_paths: dict[str, Any] = {
    "/shared/{share_uuid}/badge.svg": {
        "get": _badge_operation(
            "sharedBadge", "A share link's space as an SVG badge", _SPACE_BADGE, task=False
        )
    },
    "/shared/{share_uuid}/tasks/{task_id}/badge.svg": {
        "get": _badge_operation(
            "sharedTaskBadge", "One task of a share link as an SVG badge", _TASK_BADGE, task=True
        )
    },
    "/shared/{share_uuid}/shields.json": {
        "get": _shields_operation(
            "sharedShields", "A share link's space as a Shields endpoint", task=False
        )
    },
    "/shared/{share_uuid}/tasks/{task_id}/shields.json": {
        "get": _shields_operation(
            "sharedTaskShields", "One task of a share link as a Shields endpoint", task=True
        )
    },
    "/shared/{share_uuid}/embed": {
        "get": operation(
            "sharedEmbed",
            "A share link's compact live view, to frame in other pages",
            "A page of the space's newest tasks with their bars and log lines, updated live "
            "by the link's stream. The one page any origin may frame "
            "(`Content-Security-Policy: frame-ancestors *`); otherwise as strict as every "
            "page.",
            [
                SHARE,
                query_param(
                    "theme",
                    {"type": "string", "enum": list(pages.THEMES), "default": "auto"},
                    "Light, dark, or the system's (auto).",
                ),
                query_param(
                    "transparent",
                    {"type": "string", "enum": ["0", "1", "true", "false"], "default": "0"},
                    "1: no background of its own (an overlay on a stream, say).",
                ),
                query_param(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": pages.MAX_EMBED_TASKS},
                    f"The newest top-level tasks shown (default {pages.EMBED_TASKS}).",
                ),
            ],
            {
                "200": {
                    "description": "The page.",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
                "400": error("A bad theme, transparent or limit, or a parameter given twice."),
                "404": {
                    **error(
                        "No such share link. A browser gets a page saying so, which may be "
                        "framed too."
                    ),
                    "content": {
                        "application/json": {"schema": ref("ErrorOut")},
                        "text/html": {"schema": {"type": "string"}},
                    },
                },
            },
        )
    },
}
