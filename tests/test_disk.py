"""The disk budget: creates refused with 503 and Retry-After before anything is written
when the database passes its size limit or its disk runs short of free space; reports,
reads and finishes go on; `/up` says degraded, with the limit; creates work again as
soon as there is room. (A disk that really fills: tests/test_disk_full.py.)"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import httpx
import pytest

from headway.app import create_app
from headway.config import FreeMin
from headway.ops.disk import DiskBudget, Measure, judge
from headway.storage.database import Database

from .conftest import empty_backend, pairs, running

MCP = {"accept": "application/json, text/event-stream", "host": "127.0.0.1"}
TABLES = ("spaces", "tasks", "webhooks", "shares", "channels")


def mcp_call(name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def counts(sql) -> dict[str, int]:
    return {table: (await sql(f"SELECT count(*) FROM {table}"))[0][0] for table in TABLES}


async def creates(client: httpx.AsyncClient, space: str) -> dict[str, httpx.Response]:
    """One request of every kind that creates, REST's and /mcp's."""
    return {
        "space": await client.post("/spaces", json={"title": "more"}),
        "task": await client.post(f"/spaces/{space}/tasks", json={"title": "more"}),
        "webhook": await client.post(
            f"/spaces/{space}/webhooks", json={"url": "https://93.184.215.14/hook"}
        ),
        "share": await client.post(f"/spaces/{space}/shares", json={}),
        "channel": await client.post(f"/spaces/{space}/channels", json={"url": "ntfy://topic"}),
        "mcp space": await client.post("/mcp", json=mcp_call("create_space"), headers=MCP),
        "mcp task": await client.post(
            "/mcp", json=mcp_call("create_task", space_uuid=space), headers=MCP
        ),
    }


def assert_refused(answers: dict[str, httpx.Response], words: str) -> None:
    for kind, answer in answers.items():
        if kind.startswith("mcp"):
            assert answer.status_code == 200, (kind, answer.text)
            result = answer.json()["result"]
            assert result["isError"] is True, kind
            assert words in result["content"][0]["text"], kind
            continue
        assert answer.status_code == 503, (kind, answer.text)
        assert answer.headers["retry-after"] == "30", kind
        assert words in answer.json()["error"], kind
        assert "reports still work" in answer.json()["error"], kind


async def test_creates_are_refused_past_the_size_limit_while_reports_go_on(
    app, client, space, make_task, sql
):
    task = await make_task(title="running")
    budget: DiskBudget = app.state.service.disk
    measured = (await budget.refresh()).measure.database_bytes
    assert measured is not None and measured > 0
    before = await counts(sql)

    budget.max_bytes = measured // 2
    await budget.refresh()
    assert_refused(await creates(client, space), "size limit")
    assert await counts(sql) == before, "nothing was written"

    report = await client.put(f"/tasks/{task}", json={"current": 3, "end": 10})
    assert report.status_code == 200, report.text
    assert (await client.get(f"/spaces/{space}")).status_code == 200
    up = await client.get("/up")
    assert up.status_code == 200
    assert up.json()["status"] == "degraded"
    disk = up.json()["checks"]["disk"]
    assert disk["status"] == "full"
    assert disk["limit"] == "HEADWAY_DATABASE_MAX_SIZE"
    assert disk["limit_bytes"] == measured // 2
    assert disk["database_bytes"] >= measured
    scraped = (await client.get("/metrics")).text
    assert 'headway_refusals_total{reason="disk"}' in scraped
    assert "headway_database_bytes " in scraped
    # A finish writes (its event), in the room left.
    finish = await client.put(f"/tasks/{task}", json={"current": 10, "end": 10})
    assert finish.status_code == 200, finish.text
    assert finish.json()["finished_at"] is not None

    budget.max_bytes = None
    await budget.refresh()
    answers = await creates(client, space)
    for kind, answer in answers.items():
        assert answer.status_code in (200, 201), (kind, answer.text)
        if kind.startswith("mcp"):
            assert answer.json()["result"]["isError"] is False, kind
    assert (await client.get("/up")).json()["checks"]["disk"]["status"] in ("ok", "low")


async def test_the_size_limit_is_read_from_settings_and_named_by_up(settings):
    app = create_app(settings.with_(database_max_size=1))
    async with running(app):
        await empty_backend(app, settings)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as c:
            refused = await c.post("/spaces", json={})
            assert refused.status_code == 503
            assert "size limit" in refused.json()["error"]
            up = (await c.get("/up")).json()
            assert up["status"] == "degraded"
            assert up["checks"]["disk"]["limit"] == "HEADWAY_DATABASE_MAX_SIZE"
            assert up["checks"]["disk"]["limit_bytes"] == 1


async def test_a_database_near_its_limit_is_low_and_still_creates(app, client, space):
    budget: DiskBudget = app.state.service.disk
    size = (await budget.refresh()).measure.database_bytes
    assert size is not None
    budget.max_bytes = int(size / 0.95)
    await budget.refresh()
    assert (await client.post(f"/spaces/{space}/tasks", json={})).status_code == 201
    up = await client.get("/up")
    assert up.status_code == 200
    assert up.json()["status"] == "degraded"
    disk = up.json()["checks"]["disk"]
    assert (disk["status"], disk["limit"]) == ("low", "HEADWAY_DATABASE_MAX_SIZE")


@pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)
async def test_too_little_free_space_refuses_creates(app, client, space, sql):
    budget: DiskBudget = app.state.service.disk
    before = await counts(sql)
    budget.free_min = FreeMin(bytes=None, share=1.0)  # all of the disk: never free
    state = await budget.refresh()
    assert state.refusing and state.limit == "HEADWAY_DISK_FREE_MIN"
    assert_refused(await creates(client, space), "disk is almost full")
    assert await counts(sql) == before
    disk = (await client.get("/up")).json()["checks"]["disk"]
    assert disk["status"] == "full"
    assert disk["free_bytes"] > 0
    assert disk["limit"] == "HEADWAY_DISK_FREE_MIN"
    assert disk["limit_bytes"] > disk["free_bytes"]
    assert "headway_disk_free_bytes " in (await client.get("/metrics")).text

    budget.free_min = FreeMin(bytes=0, share=None)  # 0 turns the minimum off
    await budget.refresh()
    assert (await client.post(f"/spaces/{space}/tasks", json={})).status_code == 201
    assert (await client.get("/up")).json()["status"] == "ok"


@pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)
async def test_a_sqlite_create_measures_at_most_once_a_period(settings):
    db = Database(settings.database_url)
    await db.migrate()
    now = [0.0]
    budget = DiskBudget(db, free_min=FreeMin(bytes=0, share=None), now=lambda: now[0])
    size = (await budget.refresh()).measure.database_bytes
    assert size is not None
    budget.max_bytes = size + 1024 * 1024
    await budget.refresh()
    path = db.file
    assert path is not None
    other = sqlite3.connect(path)  # another process's writes, as far as the budget knows
    other.execute("CREATE TABLE ballast (blob BLOB)")
    other.execute("INSERT INTO ballast VALUES (zeroblob(2 * 1024 * 1024))")
    other.commit()
    other.close()
    budget.admit()  # the last measure is trusted for a period: no system call
    now[0] += 0.5
    budget.admit()
    now[0] += 0.5
    with pytest.raises(Exception, match="size limit") as refused:
        budget.admit()
    assert getattr(refused.value, "status", None) == 503
    await db.close()


@pytest.mark.parametrize("backend", pairs(database="postgres"), indirect=True)
async def test_postgres_is_measured_in_the_background_never_by_a_create(app, settings):
    db: Database = app.state.service.db
    budget = DiskBudget(db, max_bytes=1, period_s=0.02)
    assert budget.watched
    budget.admit()  # not measured yet: a create never asks the database
    measuring = asyncio.create_task(budget.run())
    try:
        for _ in range(500):
            if budget.state.refusing:
                break
            await asyncio.sleep(0.01)
        with pytest.raises(Exception, match="size limit"):
            budget.admit()
        size = budget.state.measure.database_bytes
        assert size is not None and size > 1
        assert budget.state.measure.free_bytes is None  # the server's disk is not ours
        budget.max_bytes = size * 100
        for _ in range(500):
            if not budget.state.refusing:
                break
            await asyncio.sleep(0.01)
        budget.admit()
    finally:
        measuring.cancel()
    assert not DiskBudget(db).watched, "no size limit: nothing to watch"


def test_the_worst_finding_wins_and_names_its_limit():
    gib = 1024**3
    both = FreeMin()
    state = judge(_measure(size=5, free=10 * gib, disk=100 * gib), None, both)
    assert (state.status, state.limit) == ("ok", None)
    # The default minimum is the smaller of 1 GiB and 5%: 1 MiB of a 20 MiB disk.
    small = judge(_measure(size=5, free=900 * 1024, disk=20 * 1024**2), None, both)
    assert small.refusing and small.limit_bytes == 1024**2
    low = judge(_measure(size=5, free=int(1.5 * gib), disk=100 * gib), None, both)
    assert (low.status, low.refusing, low.limit) == ("low", False, "HEADWAY_DISK_FREE_MIN")
    # Past the size limit beats a low disk.
    over = judge(_measure(size=100, free=int(1.5 * gib), disk=100 * gib), 100, both)
    assert (over.status, over.refusing, over.limit) == ("full", True, "HEADWAY_DATABASE_MAX_SIZE")
    # No minimum: a disk with no byte left is full, though nothing is refused for it
    # (the database's own disk-full errors answer 503).
    empty = judge(_measure(size=5, free=0, disk=gib), None, FreeMin(bytes=0, share=None))
    assert (empty.status, empty.refusing, empty.limit) == ("full", False, None)


def _measure(*, size: int, free: int, disk: int) -> Measure:
    return Measure(size, free, disk)
