"""Group commit: concurrent creates share one transaction and one commit, each create is
answered only once that commit is durable, and a create refused for its own reason fails
alone, whatever else shares its batch."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from headway.config import Settings
from headway.service.group_commit import GroupCommit
from headway.storage import queries
from headway.storage.database import Database, DatabaseUnavailable
from tests.support import stored_counts

from .live_server import LiveServer

COUNT = 200


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Rate limits off, as the benchmark runs creates: 200 at once through shared Redis
    counters would meet redis-py's default pool of 100 connections (a 503 that is the
    rate limiter's, not the writes')."""
    return dataclasses.replace(settings, rate_limits=False)


@contextlib.contextmanager
def counting_commits(db: Database) -> Iterator[list[int]]:
    """Count the commits of `db` while the block runs (the list's one number, set when
    the block ends)."""
    commits = [0]
    before = db.commits
    try:
        yield commits
    finally:
        commits[0] = db.commits - before


@contextlib.asynccontextmanager
async def holding_writes(db: Database, space: str) -> AsyncIterator[None]:
    """Keep creates in `space` from committing while the block runs: on SQLite by holding
    the write lock, on PostgreSQL the space's row lock (which every create there claims)."""
    async with db.write() as st:
        await st.rows(
            "UPDATE spaces SET last_task_at_us = last_task_at_us WHERE uuid = ?", (space,)
        )
        yield


async def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"waited 10 s for {what}"
        await asyncio.sleep(0.005)


async def test_concurrent_creates_get_distinct_increasing_instants_and_read_back(client, space):
    responses = await asyncio.gather(
        *(client.post(f"/spaces/{space}/tasks", json={"title": f"t{i}"}) for i in range(COUNT))
    )
    assert [r.status_code for r in responses] == [201] * COUNT
    made = {r.json()["uuid"] for r in responses}
    assert len(made) == COUNT
    tasks = (await client.get(f"/spaces/{space}")).json()["tasks"]
    assert {t["uuid"] for t in tasks} == made
    stamps = [t["created_at"] for t in tasks]
    assert len(set(stamps)) == COUNT
    assert stamps == sorted(stamps)
    for task in tasks:
        assert (await client.get(f"/tasks/{task['uuid']}")).json()["created_at"] == (
            task["created_at"]
        )
    # Read back in order, also a page at a time.
    after, seen = "2000-01-01T00:00:00Z", []
    while page := (
        await client.get(f"/spaces/{space}", params={"after": after, "limit": 30})
    ).json()["tasks"]:
        seen.extend(t["uuid"] for t in page)
        after = page[-1]["created_at"]
    assert seen == [t["uuid"] for t in tasks]


async def test_concurrent_creates_share_far_fewer_commits(app, client, space):
    with counting_commits(app.state.service.db) as commits:
        responses = await asyncio.gather(
            *(client.post(f"/spaces/{space}/tasks", json={}) for _ in range(COUNT))
        )
        spaces = await asyncio.gather(*(client.post("/spaces", json={}) for _ in range(COUNT)))
    assert all(r.status_code == 201 for r in [*responses, *spaces])
    assert commits[0] < 2 * COUNT / 4, f"{commits[0]} commits for {2 * COUNT} creates"


async def test_refused_creates_in_a_batch_fail_alone(app, client, sql, space, make_task):
    service = app.state.service
    other = (await client.post("/spaces", json={})).json()["uuid"]
    blocker_space = (await client.post("/spaces", json={})).json()["uuid"]
    parent = await make_task(title="parent")
    step = await make_task(parent_uuid=parent)
    foreign = await make_task(other)
    # Cached (on the embedded default) as a family of one child: the batch must forget it.
    assert len((await client.get(f"/tasks/{parent}")).json()["children"]) == 1
    before = await stored_counts(sql)
    nowhere = str(uuid.uuid4())
    requests = [
        *[(space, {"title": "top"}, 201)] * 5,
        *[(space, {"title": "step", "parent_uuid": parent}, 201)] * 5,
        *[(other, {"title": "elsewhere"}, 201)] * 2,
        *[(space, {"parent_uuid": str(uuid.uuid4())}, 422)] * 3,
        *[(space, {"parent_uuid": step}, 422)] * 3,
        *[(space, {"parent_uuid": foreign}, 422)] * 2,
        (nowhere, {}, 404),
        (nowhere, {"parent_uuid": parent}, 404),
    ]
    with counting_commits(service.db) as commits:
        async with holding_writes(service.db, blocker_space):
            # The first batch holds only the blocker and waits; everything else queues
            # behind it and goes in the next batch, all together.
            blocker = asyncio.create_task(client.post(f"/spaces/{blocker_space}/tasks", json={}))
            creates = service.tasks.creates
            await until(lambda: creates._writer is not None and not creates.waiting, "a batch")
            sent = [
                asyncio.create_task(client.post(f"/spaces/{s}/tasks", json=body))
                for s, body, _ in requests
            ]
            await until(lambda: creates.waiting == len(requests), "the queue")
            assert not blocker.done()
        responses = await asyncio.gather(*sent)
        assert (await blocker).status_code == 201
    assert commits[0] == 3  # the hold, the blocker's batch, the batch of all the others
    assert [r.status_code for r in responses] == [status for _, _, status in requests]
    for response in responses:
        if response.status_code != 201:
            assert isinstance(response.json()["error"], str)
    assert "one level" in responses[15].json()["error"]
    assert "parent_uuid" in responses[12].json()["error"]

    assert (await stored_counts(sql))["tasks"] == before["tasks"] + 13
    made = [r.json()["uuid"] for r in responses if r.status_code == 201]
    children = [c["uuid"] for c in (await client.get(f"/tasks/{parent}")).json()["children"]]
    assert children[0] == step
    assert sorted(children[1:]) == sorted(made[5:10])
    assert (await client.get(f"/tasks/{step}")).json()["children"] == []
    tasks = (await client.get(f"/spaces/{space}")).json()["tasks"]
    assert tasks[0]["uuid"] == parent
    assert sorted(t["uuid"] for t in tasks[1:]) == sorted(made[:5])
    stamps = [t["created_at"] for t in tasks]
    assert stamps == sorted(set(stamps))
    assert len((await client.get(f"/spaces/{other}")).json()["tasks"]) == 3


# --- The batching itself, on a database of its own -------------------------------------


@pytest.fixture
async def db(tmp_path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path}/batch.db")
    await database.migrate()
    yield database
    await database.close()


def space(name: str) -> queries.NewSpace:
    return queries.NewSpace(str(uuid.uuid4()), name, None)


async def stored_titles(db: Database) -> list[str]:
    return sorted(row[0] for row in await db.fetch("SELECT title FROM spaces", ()))


class Gated:
    """A batch writer that inserts spaces, and whose first batch waits for `release`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.batches: list[list[str]] = []

    async def __call__(self, conn: Any, batch: Any) -> list[str]:
        self.batches.append([s.title for s in batch])
        if len(self.batches) == 1:
            self.started.set()
            await self.release.wait()
        await queries.insert_spaces(conn, batch, 0)
        return [s.title for s in batch]


async def test_a_create_cancelled_while_queued_is_not_written(db):
    writer = Gated()
    commit = GroupCommit(db.write, writer)
    first = asyncio.create_task(commit.submit(space("first")))
    await writer.started.wait()
    queued = [asyncio.create_task(commit.submit(space(name))) for name in ("a", "b", "c")]
    await until(lambda: commit.waiting == 3, "the queue")
    queued[1].cancel()
    writer.release.set()
    assert await first == "first"
    assert [await queued[0], await queued[2]] == ["a", "c"]
    assert queued[1].cancelled()
    assert writer.batches == [["first"], ["a", "c"]]
    assert await stored_titles(db) == ["a", "c", "first"]


async def test_a_create_cancelled_during_its_batch_leaves_the_others_whole(db):
    writer = Gated()
    forgotten: list[list[str]] = []

    @contextlib.asynccontextmanager
    async def begin() -> AsyncIterator[Any]:
        """A transaction that, like a unit of work, tells what its batch wrote as it ends."""
        try:
            async with db.write() as st:
                yield st
        finally:
            forgotten.append(writer.batches[-1])

    commit = GroupCommit(begin, writer)
    first = asyncio.create_task(commit.submit(space("first")))
    await writer.started.wait()
    queued = [asyncio.create_task(commit.submit(space(name))) for name in ("a", "b")]
    await until(lambda: commit.waiting == 2, "the queue")
    first.cancel()
    writer.release.set()
    assert await asyncio.gather(*queued) == ["a", "b"]
    assert first.cancelled()
    # Written all the same (it was in a batch under way), and forgotten after each batch.
    assert await stored_titles(db) == ["a", "b", "first"]
    assert forgotten == [["first"], ["a", "b"]]


async def test_a_database_error_fails_every_create_of_its_batch(db):
    writer = Gated()
    failed = [False]

    async def failing(conn: Any, batch: Any) -> list[str]:
        if len(writer.batches) == 1 and not failed[0]:
            failed[0] = True
            raise OperationalError("INSERT", {}, Exception("disk I/O error"))
        return await writer(conn, batch)

    commit = GroupCommit(db.write, failing)
    first = asyncio.create_task(commit.submit(space("first")))
    await writer.started.wait()
    queued = [asyncio.create_task(commit.submit(space(name))) for name in ("a", "b")]
    await until(lambda: commit.waiting == 2, "the queue")
    writer.release.set()
    assert await first == "first"
    for task in queued:
        with pytest.raises(OperationalError):
            await task
    assert await commit.submit(space("after")) == "after"
    assert await stored_titles(db) == ["after", "first"]


async def test_a_create_the_database_refuses_fails_alone(db):
    writer = Gated()
    writer.release.set()
    taken = space("taken")
    await GroupCommit(db.write, writer).submit(taken)
    gated = Gated()
    commit = GroupCommit(db.write, gated)
    first = asyncio.create_task(commit.submit(space("first")))
    await gated.started.wait()
    duplicate = queries.NewSpace(taken.uuid, "duplicate", None)
    queued = [
        asyncio.create_task(commit.submit(item)) for item in (space("a"), duplicate, space("b"))
    ]
    await until(lambda: commit.waiting == 3, "the queue")
    gated.release.set()
    await first
    assert [await queued[0], await queued[2]] == ["a", "b"]
    with pytest.raises(Exception, match="UNIQUE"):
        await queued[1]
    # The batch failed as a whole, then each create went alone.
    assert gated.batches[1:] == [["a", "duplicate", "b"], ["a"], ["duplicate"], ["b"]]
    assert await stored_titles(db) == ["a", "b", "first", "taken"]


async def test_a_writer_cancelled_at_shutdown_fails_what_waits(db):
    writer = Gated()
    commit = GroupCommit(db.write, writer)
    first = asyncio.create_task(commit.submit(space("first")))
    await writer.started.wait()
    queued = asyncio.create_task(commit.submit(space("a")))
    await until(lambda: commit.waiting == 1, "the queue")
    commit._writer.cancel()  # what the end of the event loop does
    for task in (first, queued):
        with pytest.raises(DatabaseUnavailable):
            await task
    assert await stored_titles(db) == []


# --- Durability: a real server killed right after answering ---------------------------


async def create_all(base_url: str, count: int) -> tuple[str, list[str]]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as client:
        space_uuid = (await client.post("/spaces", json={})).json()["uuid"]
        responses = await asyncio.gather(
            *(
                client.post(f"/spaces/{space_uuid}/tasks", json={"title": str(i)})
                for i in range(count)
            )
        )
    assert [r.status_code for r in responses] == [201] * count
    return space_uuid, [r.json()["uuid"] for r in responses]


def test_every_answered_create_survives_a_kill(tmp_path):
    server = LiveServer(tmp_path, HEADWAY_RATE_LIMITS="false").start()
    try:
        space_uuid, made = asyncio.run(create_all(server.url, COUNT))
    finally:
        server.stop(signal.SIGKILL)  # no shutdown: only what was committed remains

    with server:  # again, on the same port and database file
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for task_uuid in made:
                assert client.get(f"/tasks/{task_uuid}").status_code == 200, task_uuid
            stored = client.get(f"/spaces/{space_uuid}").json()["tasks"]
        assert {t["uuid"] for t in stored} == set(made)
    assert "Traceback" not in server.errors()
