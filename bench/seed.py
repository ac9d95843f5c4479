"""Data the scenarios need, created the way clients and the service create it.

Small amounts go over HTTP, concurrently. The 100,000-task space is written straight into
the SQLite file with Headway's own table definitions and row type, exactly as
`Service.tasks.create` would write each task (a uuid4, a distinct increasing `created_at`,
and the space's `last_task_at_us` moved past the newest), because 100,000 HTTP creates
would take minutes: each is a durable SQLite transaction.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
from sqlalchemy import create_engine, insert, update

from headway.domain.tasks import TaskRow, format_ts
from headway.storage.tables import spaces, tasks

PUT_BODY = '{"current":5,"end":10,"values":{"log":"x"}}'
CONCURRENCY = 16


class SeedError(RuntimeError):
    """The server answered a seeding request with something other than success."""


@dataclass
class Space:
    uuid: str
    tasks: list[str]
    created_at: list[str]  # created_at of each task, oldest first


def _check(response: httpx.Response, expected: int) -> Any:
    if response.status_code != expected:
        raise SeedError(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}"
        )
    return response.json()


async def _gather_bounded(calls: Iterable[Callable[[], Awaitable[Any]]]) -> list[Any]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(call) for call in calls))


async def create_space(client: httpx.AsyncClient, title: str) -> str:
    return _check(await client.post("/spaces", json={"title": title}), 201)["uuid"]


async def create_tasks(
    client: httpx.AsyncClient, space: str, count: int, *, parent: str | None = None
) -> list[str]:
    """`count` tasks created concurrently; returned in no particular order."""

    def create(i: int) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            body: dict[str, Any] = {"title": f"task {i}", "source": "bench"}
            if parent is not None:
                body["parent_uuid"] = parent
            response = await client.post(f"/spaces/{space}/tasks", json=body)
            return _check(response, 201)["uuid"]

        return call

    return await _gather_bounded(create(i) for i in range(count))


async def report_all(client: httpx.AsyncClient, task_uuids: Iterable[str]) -> None:
    """One report per task, so each holds progress."""

    def report(task: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            response = await client.put(
                f"/tasks/{task}", content=PUT_BODY, headers={"content-type": "application/json"}
            )
            _check(response, 200)

        return call

    await _gather_bounded(report(t) for t in task_uuids)


async def pool(client: httpx.AsyncClient, count: int) -> list[str]:
    """A space of `count` tasks, each holding progress: what PUT and GET spread over."""
    space = await create_space(client, "pool")
    tasks = await create_tasks(client, space, count)
    await report_all(client, tasks)
    return tasks


async def read_space(client: httpx.AsyncClient, space: str, **params: Any) -> dict[str, Any]:
    return _check(await client.get(f"/spaces/{space}", params=params, timeout=120), 200)


async def space_with_tasks(client: httpx.AsyncClient, title: str, count: int) -> Space:
    """A space holding `count` top-level tasks created over HTTP, each with progress."""
    space = await create_space(client, title)
    await create_tasks(client, space, count)
    found = (await read_space(client, space))["tasks"]
    await report_all(client, [t["uuid"] for t in found])
    return Space(space, [t["uuid"] for t in found], [t["created_at"] for t in found])


async def parent_with_children(client: httpx.AsyncClient, count: int) -> str:
    """A top-level task with `count` children, each child with progress."""
    space = await create_space(client, "parent")
    (parent,) = await create_tasks(client, space, 1)
    children = await create_tasks(client, space, count, parent=parent)
    await report_all(client, children)
    return parent


def insert_tasks_directly(database_path: str, space: str, count: int, now_us: int) -> Space:
    """`count` top-level tasks written into the SQLite file in a few transactions.

    Rows are what `Service.tasks.create` writes: a random uuid4, title and source, and a
    `created_at` that increases by 1 ms per task and ends just before `now_us`; the
    space's `last_task_at_us` then holds the newest, as `claim_created_at` leaves it.
    """
    engine = create_engine(f"sqlite:///{database_path}", connect_args={"timeout": 60})
    first_us = now_us - count * 1000
    created = [first_us + i * 1000 for i in range(count)]
    uuids = [str(uuid.uuid4()) for _ in range(count)]
    try:
        for start in range(0, count, 10_000):
            rows = [
                msgspec.structs.asdict(
                    TaskRow(uuids[i], space, None, f"task {i}", "bench", created[i])
                )
                for i in range(start, min(count, start + 10_000))
            ]
            with engine.begin() as conn:
                conn.execute(insert(tasks), rows)
        with engine.begin() as conn:
            conn.execute(
                update(spaces).where(spaces.c.uuid == space).values(last_task_at_us=created[-1])
            )
    finally:
        engine.dispose()
    return Space(space, uuids, [format_ts(us) for us in created])


def cursors(space: Space, page: int, samples: int, seed: int = 6) -> list[str]:
    """`before` cursors that each leave at least `page` older tasks to return."""
    eligible = space.created_at[page:]
    rng = random.Random(seed)
    return eligible if len(eligible) <= samples else rng.sample(eligible, samples)
