"""The REST routes of the specification."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..decoding import decode_create, decode_report, query_params, report_from_query
from ..domain import TaskView
from ..errors import BadRequest, MethodNotAllowed, NotFound
from ..limits import Kind
from ..schemas import CreateSpace, CreateTask
from ..service import Idempotency, Service
from ..web import pages
from ..web.pages import wants_html
from .costs import admit
from .responses import NO_STORE, JSONResponse, read_body
from .streaming import JSONStream, space_pieces, task_pieces

IDEMPOTENCY_KEY = b"idempotency-key"
REPLAYED = {"idempotent-replayed": "true"}


def _service(request: Request) -> Service:
    return request.app.state.service


async def count(request: Request, kind: Kind) -> str:
    """Count one `kind` against the client's rate (429 if it is over); the client's
    address, as rates and shares count it."""
    limiter = request.app.state.limiter
    address: str = limiter.address_of(request.scope)
    if limiter.enabled and not limiter.counted_here(kind, address):
        await limiter.check(kind, address)
    return address


def idempotency_of(request: Request, operation: str, body: bytes) -> Idempotency | None:
    """The request's `Idempotency-Key`, with the body it came with to `operation`, if it
    has one; 400 if it is given twice or is not 1 to 255 printable ASCII characters. A
    scan of the request's few headers: a create without the key pays nothing more."""
    found = None
    for name, value in request.scope["headers"]:
        if name == IDEMPOTENCY_KEY:
            if found is not None:
                raise BadRequest("Idempotency-Key is given twice; send it once.")
            found = value
    if found is None:
        return None
    client = request.app.state.limiter.address_of(request.scope)
    return Idempotency.of(found.decode("latin-1"), operation, body, client)


def created(answer: Any, idempotency: Idempotency | None) -> Response:
    """A create's 201; marked `Idempotent-Replayed` when it is the first answer again."""
    replayed = idempotency is not None and idempotency.replayed
    return JSONResponse(answer, 201, REPLAYED if replayed else None)


async def create_space(request: Request) -> Response:
    await count(request, "spaces")
    raw = await read_body(request)
    idempotency = idempotency_of(request, "spaces", raw)
    body = decode_create(raw, CreateSpace)
    return created(await _service(request).create_space(body, idempotency), idempotency)


async def get_space(request: Request) -> Response:
    """The space as JSON, or its dashboard for a browser (see `web.pages.wants_html`);
    DELETE removes it and everything it holds."""
    space_uuid = request.path_params["space_uuid"]
    if request.method == "DELETE":
        await _service(request).delete_space(space_uuid)
        return Response(status_code=204, headers=NO_STORE)
    bill = await admit(request)  # the page costs 1; its stream pays for its snapshot
    if wants_html(request):
        try:
            head = await _service(request).space_head(space_uuid)
        except NotFound as exc:
            return pages.not_found_page(exc.message)
        retention = request.app.state.settings.space_retention
        return pages.space_page(space_uuid, head, retention)
    params = query_params(request.scope["query_string"])
    head, pages_ = await _service(request).read_space(
        space_uuid,
        before=params.get("before"),
        after=params.get("after"),
        limit=params.get("limit"),
        state=params.get("state"),
    )
    return JSONStream(space_pieces(head, bill.pages(pages_)), vary_accept=True)


async def create_task(request: Request) -> Response:
    client = await count(request, "tasks")
    raw = await read_body(request)
    idempotency = idempotency_of(request, "tasks", raw)
    body = decode_create(raw, CreateTask)
    space_uuid = request.path_params["space_uuid"]
    answer = await _service(request).create_task(space_uuid, body, idempotency, client)
    return created(answer, idempotency)


async def task(request: Request) -> Response:
    """GET reads a task; PUT reports its whole new state; DELETE removes it (and its
    steps)."""
    task_uuid = request.path_params["task_uuid"]
    if request.method == "DELETE":
        await _service(request).delete_task(task_uuid)
        return Response(status_code=204, headers=NO_STORE)
    if request.method == "PUT":
        client = await count(request, "reports")
        report = decode_report(await read_body(request))
        return task_response(await _service(request).report(task_uuid, report, client))
    state = request.app.state
    limiter = state.limiter  # `costs.admit`, without a bill: the hot path
    if limiter.enabled:
        address = limiter.address_of(request.scope)
        if not limiter.counted_here("reads", address):
            await limiter.check("reads", address)
    found = await state.service.get_task(task_uuid)
    if found.children and limiter.enabled:  # the task paid 1: now its children
        await limiter.charge("reads", address, len(found.children))
    return task_response(found)


def task_response(task: TaskView) -> Response:
    """A task's answer; a parent's, with its children, is sent a piece at a time."""
    return JSONStream(task_pieces(task)) if task.children else JSONResponse(task)


async def patch_task(_request: Request) -> Response:
    """Always refused, whether or not the task exists: a merge would be implied."""
    raise MethodNotAllowed(
        "PATCH is not supported: every report replaces the whole state, so use PUT.",
        headers={"allow": "DELETE, GET, HEAD, PUT"},
    )


async def report_by_url(request: Request) -> Response:
    if request.method == "HEAD":  # a HEAD must not write; Starlette routes it with GET
        raise MethodNotAllowed("HEAD would write a report here; use GET.", headers={"allow": "GET"})
    client = await count(request, "reports")
    report = report_from_query(request.scope["query_string"])
    task_uuid = request.path_params["task_uuid"]
    return task_response(await _service(request).report(task_uuid, report, client))


# The routes of the most used endpoints (`task`, `create_task`, `get_space`,
# `report_by_url`) are declared in `api.hot`, before these.
routes = [
    Route("/tasks/{task_uuid}", patch_task, methods=["PATCH"]),
    Route("/spaces", create_space, methods=["POST"]),
]
