"""`GET /openapi.json`: the OpenAPI 3.1 description, built from the shared schemas."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import schemas
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
    schemas.ErrorOut,
]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("ErrorOut"), description)


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
TOO_LARGE = _error("The body is larger than 65,536 bytes.")
UNAVAILABLE = _error("A dependency (database or progress store) is down; retry later.")
NOT_FOUND_TASK = _error("No such task (or not a UUID).")


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
                    "201": _json(_ref("SpaceCreated"), "The new space."),
                    "413": TOO_LARGE,
                    "422": _error(
                        "icon more than one character, an unknown member, a wrong type, "
                        "a title over 200 characters, or malformed JSON."
                    ),
                    "503": UNAVAILABLE,
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
                    "200": _json(_ref("SpaceOut"), "The space."),
                    "400": _error(
                        "A cursor that is not a timestamp, a limit that is not a whole "
                        "number of at least 1, or an unknown state."
                    ),
                    "404": _error("No such space (or not a UUID)."),
                    "503": UNAVAILABLE,
                },
            }
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
                    "201": _json(_ref("TaskCreated"), "The new task's uuid."),
                    "404": _error("No such space."),
                    "413": TOO_LARGE,
                    "422": _error(
                        "parent_uuid unknown, already a child, or in another space; an "
                        "unknown member, a wrong type, a text over 200 characters, or "
                        "malformed JSON."
                    ),
                    "503": UNAVAILABLE,
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
                        "unknown member; a negative or non-numeric count; malformed JSON; "
                        "a values limit exceeded."
                    ),
                    "404": NOT_FOUND_TASK,
                    "413": TOO_LARGE,
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
                        "current", {"type": "number", "minimum": 0}, "A count, not a percentage."
                    ),
                    _query(
                        "end", {"type": "number", "minimum": 0}, "Omit for a count with no total."
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
                    "400": _error("values not flat, an unknown parameter, or a bad number."),
                    "404": NOT_FOUND_TASK,
                    "503": UNAVAILABLE,
                },
            }
        },
        "/up": {
            "get": {
                "operationId": "health",
                "summary": "Health check",
                "description": "Checks the database and the progress store; reports the "
                "background worker, whose death does not fail the check.",
                "responses": {
                    "200": _json({"type": "object"}, "Healthy."),
                    "503": _json({"type": "object"}, "A dependency is down."),
                },
            }
        },
    }
    paths.update(paths_extra or {})
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Headway",
            "version": "1",
            "description": "Progress reporting over plain HTTP. A space's uuid is its "
            "credential; every report replaces a task's whole state.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


routes = [Route("/openapi.json", openapi, methods=["GET"])]
