"""Retention on a moved clock, on every backend pair: a space idle for longer than
HEADWAY_SPACE_RETENTION goes; one that was created in, reported to or read (by its owner
or its share link) stays; activity costs at most one write per space per hour; `never`
keeps everything; a big idle space goes a batch at a time."""

from __future__ import annotations

import pytest

from headway.background.sweeper import Sweeper

from .conftest import pairs

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

DAY = 86_400
RETENTION = 90 * DAY


@pytest.fixture
def sweeper(app, clock) -> Sweeper:
    return Sweeper(app.state.service, app.state.service.db, clock, RETENTION * 1_000_000, batch=7)


async def exists(client, space) -> bool:
    return (await client.get(f"/spaces/{space}")).status_code == 200


async def test_an_idle_space_goes_and_a_used_one_stays(client, clock, sweeper, sql):
    idle = (await client.post("/spaces", json={"title": "idle"})).json()["uuid"]
    reported = (await client.post("/spaces", json={"title": "reported"})).json()["uuid"]
    task = (await client.post(f"/spaces/{reported}/tasks", json={})).json()["uuid"]
    shared = (await client.post("/spaces", json={"title": "shared"})).json()["uuid"]
    link = (await client.post(f"/spaces/{shared}/shares", json={})).json()["url"]
    clock.advance(RETENTION - DAY)
    await client.put(f"/tasks/{task}", json={"current": 1})  # a report is activity
    assert (await client.get(link)).status_code == 200  # a read by the share link too
    await sweeper.step()
    clock.advance(2 * DAY)  # `idle` is now past the retention; the others are not
    assert await sweeper.step() == 1
    assert (await sql("SELECT uuid FROM spaces WHERE uuid = ?", idle)) == []
    assert await exists(client, reported) and await exists(client, shared)
    assert not await exists(client, idle)
    clock.advance(RETENTION + DAY)  # (the reads above were activity too)
    assert await sweeper.step() == 2  # nobody came back
    assert not await exists(client, reported)
    assert (await client.get(link)).status_code == 404


async def test_reads_cost_at_most_one_write_per_space_per_hour(app, client, clock, sweeper, sql):
    space = (await client.post("/spaces", json={})).json()["uuid"]
    activity = app.state.service.activity
    clock.advance(3600)
    for _ in range(50):
        assert await exists(client, space)
    assert await activity.flush() == 1
    for _ in range(50):
        assert await exists(client, space)
    assert await activity.flush() == 0  # the same hour: nothing to write
    clock.advance(3600)
    assert await exists(client, space)
    assert await activity.flush() == 1
    (noted,) = (await sql("SELECT active_at_us FROM spaces WHERE uuid = ?", space))[0]
    assert noted == clock.now_us()


async def test_unknown_spaces_note_no_activity(app, client):
    for n in range(20):
        await client.get(f"/spaces/00000000-0000-4000-8000-{n:012d}")
    assert await app.state.service.activity.flush() == 0


async def test_never_keeps_everything(app, client, clock):
    sweeper = Sweeper(app.state.service, app.state.service.db, clock, None)
    space = (await client.post("/spaces", json={})).json()["uuid"]
    clock.advance(10 * RETENTION)
    assert await sweeper.step() == 0
    assert await exists(client, space)


async def test_a_big_idle_space_goes_a_batch_at_a_time_with_everything_in_it(
    app, client, clock, sweeper, sql
):
    space = (await client.post("/spaces", json={})).json()["uuid"]
    parents = [
        (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"] for _ in range(10)
    ]
    for parent in parents[:3]:
        for _ in range(4):
            body = {"parent_uuid": parent}
            step = (await client.post(f"/spaces/{space}/tasks", json=body)).json()["uuid"]
            await client.put(f"/tasks/{step}", json={"current": 1, "end": 2})
    await client.post(f"/spaces/{space}/shares", json={})
    other = (await client.post("/spaces", json={})).json()["uuid"]
    clock.advance(RETENTION + DAY)
    await client.get(f"/spaces/{other}")  # the other space is used
    assert await sweeper.step() == 1
    assert (await sql("SELECT count(*) FROM tasks"))[0][0] == 0
    assert (await sql("SELECT count(*) FROM shares"))[0][0] == 0
    assert await exists(client, other)
    for parent in parents:
        assert (await client.get(f"/tasks/{parent}")).status_code == 404
