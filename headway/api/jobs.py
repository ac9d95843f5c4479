"""Jobs: `GET /spaces/{s}/jobs`, and through a share link `GET /shared/{share}/jobs`
(see `headway.domain.jobs` and `service.jobs`). A read pays for each job it lists, as a space
read pays for each task."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..domain.schemas import JobsOut
from ..service.jobs import MAX_LIMIT
from .decoding import query_params
from .endpoints import Request, Route
from .openapi_parts import (
    SHARE,
    SPACE,
    error,
    json_answer,
    operation,
    query_param,
    ref,
)
from .responses import JSONResponse


async def jobs(request: Request) -> Response:
    """A space's jobs, by its uuid or through a share link."""
    params = request.path_params
    if "share_uuid" in params:
        space_uuid = await request.service.shares.space_of(params["share_uuid"])
    else:
        space_uuid = params["space_uuid"]
    bill = await request.visitor.read_bill()
    limit = query_params(request.scope["query_string"]).get("limit")
    found = await request.service.jobs.list(space_uuid, limit)
    await bill.pay(len(found))
    return JSONResponse(JobsOut(found))


routes = [
    Route("/spaces/{space_uuid}/jobs", jobs, methods=["GET"]),
    Route("/shared/{share_uuid}/jobs", jobs, methods=["GET"]),
]

_LIMIT = query_param(
    "limit",
    {"type": "integer", "minimum": 1},
    f"How many jobs, of newest activity (default and most: {MAX_LIMIT}; a larger one "
    "answers that many).",
)
_DESCRIPTION = (
    "A job is the tasks of the space with one title, source and parent's title (a task "
    "without a title is in none); its runs are its finished tasks. Each job: its runs and "
    "failed runs, its active tasks, its usual duration (p50 and p95 of its last 20 "
    "succeeded runs, once it has 5; failed runs never count) and its newest 30 runs. Jobs "
    "come newest activity first (a task created or finished). Runs are counted from the "
    "version that keeps jobs on: tasks made before it are in none."
)


def _operation(operation_id: str, summary: str, parameter: dict[str, Any], missing: str) -> Any:
    responses = {
        "200": json_answer(ref("JobsOut"), "The jobs, newest activity first."),
        "400": error("A bad limit, or a parameter given twice."),
        "404": error(missing),
    }
    parameters = [parameter, _LIMIT]
    return {"get": operation(operation_id, summary, _DESCRIPTION, parameters, responses)}


openapi_paths: dict[str, Any] = {
    "/spaces/{space_uuid}/jobs": _operation(
        "listJobs", "A space's jobs and their runs", SPACE, "No such space (or not a UUID)."
    ),
    "/shared/{share_uuid}/jobs": _operation(
        "listSharedJobs",
        "A space's jobs through a share link",
        SHARE,
        "No such share link: revoked, or never created (or not a UUID).",
    ),
}
