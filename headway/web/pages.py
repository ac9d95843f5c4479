"""Pages for browsers: content negotiation, rendering and the strict headers every page
carries. A page is only ever a shell: its script reads the same JSON and live stream any
client reads, so user text reaches the page as data, never as markup."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

# No inline script or style, nothing from other origins, never framed; the URL of a page
# holds a credential, so it is never sent as a referrer.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
    "vary": "Accept",
}
# A share link's embed is the one page any other page may frame; it is otherwise as
# strict. (X-Frame-Options cannot say "any": it is left out, and CSP decides.)
EMBED_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    "frame-ancestors 'none'", "frame-ancestors *"
)
EMBED_HEADERS = {
    "content-security-policy": EMBED_CONTENT_SECURITY_POLICY,
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
# The embed's looks: `theme` and at most how many top-level tasks it shows.
THEMES = ("auto", "light", "dark")
EMBED_TASKS = 10
MAX_EMBED_TASKS = 50


def wants_html(request: Request) -> bool:
    """Whether the client prefers a page to JSON: `text/html` is named in `Accept` and
    weighs more than `application/json`. A tie (`*/*`, as curl and HTTP libraries send)
    is JSON."""
    return prefers(request, "text", "html")


def prefers(request: Request, kind: str, subtype: str) -> bool:
    """Whether the client prefers `kind/subtype` (or `kind/*`) to JSON: it is named in
    `Accept` and weighs more than `application/json`. A tie (`*/*`) is JSON."""
    accept = request.headers.get("accept")
    if not accept or kind not in accept:
        return False
    wanted = _weight(accept, kind, subtype)
    return wanted > 0 and wanted > _weight(accept, "application", "json")


def _weight(accept: str, kind: str, subtype: str) -> float:
    """The quality `accept` gives to `kind/subtype`, from its most specific match."""
    best, specificity = 0.0, -1
    for entry in accept.split(","):
        media, *params = (part.strip() for part in entry.split(";"))
        main, _, sub = media.lower().partition("/")
        if (main, sub) == (kind, subtype):
            rank = 2
        elif (main, sub) == (kind, "*"):
            rank = 1
        elif (main, sub) == ("*", "*"):
            rank = 0
        else:
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = max(0.0, min(1.0, float(value)))
                except ValueError:
                    quality = 0.0
        if rank > specificity:
            best, specificity = quality, rank
    return best


@cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("headway.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def render(
    template: str, status: int = 200, headers: dict[str, str] = PAGE_HEADERS, **context: Any
) -> Response:
    """A page from `template`, with the headers every page carries (`headers`)."""
    body = _templates().get_template(template).render(**context)
    return Response(body, status, headers, media_type="text/html")


class _StaticFiles(StaticFiles):
    """Static files that browsers revalidate on every use (a cheap 304 while unchanged),
    so a page never runs a script older than itself after an upgrade."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["cache-control"] = "no-cache"
        return response


def static_files() -> StaticFiles:
    """The pages' scripts, style and icon, served from the package."""
    return _StaticFiles(packages=[("headway.web", "static")])


def home_page() -> Response:
    """`GET /` for a browser: create a space and land on its dashboard."""
    return render("home.html")


def space_page(space_uuid: str, head: dict[str, Any], retention: int | None) -> Response:
    """A space's dashboard for whoever holds its uuid: live tasks, snippets, share links,
    channels, deleting it, and how long it may stay idle (`retention`, seconds; None:
    forever, and the page says nothing of it)."""
    words = None if retention is None else period_words(retention)
    return _space_html("owner", f"/spaces/{space_uuid}", head, space_uuid, words)


def shared_page(share_uuid: str, head: dict[str, Any]) -> Response:
    """A share link's read-only view; it names no uuid of the space or its tasks."""
    return _space_html("shared", f"/shared/{share_uuid}", head, None, None)


def _space_html(
    mode: str, base: str, head: dict[str, Any], space_uuid: str | None, retention: str | None
) -> Response:
    """`space.html` as its owner (`mode` "owner") or a share link ("shared") sees it."""
    return render(
        "space.html",
        mode=mode,
        base=base,
        space_uuid=space_uuid,
        title=head["title"],
        icon=head["icon"],
        retention=retention,
    )


def embed_page(
    share_uuid: str | None,
    head: dict[str, Any],
    *,
    theme: str = "auto",
    transparent: bool = False,
    limit: int = EMBED_TASKS,
    status: int = 200,
) -> Response:
    """A share link's compact live view, for other pages to frame: its newest `limit`
    top-level tasks with their bars and log lines, in `theme` (`auto` follows the
    system), on a `transparent` background if asked. No `share_uuid`: the link was
    revoked or never existed, and the page says so (404)."""
    return render(
        "embed.html",
        status,
        EMBED_HEADERS,
        base=None if share_uuid is None else f"/shared/{share_uuid}",
        title=head.get("title"),
        icon=head.get("icon"),
        theme=theme,
        transparent=transparent,
        limit=limit,
    )


def not_found_page(message: str) -> Response:
    """A 404 for a browser, saying what was not found."""
    return render("not_found.html", 404, heading="Not found", message=message, shared=False)


def link_gone_page() -> Response:
    """A 404 for a browser opening a share link that was revoked, whose space was deleted
    (by its owner or for being idle), or that never existed: the three look alike, so that
    a link tells nothing about a space it no longer opens."""
    return render(
        "not_found.html",
        404,
        heading="This link no longer works",
        message="It was revoked, or the space it showed was deleted.",
        shared=True,
    )


_PERIOD_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def period_words(seconds: int) -> str:
    """A period as people say it, in its largest whole unit: "90 days", "1 day", "36
    hours", "90 minutes"."""
    unit, size = next((unit, size) for unit, size in _PERIOD_UNITS if seconds % size == 0)
    count = seconds // size
    return f"{count:,} {unit}{'' if count == 1 else 's'}"
