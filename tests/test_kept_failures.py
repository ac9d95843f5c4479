"""A failure is kept with its finish (CONTRACT, seventh round), on every backend pair:
whether a finish failed, and its error, are decided at the finish and stored with the task,
so that a failed task reads failed after a restart (a new app on the same database, its
live progress gone), once its progress expired, and after later reports to it, in every
answer: a task's read, a space's (what the pages show), the stream's events, badges,
`headway watch`, jobs and `/mcp`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest
import redis.asyncio as redis
from starlette.applications import Starlette

from headway.app import create_app
from headway.cli.board import Board
from headway.client.events import Event
from headway.config import Settings
from headway.domain.failure import failure_of

from .conftest import pairs, running
from .support import outbox_events
from .test_badges import badge, ids_by_title, share_of
from .test_jobs import jobs_of
from .test_reports import TTL, put, read
from .test_watch import drawn, row

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

ERROR = "exit code 3"
FAILED = {"current": 1, "end": 4, "done": True, "values": {"error": ERROR, "exit_code": 3}}
# A failed task whose progress is gone (expired, or lost with a restart).
KEPT = {
    "current": None,
    "end": None,
    "ratio": 1,
    "values": {"error": ERROR},
    "updated_at": None,
    "aggregated": False,
}


@contextlib.asynccontextmanager
async def restarted(
    settings: Settings, clock
) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """The service as it is after a restart, and a client of it: a new app on the same
    database, with no live progress (gone with the process's memory; Redis runs without
    persistence, so a restart of it loses it too). The test's first app stays idle."""
    if settings.redis_url:
        client = redis.Redis.from_url(settings.redis_url)
        await client.flushdb()
        await client.aclose()
    app = create_app(settings, clock)
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield app, client


async def test_a_failed_task_reads_failed_after_a_restart(
    client, settings, space, make_task, clock
):
    task = await make_task(title="Migrate")
    assert (await put(client, task, FAILED))["progress"]["values"]["error"] == ERROR
    async with restarted(settings, clock) as (app, again):
        body = await read(again, task)
        assert body["finished_at"] is not None
        assert body["progress"] == KEPT
        assert failure_of(body) is not None
        (listed,) = (await again.get(f"/spaces/{space}")).json()["tasks"]  # what pages show
        assert listed == body
        (streamed,) = await app.state.service.tasks.event_views([task])
        assert msgspec.json.decode(msgspec.json.encode(streamed))["progress"] == KEPT
        assert (await jobs_of(again, space))[0]["failed"] == 1


async def test_a_failed_task_reads_failed_once_its_progress_expired(client, make_task, clock):
    task = await make_task()
    await put(client, task, FAILED)
    clock.advance(TTL + 1)
    assert (await read(client, task))["progress"] == KEPT


async def test_a_report_after_the_failure_never_wipes_it(client, space, make_task, sql):
    task = await make_task(title="Migrate")
    await put(client, task, FAILED)
    answer = await put(client, task, {"current": 2, "end": 4})
    assert answer["progress"]["values"] == {"error": ERROR}
    assert (answer["progress"]["current"], answer["progress"]["end"]) == (2, 4)
    assert (await read(client, task))["progress"]["values"] == {"error": ERROR}

    # A later report's other values are as it sent them; its error is not the outcome.
    later = {"current": 3, "end": 4, "values": {"log": "retrying", "error": "other", "n": 1}}
    answer = await put(client, task, later)
    assert answer["progress"]["values"] == {"log": "retrying", "error": ERROR, "n": 1}
    answer = await put(client, task, {"done": True, "values": {"error": ""}})
    assert answer["progress"]["values"] == {"error": ERROR}
    report = await client.get(f"/tasks/{task}/report", params={"current": 4, "end": 4})
    assert report.json()["progress"]["values"] == {"error": ERROR}

    assert len(await outbox_events(sql, task)) == 1  # still its one completion event
    (job,) = await jobs_of(client, space)
    assert (job["runs"], job["failed"], job["last"][0]["failed"]) == (1, 1, True)


async def test_a_report_after_a_success_never_makes_it_a_failure(client, make_task):
    task = await make_task()
    await put(client, task, {"done": True})
    late = {"current": 2, "end": 4, "values": {"log": "late", "error": "timeout"}}
    answer = await put(client, task, late)
    assert answer["progress"]["values"] == {"log": "late"}  # its outcome has no error
    assert failure_of(answer) is None
    answer = await put(client, task, {"values": {"error": 0}})
    assert answer["progress"]["values"] == {"error": 0}  # just a value (see Failure)


async def test_a_parent_failed_by_its_step_reads_failed_after_a_restart(
    client, settings, make_task, clock
):
    parent = await make_task(title="Deploy")
    build = await make_task(title="Build", parent_uuid=parent)
    migrate = await make_task(title="Run migrations", parent_uuid=parent)
    await put(client, build, {"done": True})
    await put(client, migrate, FAILED)
    await put(client, migrate, {"current": 2, "end": 4})  # a late report to the step
    async with restarted(settings, clock) as (_, again):
        body = await read(again, parent)
        assert body["finished_at"] is not None
        assert body["children"][1]["progress"] == KEPT
        failure = failure_of(body)
        assert failure is not None
        assert failure.message == f"1 of 2 steps failed (Run migrations: {ERROR})"


async def test_a_step_that_failed_long_before_its_parent_finished_fails_it(
    client, space, make_task, clock, sql
):
    parent = await make_task(title="Deploy")
    migrate = await make_task(title="Run migrations", parent_uuid=parent)
    build = await make_task(title="Build", parent_uuid=parent)
    await put(client, migrate, FAILED)
    clock.advance(TTL + 1)  # the failed step's progress expired
    await put(client, build, {"done": True})  # the last step finishes the parent
    (event,) = await outbox_events(sql, parent)
    failure = failure_of(event["data"])
    assert failure is not None
    assert failure.message == f"1 of 2 steps failed (Run migrations: {ERROR})"
    deploy = next(job for job in await jobs_of(client, space) if job["title"] == "Deploy")
    assert (deploy["runs"], deploy["failed"]) == (1, 1)


async def test_a_parent_that_failed_itself_reads_failed_after_a_restart(
    client, settings, make_task, clock
):
    parent = await make_task(title="Deploy")
    await make_task(title="Build", parent_uuid=parent)
    await put(client, parent, {"done": True, "values": {"error": "cancelled"}})
    await put(client, parent, {"values": {"log": "again"}})
    assert (await read(client, parent))["progress"]["values"] == {
        "log": "again",
        "error": "cancelled",
    }
    async with restarted(settings, clock) as (_, again):
        progress = (await read(again, parent))["progress"]
        assert (progress["values"], progress["aggregated"]) == ({"error": "cancelled"}, True)


async def test_badges_and_watch_show_the_kept_failure_after_a_restart(
    client, settings, space, make_task, clock
):
    share = await share_of(client, space)
    task = await make_task(title="Tests")
    await put(client, task, FAILED)
    async with restarted(settings, clock) as (_, again):
        ids = await ids_by_title(again, share)
        _, words, tooltip = await badge(again, f"/shared/{share}/tasks/{ids['Tests']}/badge.svg")
        assert words == ["Tests", "failed"]
        assert ERROR in tooltip
        _, words, _ = await badge(again, f"/shared/{share}/badge.svg")
        assert words[-1].endswith("1 failed")

        board = Board()
        board.apply(Event("snapshot", (await again.get(f"/spaces/{space}")).text))
        lines = drawn(board)
        assert row(lines, "Tests").startswith("✗")
        assert row(lines, "Tests").endswith(ERROR)


async def test_mcp_reads_the_kept_failure_after_a_restart(client, settings, make_task, clock):
    from .test_mcp import JSON_RPC, MODERN, rpc

    task = await make_task()
    await put(client, task, FAILED)
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {**JSON_RPC, "mcp-protocol-version": MODERN, "mcp-method": "tools/call"}
    async with restarted(settings, clock) as (_, again):
        called = await again.post(
            "/mcp",
            json=rpc("tools/call", 1, name="get_task", arguments={"task_uuid": task}, _meta=meta),
            headers={**headers, "mcp-name": "get_task"},
        )
        assert called.status_code == 200, called.text
        result = called.json()["result"]
        assert result["isError"] is False
        assert result["structuredContent"]["progress"] == KEPT
