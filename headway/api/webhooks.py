"""Webhook registration routes (extension endpoints of the contract)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..domain.schemas import CreateWebhook
from .endpoints import Request, Route
from .openapi_parts import (
    CREATE_UNAVAILABLE,
    SPACE,
    TOO_LARGE,
    TOO_MANY_REQUESTS,
    UNAVAILABLE,
    error,
    json_answer,
    link,
    ref,
)
from .responses import NO_STORE, JSONResponse
from .rest import created, read_create


async def webhooks(request: Request) -> Response:
    """POST registers a webhook; GET lists the space's webhooks."""
    space_uuid = request.path_params["space_uuid"]
    if request.method == "POST":
        body, idempotency = await read_create(request, "webhooks", CreateWebhook)
        answer = await request.service.webhooks.create(space_uuid, body, idempotency)
        return created(answer, idempotency)
    return JSONResponse(await request.service.webhooks.list(space_uuid))


async def delete_webhook(request: Request) -> Response:
    params = request.path_params
    await request.service.webhooks.delete(params["space_uuid"], params["webhook_uuid"])
    return Response(status_code=204, headers=NO_STORE)


routes = [
    Route("/spaces/{space_uuid}/webhooks", webhooks, methods=["GET", "POST"]),
    Route("/spaces/{space_uuid}/webhooks/{webhook_uuid}", delete_webhook, methods=["DELETE"]),
]

NO_SPACE = error("No such space.")

openapi_paths: dict[str, Any] = {
    "/spaces/{space_uuid}/webhooks": {
        "post": {
            "operationId": "createWebhook",
            "summary": "Register a webhook",
            "description": "Completion events of the space's tasks are POSTed to the URL, "
            "signed per the Standard Webhooks specification with the returned secret, which "
            "is shown only here. The URL must resolve to a public address.",
            "parameters": [SPACE],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("CreateWebhook")}},
            },
            "responses": {
                "201": {
                    **json_answer(ref("WebhookCreated"), "The webhook and its signing secret."),
                    "links": {
                        "DeleteWebhook": link(
                            "deleteWebhook",
                            space_uuid="$request.path.space_uuid",
                            webhook_uuid="$response.body#/uuid",
                        ),
                        "ListWebhooks": link("listWebhooks", space_uuid="$request.path.space_uuid"),
                    },
                },
                "404": NO_SPACE,
                "413": TOO_LARGE,
                "422": error(
                    "Not an http(s) URL; a host that is not a valid name; an address, or a "
                    "name resolving to one, that is not public (also when an IPv6 address "
                    "embeds a refused IPv4 address); text that is not UTF-8; malformed JSON."
                ),
                "429": TOO_MANY_REQUESTS,
                "503": CREATE_UNAVAILABLE,
            },
        },
        "get": {
            "operationId": "listWebhooks",
            "summary": "List webhooks",
            "description": "Each with its last 20 deliveries, newest first: an event given "
            "up (after its last attempt, by age, or beyond the webhook's cap of undelivered "
            "events) shows there.",
            "parameters": [SPACE],
            "responses": {
                "200": json_answer({"type": "array", "items": ref("WebhookOut")}, "The webhooks."),
                "404": NO_SPACE,
                "503": UNAVAILABLE,
            },
        },
    },
    "/spaces/{space_uuid}/webhooks/{webhook_uuid}": {
        "delete": {
            "operationId": "deleteWebhook",
            "summary": "Delete a webhook",
            "description": "Deliveries it still had pending are dropped.",
            "parameters": [
                SPACE,
                {
                    "name": "webhook_uuid",
                    "in": "path",
                    "required": True,
                    "description": "The webhook's uuid, as its registration answered it.",
                    "schema": {"type": "string", "format": "uuid"},
                },
            ],
            "responses": {
                "204": {"description": "Deleted."},
                "404": error("No such space or webhook."),
                "503": UNAVAILABLE,
            },
        }
    },
}
