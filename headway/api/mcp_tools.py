"""The Model Context Protocol server behind `POST /mcp`: its tools, so AI agents can report
and read progress with tools instead of HTTP calls.

Built on the official `mcp` SDK (`MCPServer`), served over Streamable HTTP, stateless, with
JSON answers, so any instance can answer any request. The tools are thin adapters like the
REST routes: their arguments are decoded by the same decoders (`decoding.decode_create`,
`decoding.decode_report`), they call the same `Service` methods, and they answer the same
JSON. A `HeadwayError` becomes a tool result with `isError: true` whose text is exactly the
message REST puts in `{"error": ...}`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from msgspec import Meta
from pydantic import ConfigDict

from .. import __version__
from ..domain import schemas
from ..domain.errors import UNAVAILABLE_MESSAGE, BadRequest, HeadwayError
from ..domain.schemas import CreateSpace, CreateTask
from ..ops.dependencies import unavailable
from ..service import Service
from .decoding import decode_create, decode_report
from .visitor import Visitor, Visitors, tasks_in

log = logging.getLogger("headway.mcp")

_SPACE_UUID = "The space's uuid, as create_space returned it."
_TASK_UUID = "The task's uuid, as create_task returned it."

INSTRUCTIONS = """\
Headway shows the progress of long-running work. Workflow for reporting your own job:
1. create_space once; keep the returned uuid: it is the only credential for the space.
   Its dashboard_url is the page where a person watches the space live in a browser:
   give it to the person you work for.
2. create_task for the job; for a multi-step job also create_task once per step with
   parent_uuid set to the job's uuid (one level of nesting only).
3. report_progress on each step as you work (current, end, values.log for a status line);
   every call replaces the task's whole state. Send done: true when a step is finished.
   The job (parent) counts its finished steps. If you report to the job itself, it stays
   open until you send done: true to it; if you never do, it finishes when all of its
   steps have.
4. get_task or get_space to read progress, yours or anyone's whose uuid you were given.
"""
_HELD_PARENT = (
    "A parent you report to yourself stays open, even once all its steps have finished, "
    "until you send done: true to it."
)


class SpaceCreatedForAgents(schemas.SpaceCreated):
    """create_space's answer: REST's, and where a person watches the space."""

    dashboard_url: Annotated[
        str,
        Meta(
            description="The space's page, live in a browser: give it to the person you "
            "work for. It holds the space's uuid, so share it only with those who may "
            "report to the space (a share link reads it without that power).",
            extra_json_schema={"format": "uri"},
        ),
    ]


# --- Arguments ---------------------------------------------------------------------------


class _ArgumentsAsSent(ArgModelBase):
    """Hands a tool its arguments untouched: Headway decodes them itself, with the decoders
    REST uses, so that limits and error messages are the same on both."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SpaceQuery(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Arguments of `get_space`: the path and query parameters of `GET /spaces/{uuid}`."""

    space_uuid: Annotated[str, Meta(description=_SPACE_UUID, extra_json_schema={"format": "uuid"})]
    limit: Annotated[
        int | None,
        Meta(
            description="Only the newest N top-level tasks (returned oldest first).",
            extra_json_schema={"minimum": 1},
        ),
    ] = None
    before: Annotated[
        str | None,
        Meta(
            description="Only tasks created strictly before this created_at, newest first.",
            extra_json_schema={"format": "date-time"},
        ),
    ] = None
    after: Annotated[
        str | None,
        Meta(
            description="Only tasks created strictly after this created_at, oldest first.",
            extra_json_schema={"format": "date-time"},
        ),
    ] = None
    state: Annotated[
        str | None,
        Meta(
            description="Only running tasks, or only finished ones. Omit for both.",
            extra_json_schema={"enum": ["active", "finished"]},
        ),
    ] = None


class TaskRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Arguments of `get_task`."""

    task_uuid: Annotated[str, Meta(description=_TASK_UUID, extra_json_schema={"format": "uuid"})]


class SpaceRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Arguments of `delete_space`."""

    space_uuid: Annotated[str, Meta(description=_SPACE_UUID, extra_json_schema={"format": "uuid"})]


def _convert(arguments: dict[str, Any], model: type[msgspec.Struct]) -> Any:
    try:
        return msgspec.convert(arguments, model)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"Invalid arguments: {exc}.") from None


def _take_uuid(arguments: dict[str, Any], name: str, origin: str) -> str:
    """Remove the path parameter `name` from `arguments`; what remains is the REST body."""
    value = arguments.pop(name, None)
    if not isinstance(value, str):
        raise BadRequest(f"Invalid arguments: {name} is required: the uuid {origin} returned.")
    return value


def _body(arguments: dict[str, Any]) -> bytes:
    return msgspec.json.encode(arguments)


# --- Schemas -----------------------------------------------------------------------------


def _object_schema(model: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of `model` with an object at its root, as MCP wants it."""
    defs = msgspec.json.schema(model)["$defs"]
    root = dict(defs[model.__name__])
    if b'"$ref"' in msgspec.json.encode(root):
        root["$defs"] = defs  # nested references (a task's children) still point here
    return root


def _input_schema(model: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of the arguments `model` holds, each member with one plain type.

    The REST schemas say "or null" and "integer or number"; both mean the same to the
    decoder, but clients that fill in arguments from the schema (Inspector's `--tool-arg`,
    function-calling models) convert a value only when a member's `type` is plain.
    """

    def member(prop: dict[str, Any]) -> dict[str, Any]:
        outer = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
        arms = [arm for arm in prop.get("anyOf", ()) if arm != {"type": "null"}]
        if not arms:
            return outer
        if len(arms) == 1:
            return member({**arms[0], **outer})
        types = {arm.get("type") for arm in arms}
        rest = [{k: v for k, v in arm.items() if k != "type"} for arm in arms]
        if types == {"integer", "number"} and all(r == rest[0] for r in rest):
            return {**outer, "type": "number", **rest[0]}
        return {**outer, "anyOf": arms}

    schema = {k: v for k, v in _object_schema(model).items() if k not in ("title", "description")}
    schema["properties"] = {k: member(v) for k, v in schema["properties"].items()}
    return schema


def _with_uuid(schema: dict[str, Any], name: str, description: str) -> dict[str, Any]:
    """`schema` (a REST body) with the path parameter `name` added as a required member."""
    return {
        **schema,
        "properties": {
            name: {"type": "string", "format": "uuid", "description": description},
            **schema["properties"],
        },
        "required": [name, *schema.get("required", [])],
    }


# --- Tools -------------------------------------------------------------------------------

# A tool's body: the service, its arguments, and the visitor that called it (its client's
# budgets: see `headway.api.visitor`).
Run = Callable[[Service, dict[str, Any], Visitor], Awaitable[Any]]


async def _create_space(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    return await service.spaces.create(decode_create(_body(arguments), CreateSpace))


def dashboard_url(answer: Any, base_url: str) -> dict[str, Any]:
    """create_space's answer with the space's page (`/spaces/{uuid}`) on `base_url`."""
    plain = msgspec.to_builtins(answer)
    return {**plain, "dashboard_url": f"{base_url.rstrip('/')}/spaces/{plain['uuid']}"}


async def _get_space(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    query: SpaceQuery = _convert(arguments, SpaceQuery)
    bill = await visitor.read_bill()  # rated as REST's reads are
    answer = await service.reads.get(
        query.space_uuid,
        before=query.before,
        after=query.after,
        limit=query.limit,
        state=query.state,
    )
    await bill.pay(tasks_in(answer["tasks"]))
    return answer


async def _create_task(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    space_uuid = _take_uuid(arguments, "space_uuid", "create_space")
    body = decode_create(_body(arguments), CreateTask)
    return await service.tasks.create(space_uuid, body, client=visitor.address)


async def _get_task(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    ref: TaskRef = _convert(arguments, TaskRef)
    bill = await visitor.read_bill()
    task = await service.tasks.get(ref.task_uuid)
    await bill.pay(1 + len(task.children))
    return task


async def _get_estimate(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    ref: TaskRef = _convert(arguments, TaskRef)
    bill = await visitor.read_bill()
    found, read = await service.estimates.read(ref.task_uuid)
    await bill.pay(read)
    return schemas.EstimateOut.of(found)


async def _report_progress(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    task_uuid = _take_uuid(arguments, "task_uuid", "create_task")
    return await service.tasks.report(task_uuid, decode_report(_body(arguments)), visitor.address)


async def _delete_task(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    ref: TaskRef = _convert(arguments, TaskRef)
    await service.deletes.task(ref.task_uuid)
    return {"deleted": True}


async def _delete_space(service: Service, arguments: dict[str, Any], visitor: Visitor) -> Any:
    ref: SpaceRef = _convert(arguments, SpaceRef)
    await service.deletes.space(ref.space_uuid)
    return {"deleted": True}


def _hints(title: str, kind: Literal["read", "create", "replace"]) -> ToolAnnotations:
    """A tool's hints: it reads only, or creates something anew at each call, or replaces
    (a report, a delete) what a repeated call would replace the same way."""
    if kind == "read":
        return ToolAnnotations(title=title, read_only_hint=True, open_world_hint=False)
    again = kind == "replace"
    return ToolAnnotations(
        title=title,
        read_only_hint=False,
        destructive_hint=again,
        idempotent_hint=again,
        open_world_hint=False,
    )


# A tool as `_TOOLS` lists it: name, description, body, input schema, output, hints.
_Spec = tuple[str, str, Run, dict[str, Any], type[msgspec.Struct], ToolAnnotations]
_TOOLS: list[_Spec] = [
    (
        "create_space",
        "Create a space to hold tasks; do this once per job or project. Returns the space's "
        "uuid, the only credential for reading and writing it: keep it, it cannot be "
        "recovered; and its dashboard_url, the page where a person watches its tasks live in "
        "a browser: give it to the person you work for. Optional title and icon (exactly "
        "one character, such as an emoji).",
        _create_space,
        _input_schema(CreateSpace),
        SpaceCreatedForAgents,
        _hints("Create a space", "create"),
    ),
    (
        "get_space",
        "Read a space: title, icon and its top-level tasks, each with its steps (children) "
        "and live progress. With no options every task is returned, oldest first. Use limit "
        "for the newest N, before/after with a task's created_at to page, state to keep only "
        "active or only finished tasks.",
        _get_space,
        _input_schema(SpaceQuery),
        schemas.SpaceOut,
        _hints("Read a space", "read"),
    ),
    (
        "create_task",
        "Create a task in a space. Give a title, and a source naming who reports (for "
        "example 'agent:release-bot'). For a multi-step job create the job first, then each "
        "step with parent_uuid set to the job's uuid: the job's progress then counts its "
        "finished steps and it finishes when they all have (one level of nesting only). "
        "Report to a task as soon as work on it starts: a task that never reports looks like "
        f"a dead reporter. {_HELD_PARENT} Returns the task's uuid.",
        _create_task,
        _with_uuid(_input_schema(CreateTask), "space_uuid", _SPACE_UUID),
        schemas.TaskCreated,
        _hints("Create a task", "create"),
    ),
    (
        "get_task",
        "Read one task: its steps nested, and its live progress (progress is null while the "
        "task has never reported, or after its report expired; ratio is 1 once finished).",
        _get_task,
        _input_schema(TaskRef),
        schemas.TaskOut,
        _hints("Read a task", "read"),
    ),
    (
        "get_estimate",
        "When a task will end, as the server sees it: remaining_s (seconds left, null while "
        "not known; 0 once finished) and eta_at, from the task's rate over the reports the "
        "server received, blended with how long its job (same title, source and parent's "
        "title) usually takes (usual: p50_s and p95_s of its last 20 succeeded runs, once "
        "it has 5); late is true when it runs well beyond that. Use it to tell the person "
        "you work for how long a job has left.",
        _get_estimate,
        _input_schema(TaskRef),
        schemas.EstimateOut,
        _hints("When a task will end", "read"),
    ),
    (
        "report_progress",
        "Report a task's progress. Every call REPLACES the task's whole state: send current "
        "(units done so far, not a percentage) and end (the total, when known) each time; "
        "anything omitted is cleared. values holds flat extras (numbers, strings, booleans); "
        "values.log is a one-line status message. The task finishes when current reaches a "
        "positive end or done is true; {done: true} alone finishes it and keeps the last "
        "numbers. Finishing is one-way and notifies the space's webhooks once. Do not report "
        "counts to a task that has steps: its progress is derived from them. "
        f"{_HELD_PARENT} Returns the task as it now stands.",
        _report_progress,
        _with_uuid(_input_schema(schemas.ReportBody), "task_uuid", _TASK_UUID),
        schemas.TaskOut,
        _hints("Report progress", "replace"),
    ),
    (
        "delete_task",
        "Delete a task with its steps and their progress, for good. Deleting a step updates "
        "its parent, which finishes if every step left has finished.",
        _delete_task,
        _input_schema(TaskRef),
        schemas.Deleted,
        _hints("Delete a task", "replace"),
    ),
    (
        "delete_space",
        "Delete a space and everything in it (tasks, progress, share links, webhooks, "
        "channels), for good. Its live streams end.",
        _delete_space,
        _input_schema(SpaceRef),
        schemas.Deleted,
        _hints("Delete a space", "replace"),
    ),
]


def build_server(
    service: Callable[[], Service],
    visitors: Callable[[], Visitors],
    public_url: str | None = None,
) -> MCPServer:
    """A new MCP server whose tools call `service()`, the app's `Service` of the moment,
    each within the budgets of the visitor of its request (`visitors()`, the app's).
    Addresses it gives (create_space's dashboard_url) are on `public_url`
    (HEADWAY_PUBLIC_URL), else on the request's own base URL.

    A dependency that is unavailable (see `headway.ops.dependencies`) answers the same "retry
    shortly" message as REST's 503. Anything else is logged by the SDK and answers a
    generic tool error.
    """
    tools = [_tool(spec, service, visitors, public_url) for spec in _TOOLS]
    # log_level: the SDK calls logging.basicConfig with it; WARNING keeps a bare process's
    # root logger as quiet as Python's default.
    return MCPServer(
        "headway",
        title="Headway",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=tools,
        log_level="WARNING",
    )


def _tool(
    spec: _Spec,
    service: Callable[[], Service],
    visitors: Callable[[], Visitors],
    public_url: str | None = None,
) -> Tool:
    name, description, run, input_schema, output, annotations = spec

    async def call(context: Context, **arguments: Any) -> CallToolResult:
        request = context.request_context.request
        # The SDK hands a tool the request, not what the dispatcher made of it: the visitor
        # is looked up again, from the same address.
        visitor = visitors().of(request.scope)
        try:
            answer = await run(service(), arguments, visitor)
            if output is SpaceCreatedForAgents:
                answer = dashboard_url(answer, public_url or str(request.base_url))
        except HeadwayError as exc:
            return _error_result(exc.message)
        except Exception as exc:
            if not unavailable(exc):
                raise
            log.warning("dependency unavailable: %s: %s", type(exc).__name__, exc)
            return _error_result(UNAVAILABLE_MESSAGE)
        encoded = msgspec.json.encode(answer)
        return CallToolResult(
            content=[TextContent(type="text", text=encoded.decode())],
            structured_content=msgspec.json.decode(encoded),
        )

    return Tool(
        fn=call,
        name=name,
        description=description,
        parameters=input_schema,
        # A published output schema without an output model: advertised, not re-validated
        # on the server (the answer is the REST answer, already shaped by the service).
        fn_metadata=FuncMetadata(arg_model=_ArgumentsAsSent, output_schema=_object_schema(output)),
        is_async=True,
        # The request's context (its client address), never an argument a client sends.
        context_kwarg="context",
        annotations=annotations,
    )


def _error_result(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
