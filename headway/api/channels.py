"""Notification channel routes: register, list, test and remove a space's channels."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..domain.schemas import CreateChannel, TestChannel
from .decoding import decode_create
from .endpoints import Request, Route
from .openapi_parts import (
    SPACE,
    TOO_LARGE,
    create_operation,
    delete_operation,
    error,
    json_answer,
    list_operation,
    made_link,
    operation,
    path_param,
    ref,
)
from .responses import JSONResponse, read_body
from .rest import held_routes


async def test_channel(request: Request) -> Response:
    """Send a test message now and answer how it went (a body, if any, is `{}`)."""
    await request.visitor.admit("channels")
    body = await read_body(request)
    if body.strip() not in (b"", b"{}"):
        decode_create(body, TestChannel)
    params = request.path_params
    outcome = await request.service.channels.test(params["space_uuid"], params["channel_uuid"])
    return JSONResponse(outcome)


routes = [
    *held_routes("channels", CreateChannel, "channel_uuid"),
    Route("/spaces/{space_uuid}/channels/{channel_uuid}/test", test_channel, methods=["POST"]),
]

CHANNEL = path_param("channel_uuid", "The channel's uuid, as its registration answered it.")

openapi_paths: dict[str, Any] = {
    "/spaces/{space_uuid}/channels": {
        "post": create_operation(
            "createChannel",
            "Add a notification channel",
            "Finishes (`completed`), failed finishes (`failed`) and stalls (`stalled`, with "
            "`recovered` when the task moves again) of the space's top-level tasks (and "
            "steps, with `steps`) are sent to the Apprise URL: Slack, Discord, Telegram, ntfy, "
            "Gotify, email and many more. The URL holds your tokens: it is shown back only "
            "redacted. Messages never hold a space or task uuid; finishes arriving together "
            "go as one digest.",
            body="CreateChannel",
            created=("ChannelOut", "The channel, its URL redacted."),
            links={
                "TestChannel": made_link("testChannel", "channel_uuid"),
                "DeleteChannel": made_link("deleteChannel", "channel_uuid"),
            },
            refused="A URL Apprise cannot read; a scheme the operator does not allow; a host "
            "that is not public; an unknown event; `stalled_after` outside 60-604800; a "
            "`share_uuid` that is not a share link of the space; the space's channel cap "
            "reached.",
        ),
        "get": list_operation(
            "listChannels",
            "List notification channels",
            "Each with its last 20 deliveries, newest first.",
            items="ChannelWithDeliveries",
            listed="The channels.",
        ),
    },
    "/spaces/{space_uuid}/channels/{channel_uuid}": {
        "delete": delete_operation(
            "deleteChannel",
            "Remove a notification channel",
            "What it still had to send is dropped.",
            [SPACE, CHANNEL],
            done="Removed.",
            not_found="No such space or channel.",
        )
    },
    "/spaces/{space_uuid}/channels/{channel_uuid}/test": {
        "post": operation(
            "testChannel",
            "Send a test message now",
            "The outcome is `failed`, with a detail starting `not sent:`, while the channel's "
            "host or space has its most messages in flight (4 each).",
            [SPACE, CHANNEL],
            {
                "200": json_answer(ref("ChannelDelivery"), "How the test message went."),
                "404": error("No such space or channel."),
                "413": TOO_LARGE,
                "422": error("A body that is not `{}`."),
            },
            body={
                "required": True,
                "description": "`{}`, or no body at all.",
                "content": {"application/json": {"schema": ref("TestChannel")}},
            },
        )
    },
}
