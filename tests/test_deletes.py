"""Deleting tasks and spaces, on every backend pair: every read is 404 at once (caches
included), a parent's aggregate and finish follow a deleted step, undelivered events and
progress go, streams end; and the caps on steps per parent and tasks per space."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from .conftest import pairs
from .live_server import serving
from .test_events import WAIT_S, new_space, new_task, watching

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

UNKNOWN = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def settings(settings):
    return settings.with_(webhook_allow_private=True)


@pytest.fixture
def base_url(settings):
    with serving(settings.with_(run_worker=False)) as (host, port):
        yield f"http://{host}:{port}"


async def status(client, method, path, **kwargs) -> int:
    return (await client.request(method, path, **kwargs)).status_code


async def test_a_deleted_task_is_404_everywhere_at_once(client, space, make_task):
    task = await make_task(title="doomed")
    kept = await make_task(title="kept")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 4})  # cached, with progress
    assert len((await client.get(f"/spaces/{space}")).json()["tasks"]) == 2  # held
    answer = await client.delete(f"/tasks/{task}")
    assert answer.status_code == 204 and answer.content == b""
    assert await status(client, "GET", f"/tasks/{task}") == 404
    assert await status(client, "PUT", f"/tasks/{task}", json={"current": 2}) == 404
    assert await status(client, "GET", f"/tasks/{task}/report?current=3") == 404
    titles = [t["title"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"]]
    assert titles == ["kept"]
    assert (await client.get(f"/tasks/{kept}")).status_code == 200
    again = await client.delete(f"/tasks/{task}")
    assert again.status_code == 404 and "error" in again.json()
    assert await status(client, "DELETE", "/tasks/not-a-uuid") == 404


async def test_deleting_a_parent_deletes_its_steps_and_their_progress(
    app, client, space, make_task
):
    parent = await make_task(title="p")
    steps = [await make_task(title=f"s{n}", parent_uuid=parent) for n in range(3)]
    for step in steps:
        await client.put(f"/tasks/{step}", json={"current": 1, "end": 2})
    assert await status(client, "DELETE", f"/tasks/{parent}") == 204
    for step in steps:
        assert await status(client, "GET", f"/tasks/{step}") == 404
    assert await app.state.service.progress.get_many(steps) == [None, None, None]
    assert (await client.get(f"/spaces/{space}")).json()["tasks"] == []


async def test_a_parents_aggregate_and_finish_follow_a_deleted_step(
    app, client, space, make_task, sql
):
    parent = await make_task(title="release")
    done = await make_task(title="built", parent_uuid=parent)
    stuck = await make_task(title="stuck", parent_uuid=parent)
    await client.put(f"/tasks/{done}", json={"done": True})
    seen = (await client.get(f"/tasks/{parent}")).json()
    assert seen["progress"]["end"] == 2 and seen["finished_at"] is None
    events_before = (await sql("SELECT count(*) FROM outbox WHERE task_uuid = ?", parent))[0][0]
    assert await status(client, "DELETE", f"/tasks/{stuck}") == 204
    seen = (await client.get(f"/tasks/{parent}")).json()
    assert seen["progress"]["end"] == 1 and seen["progress"]["current"] == 1
    assert seen["finished_at"] is not None  # its remaining step had finished
    assert [c["title"] for c in seen["children"]] == ["built"]
    events = (await sql("SELECT count(*) FROM outbox WHERE task_uuid = ?", parent))[0][0]
    assert events == events_before + 1  # its one completion event


async def test_a_deleted_space_takes_everything_with_it(app, client, space, make_task, sql):
    parent = await make_task(title="p")
    step = await make_task(title="s", parent_uuid=parent)
    await client.put(f"/tasks/{step}", json={"current": 1, "end": 2})
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()
    hook = await client.post(f"/spaces/{space}/webhooks", json={"url": "http://127.0.0.1:9/h"})
    assert hook.status_code == 201
    channel = await client.post(f"/spaces/{space}/channels", json={"url": "json://127.0.0.1:9/"})
    assert channel.status_code == 201
    await client.put(f"/tasks/{parent}", json={"done": True})  # an undelivered event
    assert (await sql("SELECT count(*) FROM deliveries"))[0][0] >= 1
    assert await status(client, "DELETE", f"/spaces/{space}") == 204
    for method, path in [
        ("GET", f"/spaces/{space}"),
        ("GET", f"/tasks/{parent}"),
        ("GET", f"/tasks/{step}"),
        ("GET", f"/spaces/{space}/shares"),
        ("GET", f"/spaces/{space}/webhooks"),
        ("GET", f"/spaces/{space}/channels"),
        ("GET", share["url"]),
        ("POST", f"/spaces/{space}/tasks"),
        ("DELETE", f"/spaces/{space}"),
    ]:
        kwargs = {"json": {}} if method == "POST" else {}
        assert await status(client, method, path, **kwargs) == 404, (method, path)
    assert await status(client, "PUT", f"/tasks/{step}", json={"current": 2}) == 404
    await app.state.sweeper.remove()  # woken by the delete: its rows go in the background
    for table in ("deliveries", "outbox", "channel_deliveries", "tasks", "shares", "channels"):
        assert (await sql(f"SELECT count(*) FROM {table}"))[0][0] == 0, table
    assert await app.state.service.progress.get_many([parent, step]) == [None, None]
    assert await status(client, "DELETE", f"/spaces/{UNKNOWN}") == 404


async def test_the_steps_per_parent_cap_refuses_beyond_it(app, client, space, make_task):
    app.state.service.caps.steps_per_parent = 3
    parent = await make_task()
    steps = [await make_task(parent_uuid=parent) for _ in range(3)]
    answer = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
    assert answer.status_code == 422 and "at most 3 steps" in answer.json()["error"]
    both = await asyncio.gather(
        *(client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent}) for _ in range(4))
    )
    assert {b.status_code for b in both} == {422}
    await client.delete(f"/tasks/{steps[0]}")
    assert (
        await status(client, "POST", f"/spaces/{space}/tasks", json={"parent_uuid": parent}) == 201
    )
    assert len((await client.get(f"/tasks/{parent}")).json()["children"]) == 3


async def test_a_full_space_makes_room_by_removing_its_oldest_finished_task(
    app, client, space, make_task
):
    app.state.service.caps.tasks_per_space = 3
    oldest = await make_task(title="oldest")
    step = await make_task(title="its step", parent_uuid=oldest)
    second = await make_task(title="second")
    await make_task(title="third")
    answer = await client.post(f"/spaces/{space}/tasks", json={"title": "fourth"})
    assert answer.status_code == 422 and "all still active" in answer.json()["error"]
    await client.put(f"/tasks/{step}", json={"done": True})  # finishes `oldest` too
    await client.put(f"/tasks/{second}", json={"done": True})
    assert await status(client, "POST", f"/spaces/{space}/tasks", json={"title": "fourth"}) == 201
    titles = [t["title"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"]]
    assert sorted(titles) == ["fourth", "second", "third"]
    assert await status(client, "GET", f"/tasks/{oldest}") == 404
    assert await status(client, "GET", f"/tasks/{step}") == 404
    assert await status(client, "POST", f"/spaces/{space}/tasks", json={"title": "fifth"}) == 201
    titles = [t["title"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"]]
    assert sorted(titles) == ["fifth", "fourth", "third"]
    assert await status(client, "POST", f"/spaces/{space}/tasks", json={"title": "sixth"}) == 422


async def test_deleting_a_space_ends_its_streams(base_url):
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        other = await new_space(http)
        await new_task(http, space, title="x")
        share = (await http.post(f"/spaces/{space}/shares", json={})).json()
        async with (
            watching(http, f"/spaces/{space}/events") as owner,
            watching(http, share["url"] + "/events") as shared,
            watching(http, f"/spaces/{other}/events") as bystander,
        ):
            for watcher in (owner, shared, bystander):
                await watcher.snapshot()
            assert (await http.delete(f"/spaces/{space}")).status_code == 204
            await asyncio.wait_for(owner.ended.wait(), WAIT_S)
            await asyncio.wait_for(shared.ended.wait(), WAIT_S)
            assert not bystander.ended.is_set()
        assert (await http.get(f"/spaces/{space}/events")).status_code == 404
        assert (await http.get(share["url"] + "/events")).status_code == 404


async def test_deleting_a_task_restarts_its_spaces_streams_without_it(base_url):
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        doomed = await new_task(http, space, title="doomed")
        await new_task(http, space, title="kept")
        async with watching(http, f"/spaces/{space}/events") as owner:
            await owner.snapshot()
            assert (await http.delete(f"/tasks/{doomed}")).status_code == 204
            await asyncio.wait_for(owner.ended.wait(), WAIT_S)
        async with watching(http, f"/spaces/{space}/events") as again:
            snapshot = await again.snapshot()
            assert [t["title"] for t in snapshot["tasks"]] == ["kept"]
