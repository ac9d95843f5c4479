"""Pieces of the OpenAPI description shared by every module that describes its routes:
references, answers, parameters, and the answers many operations share."""

from __future__ import annotations

from typing import Any


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response = json_answer(ref("ErrorOut"), description)
    if headers:
        response["headers"] = headers
    return response


def response_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


def link(operation_id: str, **parameters: str) -> dict[str, Any]:
    """A link from a response to `operation_id`, its parameters taken from the exchange."""
    return {"operationId": operation_id, "parameters": parameters}


def made_link(operation_id: str, param: str) -> dict[str, Any]:
    """A link from a create in a space to `operation_id` on what it made, the path's
    `param` its uuid."""
    return link(
        operation_id, space_uuid="$request.path.space_uuid", **{param: "$response.body#/uuid"}
    )


def path_param(name: str, description: str, kind: str | None = "uuid") -> dict[str, Any]:
    """A path parameter: a string in the `kind` format (None: any string)."""
    schema = {"type": "string"} if kind is None else {"type": "string", "format": kind}
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema,
    }


def uuid_param(name: str, description: str) -> dict[str, Any]:
    return path_param(name, description + " A value that is not a UUID answers 404.")


def query_param(
    name: str, schema: dict[str, Any], description: str, **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
        **extra,
    }


def space_read_params(state: str, *, cursors_say_which: bool) -> list[dict[str, Any]]:
    """A space read's `limit`, `before`, `after` and `state` (`state` describes it);
    `cursors_say_which`: the cursors' descriptions name the created_at to pass."""
    cursors = [
        query_param(
            name,
            {"type": "string", "format": "date-time"},
            f"Only tasks created strictly {name} this instant"
            + (f" (pass the {end} created_at held)." if cursors_say_which else "."),
        )
        for name, end in (("before", "oldest"), ("after", "newest"))
    ]
    return [
        query_param(
            "limit", {"type": "integer", "minimum": 1}, "How many top-level tasks to return."
        ),
        *cursors,
        query_param("state", {"type": "string", "enum": ["active", "finished"]}, state),
    ]


SPACE = uuid_param("space_uuid", "The space's uuid, its credential.")
TASK = uuid_param("task_uuid", "The task's uuid.")
SHARE = uuid_param("share_uuid", "The share link's uuid.")
SHARED_TASK_ID = path_param(
    "task_id", "The task's opaque id under this link (its `id` in the link's JSON).", None
)
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again.",
                               "schema": {"type": "integer", "minimum": 0}}}  # fmt: skip
TOO_LARGE = error("The body is larger than 65,536 bytes.")
UNAVAILABLE = error(
    "A dependency (database or progress store) is down; retry after Retry-After seconds.",
    RETRY_AFTER,
)
# Creates add rows that stay: they are refused when the database's storage runs short.
CREATE_UNAVAILABLE = error(
    "A dependency (database or progress store) is down, or the database's storage is "
    "short: it is past HEADWAY_DATABASE_MAX_SIZE, its disk has less free than "
    "HEADWAY_DISK_FREE_MIN, or its disk is full. Nothing was written; reports still work. "
    "Retry after Retry-After seconds.",
    RETRY_AFTER,
)
# Reports also write live progress, which has a memory budget.
UNAVAILABLE_OR_FULL = error(
    "A dependency (database or progress store) is down, or the live-progress memory budget "
    "is full (of the whole service, or of this task's space), or a report that finishes "
    "its task found the database's disk full; nothing was written. Retry after "
    "Retry-After seconds.",
    RETRY_AFTER,
)
TOO_MANY_REQUESTS = response_ref("TooManyRequests")
NOT_FOUND_TASK = error("No such task (or not a UUID).")
RESPONSES = {
    "TooManyRequests": error(
        "This client address is over its rate for this kind of request (reads: for the tasks "
        "they render, children included), or (creating a task, reporting) holds its share of "
        "the live-progress budget over all its spaces (HEADWAY_PROGRESS_MEMORY_PER_CLIENT); "
        "nothing was done. Retry after Retry-After seconds.",
        RETRY_AFTER,
    ),
    "HeaderFieldsTooLarge": error(
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
KEY_IN_PROGRESS = error(
    "A create with the same Idempotency-Key was still under way and did not settle; "
    "nothing was created. Retry shortly: the retry answers its answer."
)


def create_operation(
    operation_id: str,
    summary: str,
    description: str,
    *,
    body: str,
    created: tuple[str, str],
    links: dict[str, Any],
    refused: str,
    no_space: str | None = "No such space.",
) -> dict[str, Any]:
    """A create's operation: a `body` schema in; 201 with the `created` schema (name,
    description) and its `links` out; the 422 `refused` describes; and the answers every
    create shares. `no_space`: the 404 of a create in the space its path names (None: a
    create in no space)."""
    answer, what = created
    responses = {
        "201": {**json_answer(ref(answer), what), "links": links},
        "413": TOO_LARGE,
        "422": error(refused),
        "429": TOO_MANY_REQUESTS,
        "503": CREATE_UNAVAILABLE,
    }
    in_space: dict[str, Any] = {}
    if no_space is not None:
        in_space["parameters"] = [SPACE]
        responses["404"] = error(no_space)
    return {
        "operationId": operation_id,
        "summary": summary,
        "description": description,
        **in_space,
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref(body)}}},
        "responses": responses,
    }


def list_operation(
    operation_id: str,
    summary: str,
    description: str | None,
    *,
    items: str,
    listed: str,
    no_space: str = "No such space.",
) -> dict[str, Any]:
    """A list of what a space holds: 200 with an array of the `items` schema (`listed`
    describes it), 404 `no_space`, 503. No `description` with None."""
    responses = {"200": json_answer({"type": "array", "items": ref(items)}, listed)}
    responses["404"] = error(no_space)
    return operation(operation_id, summary, description, [SPACE], responses, rated=False)


def operation(
    operation_id: str,
    summary: str,
    description: str | None,
    parameters: list[dict[str, Any]],
    responses: dict[str, Any],
    *,
    rated: bool = True,
    body: dict[str, Any] | None = None,
    unavailable: dict[str, Any] = UNAVAILABLE,
) -> dict[str, Any]:
    """An operation taking `body` (its request body, if any) and answering its
    `responses`, then 429 (when `rated`: every read is) and the 503 `unavailable`. No
    `description` with None."""
    described = {} if description is None else {"description": description}
    taken = {} if body is None else {"requestBody": body}
    last = {"429": TOO_MANY_REQUESTS, "503": unavailable} if rated else {"503": unavailable}
    return {
        "operationId": operation_id,
        "summary": summary,
        **described,
        "parameters": parameters,
        **taken,
        "responses": {**responses, **last},
    }


def delete_operation(
    operation_id: str,
    summary: str,
    description: str,
    parameters: list[dict[str, Any]],
    *,
    done: str,
    not_found: str,
) -> dict[str, Any]:
    """A delete: 204 with no body (`done` describes it), 404 `not_found`, 503."""
    responses = {"204": {"description": done}, "404": error(not_found)}
    return operation(operation_id, summary, description, parameters, responses, rated=False)


def idempotent(operation: dict[str, Any]) -> dict[str, Any]:
    """A create's operation with the Idempotency-Key parameter and its answers."""
    responses = dict(operation["responses"])
    created = responses["201"]
    responses["201"] = {**created, "headers": {**created.get("headers", {}), **REPLAYED_HEADER}}
    responses["400"] = error(KEY_REFUSED)
    responses["409"] = KEY_IN_PROGRESS
    responses["422"] = error(responses["422"]["description"] + KEY_REUSED)
    parameters = [*operation.get("parameters", []), parameter_ref("IdempotencyKey")]
    return {**operation, "parameters": parameters, "responses": dict(sorted(responses.items()))}


def parameter_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/parameters/{name}"}


# HTTP methods of a path item (the other keys of a path item are not operations).
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
