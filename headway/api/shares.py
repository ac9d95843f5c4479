"""Share links: create, list and revoke them (`/spaces/{s}/shares`), and what a link
opens (`/shared/{share_uuid}`: the space read-only, as JSON, a page, or a live stream),
which never shows a uuid of the space or its tasks (see `headway.domain.share_ids`)."""

from __future__ import annotations

from typing import Any, cast

from starlette.responses import Response

from ..domain.errors import NotFound
from ..domain.schemas import CreateShare
from ..domain.tasks import canonical_uuid
from ..web import pages
from .decoding import query_params
from .endpoints import Request, Route
from .events import open_stream, stream_operation
from .openapi_parts import (
    SHARE,
    SPACE,
    create_operation,
    delete_operation,
    error,
    link,
    list_operation,
    made_link,
    operation,
    ref,
    space_read_params,
)
from .rest import held_routes
from .streaming import JSONStream, space_pieces


async def shared(request: Request) -> Response:
    """The space a link shows: a page for a browser, else JSON like the space read's."""
    share_uuid = request.path_params["share_uuid"]
    service = request.service
    bill = await request.visitor.read_bill()  # the page costs 1; its stream pays its snapshot
    html = pages.wants_html(request)
    try:
        space_uuid = await service.shares.space_of(share_uuid)
        if html:  # the space may go in between: the link then no longer works either
            return pages.shared_page(share_uuid, await service.spaces.head(space_uuid))
    except NotFound:
        if html:
            return pages.link_gone_page()
        raise
    view = await service.shares.view(cast(str, canonical_uuid(share_uuid)))  # it was found
    params = query_params(request.scope["query_string"])
    head, found = await service.reads.read(
        space_uuid,
        before=params.get("before"),
        after=params.get("after"),
        limit=params.get("limit"),
        state=params.get("state"),
    )
    return JSONStream(space_pieces(head, view.pages(bill.pages(found))), vary_accept=True)


async def shared_events(request: Request) -> Response:
    share_uuid = request.path_params["share_uuid"]
    service = request.service
    space_uuid = await service.shares.space_of(share_uuid)
    # Keyed by the link's canonical uuid, which its revocation names, however it was spelled.
    share = await service.shares.view(cast(str, canonical_uuid(share_uuid)))
    return await open_stream(request, space_uuid, share)


routes = [
    *held_routes("shares", CreateShare, "share_uuid"),
    Route("/shared/{share_uuid}", shared, methods=["GET"]),
    Route("/shared/{share_uuid}/events", shared_events, methods=["GET"]),
]

NO_SPACE = "No such space (or not a UUID)."
openapi_paths: dict[str, Any] = {
    "/spaces/{space_uuid}/shares": {
        "post": create_operation(
            "createShare",
            "Create a share link",
            "A read-only link to the space: it opens the space's live page, its JSON and its "
            "stream, and shows no uuid of the space or its tasks. Body: `{}`.",
            body="CreateShare",
            created=("ShareCreated", "The new link."),
            links={
                "ReadShared": link("readShared", share_uuid="$response.body#/uuid"),
                "RevokeShare": made_link("revokeShare", "share_uuid"),
            },
            refused="A body other than {}, malformed JSON, or a space already holding its most "
            "share links (100 by default).",
            no_space=NO_SPACE,
        ),
        "get": list_operation(
            "listShares",
            "List share links",
            None,
            items="ShareOut",
            listed="Oldest first.",
            no_space=NO_SPACE,
        ),
    },
    "/spaces/{space_uuid}/shares/{share_uuid}": {
        "delete": delete_operation(
            "revokeShare",
            "Revoke a share link",
            "The link reads nothing from now on; its open streams end within a second.",
            [SPACE, SHARE],
            done="Revoked.",
            not_found="No such space, or no such link in it.",
        )
    },
    "/shared/{share_uuid}": {
        "get": operation(
            "readShared",
            "Read a space through a share link",
            "As the space read (same parameters, same order), each task with "
            "an opaque `id` and `parent_id` in place of `uuid`, `space_uuid` and "
            "`parent_uuid`. A browser (an Accept preferring text/html) gets the live page.",
            [SHARE, *space_read_params("Only this state.", cursors_say_which=False)],
            {
                "200": {
                    "description": "The space, read-only.",
                    "content": {
                        "application/json": {"schema": ref("SharedSpaceOut")},
                        "text/html": {"schema": {"type": "string"}},
                    },
                },
                "400": error("A bad cursor, limit or state, or a parameter given twice."),
                "404": error("No such share link: revoked, or never created (or not a UUID)."),
            },
        )
    },
    "/shared/{share_uuid}/events": {
        "get": stream_operation("streamShared", "Watch a space live through a share link", SHARE)
    },
}
