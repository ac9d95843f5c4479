"""The OpenAPI description of the core routes: spaces, tasks, reports and the health
check (every other module describes its own routes beside them)."""

from __future__ import annotations

from typing import Any

from .openapi_parts import (
    NOT_FOUND_TASK,
    SPACE,
    TASK,
    TOO_LARGE,
    UNAVAILABLE_OR_FULL,
    create_operation,
    delete_operation,
    error,
    json_answer,
    link,
    operation,
    query_param,
    ref,
    space_read_params,
)

BAD_CREATE_BODY = (
    " A body that is not valid JSON, or holds an unknown or wrongly typed member, is 422, as "
    "on every create (a report answers the same with 400)."
)
BAD_REPORT_BODY = (
    " A body that is not valid JSON, or holds an unknown or wrongly typed member, is 400, as "
    "on every report (a create answers the same with 422)."
)


def space_paths() -> dict[str, Any]:
    """`/spaces`, `/spaces/{space_uuid}` and its tasks."""
    return {
        "/spaces": {
            "post": create_operation(
                "createSpace",
                "Create a space",
                "Creates an anonymous space. The uuid in the answer is the only credential and "
                "is shown only here." + BAD_CREATE_BODY,
                body="CreateSpace",
                created=("SpaceCreated", "The new space."),
                links={
                    "GetSpace": link("getSpace", space_uuid="$response.body#/uuid"),
                    "CreateTask": link("createTask", space_uuid="$response.body#/uuid"),
                    "CreateWebhook": link("createWebhook", space_uuid="$response.body#/uuid"),
                    "ListWebhooks": link("listWebhooks", space_uuid="$response.body#/uuid"),
                },
                refused="icon more than one character, an unknown member, a wrong type, a title "
                "over 200 characters, text that is not UTF-8 or holds a lone surrogate, or "
                "malformed JSON.",
                no_space=None,
            )
        },
        "/spaces/{space_uuid}": {
            "get": operation(
                "getSpace",
                "Read a space",
                "Top-level tasks with their children nested. With no parameters, "
                "every task, oldest first. A bare `limit` gives the newest `limit` tasks, oldest "
                "first; `before` gives newest first; `after`, or `before` with `after`, gives "
                "oldest first. `limit` applies after the cursors.",
                [
                    SPACE,
                    *space_read_params(
                        "Only running or only finished top-level tasks.", cursors_say_which=True
                    ),
                ],
                {
                    "200": {
                        "description": "The space. A browser (an Accept preferring text/html) "
                        "gets its live dashboard instead.",
                        "content": {
                            "application/json": {"schema": ref("SpaceOut")},
                            "text/html": {"schema": {"type": "string"}},
                        },
                    },
                    "400": error(
                        "A cursor that is not a timestamp, a limit that is not a whole "
                        "number of at least 1, an unknown state, a parameter given twice, "
                        "or one that is not UTF-8 once percent-decoded."
                    ),
                    "404": error("No such space (or not a UUID)."),
                },
            ),
            "delete": delete_operation(
                "deleteSpace",
                "Delete a space and everything in it",
                "Its tasks and their progress, share links, webhooks, channels and undelivered "
                "events go for good; its live streams end on every instance. From the answer "
                "on, every read is 404 and nothing of it is delivered; its rows are removed in "
                "the background, in transactions of a few milliseconds.",
                [SPACE],
                done="Deleted.",
                not_found="No such space (or not a UUID).",
            ),
        },
        "/spaces/{space_uuid}/tasks": {
            "post": create_operation(
                "createTask",
                "Create a task",
                "Report to the task as soon as work starts: an unreported task looks like a "
                "dead reporter." + BAD_CREATE_BODY,
                body="CreateTask",
                created=("TaskCreated", "The new task's uuid."),
                links={
                    "GetTask": link("getTask", task_uuid="$response.body#/uuid"),
                    "ReportProgress": link("reportProgress", task_uuid="$response.body#/uuid"),
                    "ReportProgressByUrl": link(
                        "reportProgressByUrl", task_uuid="$response.body#/uuid"
                    ),
                    "GetSpace": link("getSpace", space_uuid="$request.path.space_uuid"),
                },
                refused="parent_uuid unknown, already a child, or in another space; an unknown "
                "member, a wrong type, a text over 200 characters, text that is not UTF-8 or "
                "holds a lone surrogate, or malformed JSON.",
            )
        },
    }


def task_paths() -> dict[str, Any]:
    """`/tasks/{task_uuid}`, its report by URL, and `/up`."""
    return {
        "/tasks/{task_uuid}": {
            "get": operation(
                "getTask",
                "Read one task",
                None,
                [TASK],
                {
                    "200": json_answer(ref("TaskOut"), "The task, children nested."),
                    "404": NOT_FOUND_TASK,
                },
            ),
            "put": operation(
                "reportProgress",
                "Report progress",
                "Replaces the task's whole state. A body of exactly "
                '{"done": true} finishes the task and keeps the last numbers. current at or '
                "above a positive end finishes the task (a parent's own counts are ignored). "
                "A report to a parent that does not finish it holds the parent open: it then "
                "finishes only by its own done, never with its last step; a parent nobody "
                "reported to finishes when its last step does." + BAD_REPORT_BODY,
                [TASK],
                {
                    "200": json_answer(ref("TaskOut"), "The task as it now stands."),
                    "400": error(
                        "values not a flat object of numbers, strings or booleans; an "
                        "unknown member; a negative or non-numeric count, or one beyond a "
                        "64-bit float; text that is not UTF-8 or holds a lone surrogate; "
                        "malformed JSON; a values limit exceeded."
                    ),
                    "404": NOT_FOUND_TASK,
                    "413": TOO_LARGE,
                },
                body={
                    "required": True,
                    "content": {"application/json": {"schema": ref("ReportBody")}},
                },
                unavailable=UNAVAILABLE_OR_FULL,
            ),
            "delete": delete_operation(
                "deleteTask",
                "Delete a task and its steps",
                "The task, its children and their progress go for good, with undelivered "
                "events about them. A deleted step's parent shows its steps without it, and "
                "finishes (with its one event) if every step left has finished, unless its own "
                "reports hold it open. The space's open streams start over from a snapshot.",
                [TASK],
                done="Deleted.",
                not_found=NOT_FOUND_TASK["description"],
            ),
            "patch": {
                "operationId": "patchTask",
                "summary": "Refused: use PUT",
                "deprecated": True,
                "description": "Always refused, whether or not the task exists: a merge would be "
                "implied while every write replaces the whole state.",
                "parameters": [TASK],
                "responses": {"405": error("Always; use PUT.")},
            },
        },
        "/tasks/{task_uuid}/report": {
            "get": operation(
                "reportProgressByUrl",
                "Report progress by URL",
                "The same write as PUT, for clients that can only fire a URL. "
                "Anything that follows the URL performs the write.",
                [
                    TASK,
                    query_param(
                        "current",
                        {"type": "number", "minimum": 0},
                        "A count, not a percentage. Within a 64-bit float.",
                    ),
                    query_param(
                        "end",
                        {"type": "number", "minimum": 0},
                        "Omit for a count with no total. Within a 64-bit float.",
                    ),
                    query_param(
                        "done",
                        {"type": "boolean"},
                        "Finishes the task; alone, keeps the last numbers.",
                    ),
                    query_param(
                        "values",
                        {"type": "object", "additionalProperties": {"type": "string"}},
                        "Written values[key]=text; values arrive as text.",
                        style="deepObject",
                        explode=True,
                    ),
                ],
                {
                    "200": json_answer(ref("TaskOut"), "The task as it now stands."),
                    "400": error(
                        "values not flat, an unknown parameter, a parameter given twice, one "
                        "that is not UTF-8 once percent-decoded, or a bad number (not a "
                        "finite, non-negative number that fits a 64-bit float)."
                    ),
                    "404": NOT_FOUND_TASK,
                },
                unavailable=UNAVAILABLE_OR_FULL,
            )
        },
        "/up": {
            "get": {
                "operationId": "health",
                "summary": "Health check",
                "description": "Checks the database and the progress store; reports the "
                "background worker and loops, whose death does not fail the check, and the "
                "database's disk.",
                "responses": {
                    "200": json_answer(
                        ref("HealthOut"),
                        "Healthy (ok), or degraded: the database's disk is low or full "
                        "(creates may be refused) while reports and reads work.",
                    ),
                    "503": json_answer(ref("HealthOut"), "A dependency is down."),
                },
            }
        },
    }
