"""Webhook registration routes (extension endpoints of the contract)."""

from __future__ import annotations

from typing import Any

from ..domain.schemas import CreateWebhook
from .openapi_parts import (
    SPACE,
    create_operation,
    delete_operation,
    link,
    list_operation,
    made_link,
    path_param,
)
from .rest import held_routes

routes = held_routes("webhooks", CreateWebhook, "webhook_uuid")

openapi_paths: dict[str, Any] = {
    "/spaces/{space_uuid}/webhooks": {
        "post": create_operation(
            "createWebhook",
            "Register a webhook",
            "Completion events of the space's tasks are POSTed to the URL, signed per the "
            "Standard Webhooks specification with the returned secret, which is shown only "
            "here. The URL must resolve to a public address.",
            body="CreateWebhook",
            created=("WebhookCreated", "The webhook and its signing secret."),
            links={
                "DeleteWebhook": made_link("deleteWebhook", "webhook_uuid"),
                "ListWebhooks": link("listWebhooks", space_uuid="$request.path.space_uuid"),
            },
            refused="Not an http(s) URL; a host that is not a valid name; an address, or a name "
            "resolving to one, that is not public (also when an IPv6 address embeds a refused "
            "IPv4 address); text that is not UTF-8; malformed JSON.",
        ),
        "get": list_operation(
            "listWebhooks",
            "List webhooks",
            "Each with its last 20 deliveries, newest first: an event given up (after its "
            "last attempt, by age, or beyond the webhook's cap of undelivered events) shows "
            "there.",
            items="WebhookOut",
            listed="The webhooks.",
        ),
    },
    "/spaces/{space_uuid}/webhooks/{webhook_uuid}": {
        "delete": delete_operation(
            "deleteWebhook",
            "Delete a webhook",
            "Deliveries it still had pending are dropped.",
            [
                SPACE,
                path_param("webhook_uuid", "The webhook's uuid, as its registration answered it."),
            ],
            done="Deleted.",
            not_found="No such space or webhook.",
        )
    },
}
