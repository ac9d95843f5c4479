"""Estimates: `GET /tasks/{t}/estimate`, and through a share link
`GET /shared/{share}/tasks/{id}/estimate` (see `headway.domain.estimates` and
`service.estimates`). Each is rated as a read of the task is: 1, and a parent's steps."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..domain.schemas import EstimateOut
from .endpoints import Request, Route
from .openapi_parts import (
    SHARE,
    SHARED_TASK_ID,
    TASK,
    error,
    json_answer,
    operation,
    ref,
)
from .responses import JSONResponse


async def estimate(request: Request) -> Response:
    """A task's estimate, by its uuid or by its id under a share link."""
    bill = await request.visitor.read_bill()
    params = request.path_params
    if "task_id" in params:
        read_shared = request.service.estimates.read_shared
        found, read = await read_shared(params["share_uuid"], params["task_id"])
    else:
        found, read = await request.service.estimates.read(params["task_uuid"])
    await bill.pay(read)
    return JSONResponse(EstimateOut.of(found))


routes = [
    Route("/tasks/{task_uuid}/estimate", estimate, methods=["GET"]),
    Route("/shared/{share_uuid}/tasks/{task_id}/estimate", estimate, methods=["GET"]),
]

_DESCRIPTION = (
    "When the task will end: its rate from the reports the server received, stamped with "
    "its own clock (robust to bursts, started again when `current` goes down or `end` "
    "changes, falling while the reporter is silent), blended with its job's usual "
    "duration (the p50 of its last 20 succeeded runs), the rate weighing more as the run "
    "nears its end. A parent: its steps done (a running step counting for the part of its "
    "`end` it reached) over the time since it was created. Without `end`: a rate and no "
    "time left. A finished task: `remaining_s` 0 and `eta_at` its `finished_at`."
)


def _operation(operation_id: str, summary: str, parameters: list[Any], missing: str) -> Any:
    answer = json_answer(ref("EstimateOut"), "The task's estimate now.")
    responses = {"200": answer, "404": error(missing)}
    return {"get": operation(operation_id, summary, _DESCRIPTION, parameters, responses)}


openapi_paths: dict[str, Any] = {
    "/tasks/{task_uuid}/estimate": _operation(
        "getTaskEstimate", "When a task will end", [TASK], "No such task (or not a UUID)."
    ),
    "/shared/{share_uuid}/tasks/{task_id}/estimate": _operation(
        "getSharedTaskEstimate",
        "When a task will end, through a share link",
        [SHARE, SHARED_TASK_ID],
        "No such share link (revoked, or never created), or no such task under it.",
    ),
}
