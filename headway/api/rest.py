"""The REST routes of the specification."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import msgspec
from starlette.responses import Response

from ..domain.errors import MethodNotAllowed, NotFound
from ..domain.schemas import CreateSpace, CreateTask
from ..domain.tasks import TaskView
from ..service import Idempotency
from ..web import pages
from ..web.pages import wants_html
from .decoding import decode_create, decode_report, query_params, report_from_query
from .endpoints import Request, Route
from .responses import NO_STORE, JSONResponse, read_body
from .streaming import JSONStream, space_pieces, task_pieces

T = TypeVar("T", bound=msgspec.Struct)


class HeldBySpace(Protocol):
    """What a space holds several of (webhooks, channels, share links): made from a
    create's body, listed, and removed by uuid."""

    async def create(
        self, space_uuid: str, body: Any, idempotency: Idempotency | None = None, /
    ) -> dict[str, Any]: ...

    async def list(self, space_uuid: str, /) -> Sequence[dict[str, Any]]: ...

    async def delete(self, space_uuid: str, uuid: str, /) -> None: ...


async def read_create(request: Request, kind: str, schema: type[T]) -> tuple[T, Idempotency | None]:
    """A create of `kind` (`spaces`, `tasks`, `webhooks`...): admitted by its client's
    budget, its body read and decoded as `schema`, with its `Idempotency-Key` if any."""
    visitor = request.visitor
    await visitor.admit(kind)
    raw = await read_body(request)
    idempotency = visitor.idempotency(request.scope["headers"], kind, raw)
    return decode_create(raw, schema), idempotency


def created(answer: Any, idempotency: Idempotency | None) -> Response:
    """A create's 201; marked `Idempotent-Replayed` when it is the first answer again."""
    replayed = idempotency is not None and idempotency.replayed
    return JSONResponse(answer, 201, {"idempotent-replayed": "true"} if replayed else None)


def held_routes(kind: str, schema: type[msgspec.Struct], param: str) -> list[Route]:
    """The routes of what a space holds several of, the service's `kind` (a `HeldBySpace`):
    `/spaces/{space_uuid}/<kind>`, where POST creates one from a `schema` body and GET
    lists them, and `.../{<param>}`, whose DELETE removes one (204)."""
    path = f"/spaces/{{space_uuid}}/{kind}"

    async def create_or_list(request: Request) -> Response:
        space_uuid = request.path_params["space_uuid"]
        held: HeldBySpace = getattr(request.service, kind)
        if request.method == "POST":
            body, idempotency = await read_create(request, kind, schema)
            return created(await held.create(space_uuid, body, idempotency), idempotency)
        return JSONResponse(await held.list(space_uuid))

    async def delete(request: Request) -> Response:
        params = request.path_params
        held: HeldBySpace = getattr(request.service, kind)
        await held.delete(params["space_uuid"], params[param])
        return Response(status_code=204, headers=NO_STORE)

    return [
        Route(path, create_or_list, methods=["GET", "POST"]),
        Route(f"{path}/{{{param}}}", delete, methods=["DELETE"]),
    ]


async def create_space(request: Request) -> Response:
    body, idempotency = await read_create(request, "spaces", CreateSpace)
    return created(await request.service.spaces.create(body, idempotency), idempotency)


async def get_space(request: Request) -> Response:
    """The space as JSON, or its dashboard for a browser (see `web.pages.wants_html`);
    DELETE removes it and everything it holds."""
    space_uuid = request.path_params["space_uuid"]
    if request.method == "DELETE":
        await request.service.deletes.space(space_uuid)
        return Response(status_code=204, headers=NO_STORE)
    bill = await request.visitor.read_bill()  # the page costs 1; its stream pays its snapshot
    if wants_html(request):
        try:
            head = await request.service.spaces.head(space_uuid)
        except NotFound as exc:
            return pages.not_found_page(exc.message)
        return pages.space_page(space_uuid, head, request.app.state.settings.space_retention)
    params = query_params(request.scope["query_string"])
    head, pages_ = await request.service.reads.read(
        space_uuid,
        before=params.get("before"),
        after=params.get("after"),
        limit=params.get("limit"),
        state=params.get("state"),
    )
    return JSONStream(space_pieces(head, bill.pages(pages_)), vary_accept=True)


async def create_task(request: Request) -> Response:
    body, idempotency = await read_create(request, "tasks", CreateTask)
    space_uuid = request.path_params["space_uuid"]
    address = request.visitor.address
    answer = await request.service.tasks.create(space_uuid, body, idempotency, address)
    return created(answer, idempotency)


async def task(request: Request) -> Response:
    """GET reads a task; PUT reports its whole new state; DELETE removes it (and its
    steps)."""
    task_uuid = request.path_params["task_uuid"]
    if request.method == "DELETE":
        await request.service.deletes.task(task_uuid)
        return Response(status_code=204, headers=NO_STORE)
    visitor = request.visitor
    if request.method == "PUT":
        await visitor.admit("reports")
        report = decode_report(await read_body(request))
        return task_response(await request.service.tasks.report(task_uuid, report, visitor.address))
    bill = await visitor.read_bill()
    found = await request.service.tasks.get(task_uuid)
    if found.children:  # the task paid 1: now its children
        await bill.pay(1 + len(found.children))
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
    visitor = request.visitor
    await visitor.admit("reports")
    report = report_from_query(request.scope["query_string"])
    task_uuid = request.path_params["task_uuid"]
    return task_response(await request.service.tasks.report(task_uuid, report, visitor.address))


# The most used first: task reads and reports, creates of tasks, space reads.
routes = [
    Route("/tasks/{task_uuid}", task, methods=["GET", "PUT", "DELETE"]),
    Route("/spaces/{space_uuid}/tasks", create_task, methods=["POST"]),
    Route("/spaces/{space_uuid}", get_space, methods=["GET", "DELETE"]),
    Route("/tasks/{task_uuid}/report", report_by_url, methods=["GET"]),
    Route("/tasks/{task_uuid}", patch_task, methods=["PATCH"]),
    Route("/spaces", create_space, methods=["POST"]),
]
