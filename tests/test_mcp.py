"""`POST /mcp`: the MCP tools, against a real server, through every client we support.

The SDK's clients (`mcp.Client` auto and legacy, the streamable HTTP client with a
`ClientSession`), raw JSON-RPC over httpx to pin the wire format, and the MCP Inspector
command line all talk to one server (the one `headway serve` runs) on a free port. Tools
must answer exactly what REST answers, for results and for errors alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent
from starlette.datastructures import Headers

from headway.api.mcp_hosts import allowed_hosts, refusal
from headway.app import create_app
from headway.config import ConfigError, Settings

from . import docs
from .live_server import serving

TOOLS = {
    "create_space",
    "get_space",
    "create_task",
    "get_task",
    "get_estimate",
    "report_progress",
    "delete_task",
    "delete_space",
}
MODES = ["auto", "legacy", "streamable_http"]
JSON_RPC = {"accept": "application/json, text/event-stream"}
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
ROOT = Path(__file__).resolve().parent.parent


# --- A real server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("mcp") / "headway.db"
    with serving(Settings(database_url=f"sqlite:///{db}", run_worker=False)) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture
def mcp_url(base_url: str) -> str:
    return f"{base_url}/mcp"


@pytest.fixture
async def rest(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url) as client:
        yield client


@contextlib.asynccontextmanager
async def connect(mode: str, url: str) -> AsyncIterator[Any]:
    """An MCP client session in `mode`; each has `list_tools` and `call_tool`."""
    if mode == "streamable_http":
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
    else:
        async with Client(url, mode=mode) as client:
            yield client


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def call(client: Any, name: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured output."""
    result = await client.call_tool(name, arguments)
    assert result.is_error is False, text(result)
    assert json.loads(text(result)) == result.structured_content
    return result.structured_content


async def call_error(client: Any, name: str, **arguments: Any) -> str:
    """Call a tool that must fail; its error text."""
    result = await client.call_tool(name, arguments)
    assert result.is_error is True, result
    assert result.structured_content is None
    return text(result)


# --- The SDK clients -----------------------------------------------------------------------


async def test_auto_mode_speaks_the_sessionless_protocol(mcp_url: str) -> None:
    async with Client(mcp_url) as client:
        assert client.protocol_version == MODERN
        assert client.server_info is not None and client.server_info.name == "headway"


async def test_legacy_mode_uses_the_initialize_handshake(mcp_url: str) -> None:
    async with Client(mcp_url, mode="legacy") as client:
        assert client.protocol_version == HANDSHAKE


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_listed_with_the_rest_limits(mode: str, mcp_url: str) -> None:
    async with connect(mode, mcp_url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description or "") > 80, tool.name
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
    space = tools["create_space"].input_schema["properties"]
    assert space["title"] == {"type": "string", "maxLength": 200}
    task = tools["create_task"].input_schema
    assert task["required"] == ["space_uuid"]
    assert task["properties"]["source"]["maxLength"] == 200
    report = tools["report_progress"].input_schema
    assert report["required"] == ["task_uuid"]
    assert report["properties"]["current"]["type"] == "number"
    assert report["properties"]["current"]["minimum"] == 0
    assert report["properties"]["end"]["minimum"] == 0
    values = report["properties"]["values"]
    assert (values["type"], values["maxProperties"]) == ("object", 64)
    assert values["propertyNames"] == {"minLength": 1, "maxLength": 64}
    query = tools["get_space"].input_schema["properties"]
    assert query["limit"]["minimum"] == 1
    assert query["state"]["enum"] == ["active", "finished"]
    assert tools["get_task"].annotations.read_only_hint is True
    assert set(tools["get_task"].output_schema["required"]) >= {"uuid", "progress", "children"}


@pytest.mark.parametrize("mode", MODES)
async def test_agent_reports_a_job_and_reads_back_what_rest_shows(
    mode: str, mcp_url: str, rest: httpx.AsyncClient
) -> None:
    async with connect(mode, mcp_url) as client:
        space = await call(client, "create_space", title=f"Agent {mode}", icon="🤖")
        assert space == {
            "uuid": space["uuid"],
            "title": f"Agent {mode}",
            "icon": "🤖",
            "dashboard_url": f"{mcp_url.removesuffix('/mcp')}/spaces/{space['uuid']}",
        }
        job = await call(client, "create_task", space_uuid=space["uuid"], title="Release")
        steps = [
            (await call(client, "create_task", space_uuid=space["uuid"], title=title,
                        source="agent", parent_uuid=job["uuid"]))["uuid"]
            for title in ("build", "test")
        ]  # fmt: skip
        reported = await call(
            client, "report_progress", task_uuid=steps[0], current=3, end=10,
            values={"log": "compiling"},
        )  # fmt: skip
        assert reported["progress"]["ratio"] == 0.3
        assert reported["progress"]["values"] == {"log": "compiling"}
        assert reported == (await rest.get(f"/tasks/{steps[0]}")).json()

        finished = await call(client, "report_progress", task_uuid=steps[1], done=True)
        assert finished["finished_at"] is not None
        estimate = await call(client, "get_estimate", task_uuid=steps[1])
        assert estimate == (await rest.get(f"/tasks/{steps[1]}/estimate")).json()
        assert (estimate["remaining_s"], estimate["eta_at"]) == (0, finished["finished_at"])

        read = await call(client, "get_task", task_uuid=job["uuid"])
        assert read == (await rest.get(f"/tasks/{job['uuid']}")).json()
        assert [c["uuid"] for c in read["children"]] == steps
        assert (read["progress"]["current"], read["progress"]["end"]) == (1, 2)

        whole = await call(client, "get_space", space_uuid=space["uuid"])
        assert whole == (await rest.get(f"/spaces/{space['uuid']}")).json()
        active = await call(client, "get_space", space_uuid=space["uuid"], state="active", limit=1)
        rest_active = await rest.get(
            f"/spaces/{space['uuid']}", params={"state": "active", "limit": 1}
        )
        assert active == rest_active.json()

        assert await call(client, "delete_task", task_uuid=steps[0]) == {"deleted": True}
        assert (await rest.get(f"/tasks/{steps[0]}")).status_code == 404
        assert await call(client, "delete_space", space_uuid=space["uuid"]) == {"deleted": True}
        assert (await rest.get(f"/spaces/{space['uuid']}")).status_code == 404
        assert (await rest.get(f"/tasks/{job['uuid']}")).status_code == 404


async def test_an_agents_parent_stays_open_until_it_says_done(mcp_url: str) -> None:
    """An agent that reported to its job holds it open: the job finishes when the agent
    says `done`, not when the last step it has made so far ends."""
    async with connect("auto", mcp_url) as client:
        space = (await call(client, "create_space", title="Agent job"))["uuid"]
        job = (await call(client, "create_task", space_uuid=space, title="Migrate"))["uuid"]
        started = await call(client, "report_progress", task_uuid=job, values={"log": "plan"})
        assert started["finished_at"] is None
        for title in ("dump", "load"):
            step = await call(client, "create_task", space_uuid=space, title=title, parent_uuid=job)
            await call(client, "report_progress", task_uuid=step["uuid"], done=True)
            read = await call(client, "get_task", task_uuid=job)
            assert read["finished_at"] is None
            assert read["progress"]["current"] == read["progress"]["end"]
        finished = await call(client, "report_progress", task_uuid=job, done=True)
        assert finished["finished_at"] is not None
        assert finished["progress"]["values"] == {"log": "plan"}


@pytest.mark.parametrize("mode", MODES)
async def test_errors_are_tool_results_with_the_rest_message(
    mode: str, mcp_url: str, rest: httpx.AsyncClient
) -> None:
    space = (await rest.post("/spaces", json={})).json()["uuid"]
    other = (await rest.post("/spaces", json={})).json()["uuid"]
    task = (await rest.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    foreign = (await rest.post(f"/spaces/{other}/tasks", json={})).json()["uuid"]
    unknown = "00000000-0000-4000-8000-000000000000"
    too_many = {f"k{i}": i for i in range(65)}
    cases = [
        ("get_task", {"task_uuid": unknown}, ("GET", f"/tasks/{unknown}", None), 404),
        ("get_task", {"task_uuid": "not-a-uuid"}, ("GET", "/tasks/not-a-uuid", None), 404),
        ("get_space", {"space_uuid": unknown}, ("GET", f"/spaces/{unknown}", None), 404),
        ("delete_task", {"task_uuid": unknown}, ("DELETE", f"/tasks/{unknown}", None), 404),
        ("delete_space", {"space_uuid": unknown}, ("DELETE", f"/spaces/{unknown}", None), 404),
        ("get_space", {"space_uuid": space, "before": "yesterday"},
         ("GET", f"/spaces/{space}?before=yesterday", None), 400),
        ("create_space", {"title": "x" * 201}, ("POST", "/spaces", {"title": "x" * 201}), 422),
        ("create_space", {"icon": "ab"}, ("POST", "/spaces", {"icon": "ab"}), 422),
        ("create_task", {"space_uuid": unknown}, ("POST", f"/spaces/{unknown}/tasks", {}), 404),
        ("create_task", {"space_uuid": space, "parent_uuid": foreign},
         ("POST", f"/spaces/{space}/tasks", {"parent_uuid": foreign}), 422),
        ("create_task", {"space_uuid": space, "colour": "red"},
         ("POST", f"/spaces/{space}/tasks", {"colour": "red"}), 422),
        ("report_progress", {"task_uuid": task, "values": too_many},
         ("PUT", f"/tasks/{task}", {"values": too_many}), 400),
        ("report_progress", {"task_uuid": task, "current": -1},
         ("PUT", f"/tasks/{task}", {"current": -1}), 400),
        ("report_progress", {"task_uuid": task, "values": {"nested": {"a": 1}}},
         ("PUT", f"/tasks/{task}", {"values": {"nested": {"a": 1}}}), 400),
        ("report_progress", {"task_uuid": task, "percent": 5},
         ("PUT", f"/tasks/{task}", {"percent": 5}), 400),
        ("report_progress", {"task_uuid": unknown, "current": 1},
         ("PUT", f"/tasks/{unknown}", {"current": 1}), 404),
    ]  # fmt: skip
    async with connect(mode, mcp_url) as client:
        for tool, arguments, (method, path, body), status in cases:
            answer = await rest.request(method, path, json=body)
            assert answer.status_code == status, (tool, answer.text)
            assert await call_error(client, tool, **arguments) == answer.json()["error"], tool
        assert "space_uuid is required" in await call_error(client, "create_task", title="x")
    assert (await rest.get(f"/tasks/{task}")).json()["progress"] is None, "nothing was stored"


# --- The wire format -----------------------------------------------------------------------


def rpc(method: str, id: int | None = None, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params:
        message["params"] = params
    return message


async def test_handshake_era_on_the_wire(mcp_url: str) -> None:
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        init = await http.post(
            mcp_url,
            json=rpc(
                "initialize",
                1,
                protocolVersion=HANDSHAKE,
                capabilities={},
                clientInfo={"name": "raw", "version": "0"},
            ),
        )
        assert init.status_code == 200
        assert init.headers["content-type"] == "application/json"
        assert init.headers["cache-control"] == "no-store"
        assert "mcp-session-id" not in init.headers  # stateless: no session to keep
        body = init.json()
        assert (body["jsonrpc"], body["id"]) == ("2.0", 1)
        result = body["result"]
        assert result["protocolVersion"] == HANDSHAKE
        assert result["serverInfo"]["name"] == "headway"
        assert result["capabilities"]["tools"] == {"listChanged": False}
        assert "create_space" in result["instructions"]

        versioned = {"mcp-protocol-version": HANDSHAKE}
        note = await http.post(mcp_url, json=rpc("notifications/initialized"), headers=versioned)
        assert (note.status_code, note.content) == (202, b"")

        listed = (await http.post(mcp_url, json=rpc("tools/list", 2), headers=versioned)).json()
        assert listed["id"] == 2
        assert {tool["name"] for tool in listed["result"]["tools"]} == TOOLS
        tool = next(t for t in listed["result"]["tools"] if t["name"] == "create_space")
        assert set(tool) >= {"name", "description", "inputSchema", "outputSchema", "annotations"}

        called = await http.post(
            mcp_url,
            json=rpc("tools/call", 3, name="create_space", arguments={"title": "wire"}),
            headers=versioned,
        )
        result = called.json()["result"]
        assert set(result) == {"content", "isError", "structuredContent"}
        assert result["isError"] is False
        assert result["structuredContent"]["title"] == "wire"
        assert result["content"] == [
            {"type": "text", "text": json.dumps(result["structuredContent"], separators=(",", ":"))}
        ]

        failed = await http.post(
            mcp_url,
            json=rpc("tools/call", 4, name="create_space", arguments={"icon": "ab"}),
            headers=versioned,
        )
        assert failed.status_code == 200
        assert failed.json()["result"] == {
            "content": [
                {
                    "type": "text",
                    "text": "icon must be exactly one character (one emoji or letter).",
                }
            ],
            "isError": True,
        }


async def test_sessionless_era_on_the_wire(mcp_url: str) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {**JSON_RPC, "mcp-protocol-version": MODERN}
    async with httpx.AsyncClient(headers=headers) as http:
        found = await http.post(
            mcp_url,
            json=rpc("server/discover", 1, _meta=meta),
            headers={"mcp-method": "server/discover"},
        )
        assert found.status_code == 200
        result = found.json()["result"]
        assert result["supportedVersions"] == [MODERN]
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "headway"

        called = await http.post(
            mcp_url,
            json=rpc("tools/call", 2, name="create_space", arguments={"title": "new"}, _meta=meta),
            headers={"mcp-method": "tools/call", "mcp-name": "create_space"},
        )
        result = called.json()["result"]
        assert (result["isError"], result["resultType"]) == (False, "complete")
        assert result["structuredContent"]["title"] == "new"


@pytest.mark.parametrize("method", ["GET", "HEAD", "DELETE", "PUT"])
async def test_other_methods_than_post_are_405_json(method: str, mcp_url: str) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        answer = await http.request(method, mcp_url, headers={"accept": "text/event-stream"})
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    assert answer.headers["cache-control"] == "no-store"
    if method != "HEAD":
        assert answer.headers["content-type"] == "application/json"
        assert "allowed: POST" in answer.json()["error"]


async def test_post_to_mcp_is_answered_in_place(mcp_url: str) -> None:
    async with httpx.AsyncClient(headers=JSON_RPC, follow_redirects=False) as http:
        answer = await http.post(mcp_url, json=rpc("tools/list", 1))
    assert answer.status_code == 200
    assert "location" not in answer.headers


async def test_create_space_gives_the_dashboard_a_person_opens(mcp_url: str, base_url: str) -> None:
    async with connect("auto", mcp_url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        space = await call(client, "create_space", title="Watched")
    assert space["dashboard_url"] == f"{base_url}/spaces/{space['uuid']}"
    page = httpx.get(space["dashboard_url"], headers={"accept": "text/html"}, timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "dashboard_url" in tools["create_space"].description
    assert "dashboard_url" in tools["create_space"].output_schema["required"]
    for name in ("create_task", "report_progress"):
        assert "stays open" in tools[name].description
        assert "until you send done: true to it" in tools[name].description, name


async def test_the_instructions_say_where_to_watch_and_when_a_parent_finishes(
    mcp_url: str,
) -> None:
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        answer = await http.post(
            mcp_url,
            json=rpc(
                "initialize",
                1,
                protocolVersion=HANDSHAKE,
                capabilities={},
                clientInfo={"name": "test", "version": "1"},
            ),
        )
    instructions = " ".join(answer.json()["result"]["instructions"].split())
    assert "dashboard_url" in instructions and "browser" in instructions
    assert "stays open until you send done: true to it" in instructions


def test_the_dashboard_is_on_the_public_url_when_one_is_set(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'headway.db'}",
        run_worker=False,
        public_url="https://progress.example",
    )
    with serving(settings) as (host, port):
        answer = httpx.post(
            f"http://{host}:{port}/mcp",
            json=rpc("tools/call", 1, name="create_space", arguments={}),
            headers=JSON_RPC,
            timeout=10,
        )
    space = answer.json()["result"]["structuredContent"]
    assert space["dashboard_url"] == f"https://progress.example/spaces/{space['uuid']}"


async def test_a_request_without_content_type_is_taken_as_json_like_rest(mcp_url: str) -> None:
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        answer = await http.post(mcp_url, content=json.dumps(rpc("tools/list", 1)).encode())
    assert "content-type" not in answer.request.headers
    assert answer.status_code == 200, answer.text
    assert {tool["name"] for tool in answer.json()["result"]["tools"]} == TOOLS


def test_the_readmes_python_snippet_runs_as_written(base_url: str) -> None:
    [snippet] = [
        block
        for block in docs.blocks(docs.page("mcp"), "python")
        if "from mcp import Client" in block
    ]
    assert "http://127.0.0.1:8000" in snippet
    result = subprocess.run(
        [sys.executable, "-c", snippet.replace("http://127.0.0.1:8000", base_url)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        rf"watch it at {re.escape(base_url)}/spaces/[0-9a-f-]{{36}}\n", result.stdout
    )


async def test_a_body_that_is_not_json_is_refused_with_json(mcp_url: str) -> None:
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        answer = await http.post(mcp_url, content=b"hello", headers={"content-type": "text/plain"})
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("Invalid Content-Type header 'text/plain': /mcp")


async def test_an_oversized_body_is_refused_with_json(mcp_url: str) -> None:
    huge = rpc("tools/call", 1, name="create_space", arguments={"title": "x" * 200_000})
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        answer = await http.post(mcp_url, json=huge)
    assert answer.status_code == 413
    assert "larger than" in answer.json()["error"]


async def test_rest_still_works_beside_mcp(rest: httpx.AsyncClient) -> None:
    assert (await rest.get("/up")).status_code == 200
    created = await rest.post("/spaces", json={"title": "REST"})
    assert created.status_code == 201
    assert (await rest.get(f"/spaces/{created.json()['uuid']}")).json()["title"] == "REST"
    missing = await rest.get("/mcp-nope")
    assert missing.status_code == 404 and "error" in missing.json()
    assert (await rest.get("/openapi.json")).status_code == 200


# --- Lifespan ------------------------------------------------------------------------------


async def test_apps_are_created_and_started_many_times_in_one_process(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/headway.db", run_worker=False)
    apps = [create_app(settings) for _ in range(3)]
    for app in [*apps, apps[0]]:  # and the first one started a second time
        async with (
            app.router.lifespan_context(app),
            Client(
                streamable_http_client(
                    "http://127.0.0.1/mcp",
                    http_client=_asgi_client(app),
                ),
                mode="legacy",
            ) as client,
        ):
            space = await call(client, "create_space", title="again")
            assert (await call(client, "get_space", space_uuid=space["uuid"]))["title"] == "again"


async def test_a_dependency_down_answers_the_rest_503_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/headway.db", run_worker=False)
    app = create_app(settings)
    mcp_client = Client(
        streamable_http_client("http://127.0.0.1/mcp", http_client=_asgi_client(app))
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        mcp_client as client,
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as rest,
    ):

        async def down(*_args: Any) -> None:
            raise ConnectionError("progress store unreachable")

        monkeypatch.setattr(app.state.service.progress, "get", down)
        monkeypatch.setattr(app.state.service.progress, "get_many", down)
        space = await call(client, "create_space")
        task = (await call(client, "create_task", space_uuid=space["uuid"]))["uuid"]
        answer = await rest.get(f"/tasks/{task}")
        assert answer.status_code == 503
        assert await call_error(client, "get_task", task_uuid=task) == answer.json()["error"]


def _asgi_client(app: Any) -> Any:
    import httpx2  # the MCP SDK's HTTP client library

    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))


# --- The Host check ------------------------------------------------------------------------


async def test_loopback_server_refuses_foreign_host_headers(mcp_url: str, base_url: str) -> None:
    port = base_url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
            answer = await http.post(mcp_url, json=rpc("tools/list", 1), headers={"host": host})
            assert answer.status_code == 200, host
        refused = await http.post(
            mcp_url, json=rpc("tools/list", 1), headers={"host": f"rebound.example.com:{port}"}
        )
        assert refused.status_code == 421
        assert refused.headers["cache-control"] == "no-store"
        assert "HEADWAY_MCP_ALLOWED_HOSTS" in refused.json()["error"]
        bad_origin = await http.post(
            mcp_url, json=rpc("tools/list", 1), headers={"origin": "http://rebound.example.com"}
        )
        assert bad_origin.status_code == 403
        assert bad_origin.json()["error"].startswith("Invalid Origin header.")
        local_origin = await http.post(
            mcp_url, json=rpc("tools/list", 1), headers={"origin": "http://localhost:6274"}
        )
        assert local_origin.status_code == 200
        rest = await http.get(f"{base_url}/up", headers={"host": "rebound.example.com"})
        assert rest.status_code == 200, "the check covers /mcp only"


@pytest.mark.parametrize(
    ("changes", "allowed", "refused"),
    [
        ({"mcp_allowed_hosts": ("headway.example.com", "api.example.com:*")},
         ["headway.example.com", "api.example.com:8443"],
         ["headway.example.com:8443", "api.example.com", "127.0.0.1:8000"]),
        ({"mcp_allowed_hosts": ("*",)}, ["anything.example.com", "127.0.0.1:1"], []),
        ({"host": "0.0.0.0"}, ["0.0.0.0:8000", "127.0.0.1:8000", "localhost"],
         ["headway.example.com", "10.0.0.7:8000"]),
        ({"host": "0.0.0.0", "public_url": "https://Progress.example.com/"},
         ["progress.example.com", "progress.example.com:443", "PROGRESS.example.com"],
         ["example.com", "progress.example.com.evil.com"]),
        ({"host": "::1"}, ["[::1]:8000", "localhost:9"], ["headway.example.com"]),
        # Whole names and ports, never a prefix.
        ({}, ["127.0.0.1:8850"],
         ["127.0.0.1:8850.evil.com", "127.0.0.1:.evil.com", "localhost.evil.com",
          "127.0.0.1:8850@evil.com", "127.0.0.1:", "127.0.0.1:99999", "", "[::1"]),
        ({"mcp_allowed_hosts": ("api.example.com:*",)}, ["api.example.com:1"],
         ["api.example.com:8443.evil.com", "api.example.com:x"]),
    ],
)  # fmt: skip
async def test_allowed_hosts_come_from_settings(
    tmp_path: Path, changes: dict[str, Any], allowed: list[str], refused: list[str]
) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/h.db", run_worker=False, **changes)
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, headers=JSON_RPC) as http,
    ):
        for host in allowed + refused:
            answer = await http.post(
                "http://headway.test/mcp", json=rpc("tools/list", 1), headers={"host": host}
            )
            assert answer.status_code == (200 if host in allowed else 421), host


def test_allowed_hosts_are_read_from_the_environment() -> None:
    def read(value: str) -> tuple[str, ...] | None:
        return Settings.from_env({"HEADWAY_MCP_ALLOWED_HOSTS": value}).mcp_allowed_hosts

    assert read("") is None
    assert read(" a.example.com , b.example.com:* ,") == ("a.example.com", "b.example.com:*")
    assert read("*") == ("*",)
    assert read("[::1]:8000,localhost") == ("[::1]:8000", "localhost")
    for bad in ("https://a.example.com", "a.example.com/mcp", "*,a.example.com", "x:99999"):
        with pytest.raises(ConfigError, match="HEADWAY_MCP_ALLOWED_HOSTS"):
            read(bad)


def test_origins_follow_the_allowed_hosts() -> None:
    patterns = allowed_hosts(Settings(mcp_allowed_hosts=("api.example.com", "localhost:*")))

    def status(origin: str) -> int:
        headers = Headers({"host": "api.example.com", "origin": origin})
        refused = refusal(patterns, headers)
        return refused.status if refused else 200

    for origin in ("http://api.example.com", "https://api.example.com", "http://localhost:6274"):
        assert status(origin) == 200, origin
    for origin in (
        "http://api.example.com.evil.com",
        "http://localhost:6274.evil.com",
        "http://api.example.com:8080",
        "null",
        "file://api.example.com",
    ):
        assert status(origin) == 403, origin


# --- The MCP Inspector command line ----------------------------------------------------------


def inspector_command() -> list[str]:
    """The Inspector `scripts/test` installed, else npx; skip when neither is there."""
    local = ROOT / ".test-tools" / "node_modules" / ".bin" / "mcp-inspector"
    if local.exists():
        return [str(local)]
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("the MCP Inspector needs Node.js: neither .test-tools/ nor npx is there")
    return [npx, "-y", "@modelcontextprotocol/inspector"]


def node_path() -> str:
    """PATH with the Node.js `scripts/test` installed beside the Inspector first (a
    machine's own may be too old for it), so that every `node` it starts is that one."""
    tools = ROOT / ".test-tools" / "node_modules" / ".bin"
    return os.pathsep.join([str(tools), os.environ.get("PATH", os.defpath)])


def inspect(url: str, *arguments: str, failing: bool = False) -> dict[str, Any]:
    """Run the Inspector CLI; its JSON output. Inspector 2.x exits non-zero after printing a
    tool result with `isError: true`, 0.x exits 0: `failing` accepts both."""
    command = [*inspector_command(), "--cli", url, "--transport", "http", *arguments]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "NO_COLOR": "1", "PATH": node_path()},
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the MCP Inspector did not finish within 300 s: {command}")
    assert done.returncode == 0 or failing, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_inspector_lists_the_tools(mcp_url: str) -> None:
    listed = inspect(mcp_url, "--method", "tools/list")
    assert {tool["name"] for tool in listed["tools"]} == TOOLS


def test_inspector_calls_the_tools(mcp_url: str, base_url: str) -> None:
    space = inspect(
        mcp_url, "--method", "tools/call", "--tool-name", "create_space",
        "--tool-arg", "title=Inspector", "--tool-arg", "icon=🔍",
    )  # fmt: skip
    assert space["isError"] is False
    space_uuid = space["structuredContent"]["uuid"]
    task = inspect(
        mcp_url, "--method", "tools/call", "--tool-name", "create_task",
        "--tool-arg", f"space_uuid={space_uuid}", "--tool-arg", "title=inspect",
    )  # fmt: skip
    task_uuid = task["structuredContent"]["uuid"]
    reported = inspect(
        mcp_url, "--method", "tools/call", "--tool-name", "report_progress",
        "--tool-arg", f"task_uuid={task_uuid}", "--tool-arg", "current=4",
        "--tool-arg", "end=8", "--tool-arg", 'values={"log": "half way"}',
    )  # fmt: skip
    assert reported["structuredContent"] == httpx.get(f"{base_url}/tasks/{task_uuid}").json()
    assert reported["structuredContent"]["progress"]["ratio"] == 0.5
    missing = inspect(
        mcp_url, "--method", "tools/call", "--tool-name", "get_task",
        "--tool-arg", "task_uuid=00000000-0000-4000-8000-000000000000", failing=True,
    )  # fmt: skip
    assert missing == {
        "content": [{"type": "text", "text": "No such task: check the task uuid."}],
        "isError": True,
    }


def test_mcp_sdk_is_loaded_only_by_the_first_mcp_request(tmp_path):
    """A Headway nobody talks MCP to never pays the SDK's memory."""
    script = f"""
import asyncio, sys, httpx
from headway.app import create_app
from headway.config import Settings

async def main():
    app = create_app(Settings(database_url="sqlite:///{tmp_path}/lazy.db", run_worker=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            await c.post("/spaces", json={{}})
            before = "mcp" in sys.modules
            message = {{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}}
            headers = {{"accept": "application/json, text/event-stream",
                       "mcp-protocol-version": "2025-11-25"}}
            answer = await c.post("/mcp", json=message, headers=headers)
            print(before, "mcp" in sys.modules, answer.status_code)

asyncio.run(main())
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True", "200"]


async def test_a_form_body_as_curl_sends_it_is_told_that_json_is_expected(mcp_url: str) -> None:
    """`curl $H/mcp -d '{...}'` sends `application/x-www-form-urlencoded`: the answer says
    what to send instead."""
    body = json.dumps(rpc("tools/list", 1)).encode()
    form = {"content-type": "application/x-www-form-urlencoded"}
    async with httpx.AsyncClient(headers=JSON_RPC) as http:
        answer = await http.post(mcp_url, content=body, headers=form)
        assert answer.status_code == 400
        message = answer.json()["error"]
        assert "application/x-www-form-urlencoded" in message
        assert "Content-Type: application/json" in message
        assert "-H 'Content-Type: application/json'" in message
        charset = {"content-type": "application/json; charset=utf-8"}
        assert (await http.post(mcp_url, content=body, headers=charset)).status_code == 200
