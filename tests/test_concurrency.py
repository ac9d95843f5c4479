"""Concurrent requests: distinct, ordered creation instants; paging that never skips or
repeats; exactly one completion however many reports race to finish a task."""

from __future__ import annotations

import asyncio
import time

import pytest

from headway.domain.clock import ManualClock
from tests.support import outbox_events

COUNT = 50


class TickingClock(ManualClock):
    """A manual clock that also moves `tick_us` every time it is read, so that racing
    requests each see a different instant (0: it moves only when told, as usual)."""

    tick_us = 0

    def now_us(self) -> int:
        self.advance(us=self.tick_us)
        return super().now_us()


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock(time.time_ns() // 1000)


async def create_concurrently(client, space: str, count: int = COUNT) -> list[str]:
    responses = await asyncio.gather(
        *(client.post(f"/spaces/{space}/tasks", json={"title": f"t{i}"}) for i in range(count))
    )
    assert all(r.status_code == 201 for r in responses), [r.text for r in responses]
    return [r.json()["uuid"] for r in responses]


async def test_concurrent_creates_get_distinct_strictly_increasing_created_at(client, space):
    made = await create_concurrently(client, space)
    tasks = (await client.get(f"/spaces/{space}")).json()["tasks"]
    assert sorted(t["uuid"] for t in tasks) == sorted(made)
    stamps = [t["created_at"] for t in tasks]
    assert len(set(stamps)) == COUNT
    assert stamps == sorted(stamps)
    for uuid_, stamp in zip((t["uuid"] for t in tasks), stamps, strict=True):
        assert (await client.get(f"/tasks/{uuid_}")).json()["created_at"] == stamp


async def test_sequential_creates_in_one_instant_are_strictly_increasing(client, make_task):
    made = [await make_task() for _ in range(5)]
    stamps = [(await client.get(f"/tasks/{t}")).json()["created_at"] for t in made]
    assert stamps == sorted(set(stamps))


async def test_created_at_keeps_increasing_when_the_clock_steps_back(client, make_task, clock):
    first = await make_task()
    clock.advance(-30)
    second = await make_task()
    stamps = [(await client.get(f"/tasks/{t}")).json()["created_at"] for t in (first, second)]
    assert stamps[0] < stamps[1]


async def test_paging_back_with_limit_and_before_visits_every_task_once(client, space):
    made = await create_concurrently(client, space)
    page = (await client.get(f"/spaces/{space}", params={"limit": 7})).json()["tasks"]
    seen = [t["uuid"] for t in page]
    while page:
        oldest = min(t["created_at"] for t in page)
        response = await client.get(f"/spaces/{space}", params={"limit": 7, "before": oldest})
        page = response.json()["tasks"]
        stamps = [t["created_at"] for t in page]
        assert stamps == sorted(stamps, reverse=True)
        seen.extend(t["uuid"] for t in page)
    assert len(seen) == COUNT
    assert set(seen) == set(made)


async def test_paging_forward_with_limit_and_after_visits_every_task_once(client, space):
    made = await create_concurrently(client, space)
    seen: list[str] = []
    cursor = "2000-01-01T00:00:00Z"
    while True:
        response = await client.get(f"/spaces/{space}", params={"limit": 7, "after": cursor})
        page = response.json()["tasks"]
        if not page:
            break
        stamps = [t["created_at"] for t in page]
        assert stamps == sorted(stamps)
        seen.extend(t["uuid"] for t in page)
        cursor = stamps[-1]
    assert len(seen) == COUNT
    assert set(seen) == set(made)


async def test_concurrent_completing_reports_record_one_completion(client, make_task, sql, clock):
    task = await make_task()
    clock.tick_us = 1_000  # every racing report sees its own instant
    bodies = [{"done": True}, {"current": 3, "end": 3}]
    responses = await asyncio.gather(
        *(client.put(f"/tasks/{task}", json=bodies[i % 2]) for i in range(COUNT))
    )
    clock.tick_us = 0
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    finished = {r.json()["finished_at"] for r in responses}
    durations = {r.json()["duration"] for r in responses}
    assert len(finished) == 1
    assert len(durations) == 1
    assert None not in finished
    events = await outbox_events(sql, task)
    assert len(events) == 1
    assert events[0]["data"]["finished_at"] == finished.pop()
    assert (await client.get(f"/tasks/{task}")).json()["finished_at"] == events[0]["timestamp"]


async def test_concurrent_last_children_finish_the_parent_once(client, make_task, sql, clock):
    parent = await make_task()
    kids = [await make_task(parent_uuid=parent) for _ in range(10)]
    clock.tick_us = 1_000
    responses = await asyncio.gather(
        *(client.put(f"/tasks/{kid}", json={"done": True}) for kid in kids)
    )
    clock.tick_us = 0
    assert all(r.status_code == 200 for r in responses)
    family = (await client.get(f"/tasks/{parent}")).json()
    assert family["finished_at"] is not None
    assert family["progress"]["current"] == 10
    assert len(await outbox_events(sql, parent)) == 1
    assert len(await outbox_events(sql)) == 11
