"""`GET /openapi.json`: the OpenAPI 3.1 description, built from the shared schemas."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import schemas
from ..health_out import HealthOut
from .responses import JSONResponse

_MODELS = [
    schemas.CreateSpace,
    schemas.CreateTask,
    schemas.ReportBody,
    schemas.CreateWebhook,
    schemas.SpaceCreated,
    schemas.SpaceOut,
    schemas.TaskCreated,
    schemas.TaskOut,
    schemas.WebhookCreated,
    schemas.WebhookOut,
    schemas.WebhookDelivery,
    schemas.CreateChannel,
    schemas.TestChannel,
    schemas.ChannelOut,
    schemas.ChannelWithDeliveries,
    schemas.ChannelDelivery,
    schemas.CreateShare,
    schemas.ShareCreated,
    schemas.ShareOut,
    schemas.SharedSpaceOut,
    schemas.ShieldsOut,
    schemas.ErrorOut,
    HealthOut,
]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response = _json(_ref("ErrorOut"), description)
    if headers:
        response["headers"] = headers
    return response


def _response_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


def _link(operation_id: str, **parameters: str) -> dict[str, Any]:
    """A link from a response to `operation_id`, its parameters taken from the exchange."""
    return {"operationId": operation_id, "parameters": parameters}


def _uuid_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description + " A value that is not a UUID answers 404.",
        "schema": {"type": "string", "format": "uuid"},
    }


def _query(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
        **extra,
    }


SPACE = _uuid_param("space_uuid", "The space's uuid, its credential.")
TASK = _uuid_param("task_uuid", "The task's uuid.")
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again.",
                               "schema": {"type": "integer", "minimum": 0}}}  # fmt: skip
TOO_LARGE = _error("The body is larger than 65,536 bytes.")
UNAVAILABLE = _error(
    "A dependency (database or progress store) is down; retry after Retry-After seconds.",
    RETRY_AFTER,
)
# Creates add rows that stay: they are refused when the database's storage runs short.
CREATE_UNAVAILABLE = _error(
    "A dependency (database or progress store) is down, or the database's storage is "
    "short: it is past HEADWAY_DATABASE_MAX_SIZE, its disk has less free than "
    "HEADWAY_DISK_FREE_MIN, or its disk is full. Nothing was written; reports still work. "
    "Retry after Retry-After seconds.",
    RETRY_AFTER,
)
# Reports also write live progress, which has a memory budget.
UNAVAILABLE_OR_FULL = _error(
    "A dependency (database or progress store) is down, or the live-progress memory budget "
    "is full (of the whole service, or of this task's space), or a report that finishes "
    "its task found the database's disk full; nothing was written. Retry after "
    "Retry-After seconds.",
    RETRY_AFTER,
)
TOO_MANY_REQUESTS = _response_ref("TooManyRequests")
NOT_FOUND_TASK = _error("No such task (or not a UUID).")
RESPONSES = {
    "TooManyRequests": _error(
        "This client address is over its rate for this kind of request (reads: for the tasks "
        "they render, children included), or (creating a task, reporting) holds its share of "
        "the live-progress budget over all its spaces (HEADWAY_PROGRESS_MEMORY_PER_CLIENT); "
        "nothing was done. Retry after Retry-After seconds.",
        RETRY_AFTER,
    ),
    "HeaderFieldsTooLarge": _error(
        "The request head is too large: its URL, or its request line and header fields "
        "together, pass the server's limit. Answered before any route is tried."
    ),
}
# Creates honour an Idempotency-Key (see `service.idempotency`).
IDEMPOTENT = frozenset(
    {"createSpace", "createTask", "createWebhook", "createChannel", "createShare"}
)
PARAMETERS = {
    "IdempotencyKey": {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "Makes a retried create safe: the same key with the same request "
        "(byte for byte) from the same space (for `POST /spaces`, the same client address) "
        "within 24 hours answers the first answer again (same status and body, with "
        "`Idempotent-Replayed: true`) and creates nothing; with another body or endpoint it "
        "is 422. Any 1 to 255 printable ASCII characters, e.g. a random UUID; longer, "
        "empty, other characters or given twice: 400. Only creates that were made are "
        "remembered: a refused one may be sent again with the same key.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
    }
}
REPLAYED_HEADER = {
    "Idempotent-Replayed": {
        "description": "`true` when this is the first answer under the request's "
        "Idempotency-Key again (nothing was created this time); absent otherwise.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}
KEY_REFUSED = (
    "An Idempotency-Key that is empty, longer than 255 characters, not printable ASCII, "
    "or given twice."
)
KEY_REUSED = (
    " Or an Idempotency-Key used in the last 24 hours with another request (another body "
    "or endpoint)."
)
KEY_IN_PROGRESS = _error(
    "A create with the same Idempotency-Key was still under way and did not settle; "
    "nothing was created. Retry shortly: the retry answers its answer."
)


def idempotent(operation: dict[str, Any]) -> dict[str, Any]:
    """A create's operation with the Idempotency-Key parameter and its answers."""
    responses = dict(operation["responses"])
    created = dict(responses["201"])
    created["headers"] = {**created.get("headers", {}), **REPLAYED_HEADER}
    responses["201"] = created
    responses["400"] = _error(KEY_REFUSED)
    responses["409"] = KEY_IN_PROGRESS
    responses["422"] = _error(responses["422"]["description"] + KEY_REUSED)
    parameters = [*operation.get("parameters", []), _parameter_ref("IdempotencyKey")]
    return {**operation, "parameters": parameters, "responses": dict(sorted(responses.items()))}


def _parameter_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/parameters/{name}"}


# HTTP methods of a path item (the other keys of a path item are not operations).
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def build_document(paths_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole OpenAPI document; `paths_extra` adds the paths of optional features."""
    _, components = msgspec.json.schema_components(
        _MODELS, ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, Any] = {
        "/spaces": {
            "post": {
                "operationId": "createSpace",
                "summary": "Create a space",
                "description": "Creates an anonymous space. The uuid in the answer is the only "
                "credential and is shown only here.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("CreateSpace")}},
                },
                "responses": {
                    "201": {
                        **_json(_ref("SpaceCreated"), "The new space."),
                        "links": {
                            "GetSpace": _link("getSpace", space_uuid="$response.body#/uuid"),
                            "CreateTask": _link("createTask", space_uuid="$response.body#/uuid"),
                            "CreateWebhook": _link(
                                "createWebhook", space_uuid="$response.body#/uuid"
                            ),
                            "ListWebhooks": _link(
                                "listWebhooks", space_uuid="$response.body#/uuid"
                            ),
                        },
                    },
                    "413": TOO_LARGE,
                    "422": _error(
                        "icon more than one character, an unknown member, a wrong type, "
                        "a title over 200 characters, text that is not UTF-8 or holds a lone "
                        "surrogate, or malformed JSON."
                    ),
                    "429": TOO_MANY_REQUESTS,
                    "503": CREATE_UNAVAILABLE,
                },
            }
        },
        "/spaces/{space_uuid}": {
            "get": {
                "operationId": "getSpace",
                "summary": "Read a space",
                "description": "Top-level tasks with their children nested. With no parameters, "
                "every task, oldest first. A bare `limit` gives the newest `limit` tasks, oldest "
                "first; `before` gives newest first; `after`, or `before` with `after`, gives "
                "oldest first. `limit` applies after the cursors.",
                "parameters": [
                    SPACE,
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1},
                        "How many top-level tasks to return.",
                    ),
                    _query(
                        "before",
                        {"type": "string", "format": "date-time"},
                        "Only tasks created strictly before this instant "
                        "(pass the oldest created_at held).",
                    ),
                    _query(
                        "after",
                        {"type": "string", "format": "date-time"},
                        "Only tasks created strictly after this instant "
                        "(pass the newest created_at held).",
                    ),
                    _query(
                        "state",
                        {"type": "string", "enum": ["active", "finished"]},
                        "Only running or only finished top-level tasks.",
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "The space. A browser (an Accept preferring text/html) "
                        "gets its live dashboard instead.",
                        "content": {
                            "application/json": {"schema": _ref("SpaceOut")},
                            "text/html": {"schema": {"type": "string"}},
                        },
                    },
                    "400": _error(
                        "A cursor that is not a timestamp, a limit that is not a whole "
                        "number of at least 1, an unknown state, a parameter given twice, "
                        "or one that is not UTF-8 once percent-decoded."
                    ),
                    "404": _error("No such space (or not a UUID)."),
                    "429": TOO_MANY_REQUESTS,
                    "503": UNAVAILABLE,
                },
            },
            "delete": {
                "operationId": "deleteSpace",
                "summary": "Delete a space and everything in it",
                "description": "Its tasks and their progress, share links, webhooks, channels "
                "and undelivered events go for good; its live streams end on every instance. "
                "From the answer on, every read is 404 and nothing of it is delivered; its rows "
                "are removed in the background, in transactions of a few milliseconds.",
                "parameters": [SPACE],
                "responses": {
                    "204": {"description": "Deleted."},
                    "404": _error("No such space (or not a UUID)."),
                    "503": UNAVAILABLE,
                },
            },
        },
        "/spaces/{space_uuid}/tasks": {
            "post": {
                "operationId": "createTask",
                "summary": "Create a task",
                "description": "Report to the task as soon as work starts: an unreported task "
                "looks like a dead reporter.",
                "parameters": [SPACE],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("CreateTask")}},
                },
                "responses": {
                    "201": {
                        **_json(_ref("TaskCreated"), "The new task's uuid."),
                        "links": {
                            "GetTask": _link("getTask", task_uuid="$response.body#/uuid"),
                            "ReportProgress": _link(
                                "reportProgress", task_uuid="$response.body#/uuid"
                            ),
                            "ReportProgressByUrl": _link(
                                "reportProgressByUrl", task_uuid="$response.body#/uuid"
                            ),
                            "GetSpace": _link("getSpace", space_uuid="$request.path.space_uuid"),
                        },
                    },
                    "404": _error("No such space."),
                    "413": TOO_LARGE,
                    "422": _error(
                        "parent_uuid unknown, already a child, or in another space; an "
                        "unknown member, a wrong type, a text over 200 characters, text "
                        "that is not UTF-8 or holds a lone surrogate, or malformed JSON."
                    ),
                    "429": TOO_MANY_REQUESTS,
                    "503": CREATE_UNAVAILABLE,
                },
            }
        },
        "/tasks/{task_uuid}": {
            "get": {
                "operationId": "getTask",
                "summary": "Read one task",
                "parameters": [TASK],
                "responses": {
                    "200": _json(_ref("TaskOut"), "The task, children nested."),
                    "404": NOT_FOUND_TASK,
                    "429": TOO_MANY_REQUESTS,
                    "503": UNAVAILABLE,
                },
            },
            "put": {
                "operationId": "reportProgress",
                "summary": "Report progress",
                "description": "Replaces the task's whole state. A body of exactly "
                '{"done": true} finishes the task and keeps the last numbers. current at or '
                "above a positive end finishes the task.",
                "parameters": [TASK],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ReportBody")}},
                },
                "responses": {
                    "200": _json(_ref("TaskOut"), "The task as it now stands."),
                    "400": _error(
                        "values not a flat object of numbers, strings or booleans; an "
                        "unknown member; a negative or non-numeric count, or one beyond a "
                        "64-bit float; text that is not UTF-8 or holds a lone surrogate; "
                        "malformed JSON; a values limit exceeded."
                    ),
                    "404": NOT_FOUND_TASK,
                    "413": TOO_LARGE,
                    "429": TOO_MANY_REQUESTS,
                    "503": UNAVAILABLE_OR_FULL,
                },
            },
            "delete": {
                "operationId": "deleteTask",
                "summary": "Delete a task and its steps",
                "description": "The task, its children and their progress go for good, with "
                "undelivered events about them. A deleted step's parent shows its steps "
                "without it, and finishes (with its one event) if every step left has "
                "finished. The space's open streams start over from a snapshot.",
                "parameters": [TASK],
                "responses": {
                    "204": {"description": "Deleted."},
                    "404": NOT_FOUND_TASK,
                    "503": UNAVAILABLE,
                },
            },
            "patch": {
                "operationId": "patchTask",
                "summary": "Refused: use PUT",
                "deprecated": True,
                "description": "Always refused, whether or not the task exists: a merge would be "
                "implied while every write replaces the whole state.",
                "parameters": [TASK],
                "responses": {"405": _error("Always; use PUT.")},
            },
        },
        "/tasks/{task_uuid}/report": {
            "get": {
                "operationId": "reportProgressByUrl",
                "summary": "Report progress by URL",
                "description": "The same write as PUT, for clients that can only fire a URL. "
                "Anything that follows the URL performs the write.",
                "parameters": [
                    TASK,
                    _query(
                        "current",
                        {"type": "number", "minimum": 0},
                        "A count, not a percentage. Within a 64-bit float.",
                    ),
                    _query(
                        "end",
                        {"type": "number", "minimum": 0},
                        "Omit for a count with no total. Within a 64-bit float.",
                    ),
                    _query(
                        "done",
                        {"type": "boolean"},
                        "Finishes the task; alone, keeps the last numbers.",
                    ),
                    _query(
                        "values",
                        {"type": "object", "additionalProperties": {"type": "string"}},
                        "Written values[key]=text; values arrive as text.",
                        style="deepObject",
                        explode=True,
                    ),
                ],
                "responses": {
                    "200": _json(_ref("TaskOut"), "The task as it now stands."),
                    "400": _error(
                        "values not flat, an unknown parameter, a parameter given twice, one "
                        "that is not UTF-8 once percent-decoded, or a bad number (not a "
                        "finite, non-negative number that fits a 64-bit float)."
                    ),
                    "404": NOT_FOUND_TASK,
                    "429": TOO_MANY_REQUESTS,
                    "503": UNAVAILABLE_OR_FULL,
                },
            }
        },
        "/up": {
            "get": {
                "operationId": "health",
                "summary": "Health check",
                "description": "Checks the database and the progress store; reports the "
                "background worker and loops, whose death does not fail the check, and the "
                "database's disk.",
                "responses": {
                    "200": _json(
                        _ref("HealthOut"),
                        "Healthy (ok), or degraded: the database's disk is low or full "
                        "(creates may be refused) while reports and reads work.",
                    ),
                    "503": _json(_ref("HealthOut"), "A dependency is down."),
                },
            }
        },
    }
    paths.update(paths_extra or {})
    paths = {
        path: {
            key: idempotent(value)
            if key in METHODS and value.get("operationId") in IDEMPOTENT
            else value
            for key, value in item.items()
        }
        for path, item in paths.items()
    }
    # Answered by the HTTP server itself, before any route, on every path.
    headers_too_large = {"431": _response_ref("HeaderFieldsTooLarge")}
    paths = {
        path: {
            key: {**value, "responses": {**value["responses"], **headers_too_large}}
            if key in METHODS
            else value
            for key, value in item.items()
        }
        for path, item in paths.items()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Headway",
            "version": "1",
            "description": "Progress reporting over plain HTTP. A space's uuid is its "
            "credential; every report replaces a task's whole state.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": RESPONSES,
            "parameters": PARAMETERS,
        },
    }


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


routes = [Route("/openapi.json", openapi, methods=["GET"])]
