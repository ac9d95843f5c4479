"""Dependencies going down and coming back: 503s with JSON meanwhile, recovery after,
nothing lost. Runs on private PostgreSQL and Redis servers that it stops and starts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from headway.app import create_app
from headway.config import Settings

from .conftest import BACKENDS, running
from .receiver import Receiver
from .servers import PostgresServer, RedisServer, postgres_and_redis

pytestmark = pytest.mark.skipif(
    "postgres" not in BACKENDS, reason="HEADWAY_TEST_BACKENDS excludes postgres"
)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[PostgresServer, RedisServer]]:
    """Servers of this module's own: its tests stop and start them (and crash
    PostgreSQL: its commits are durable)."""
    with postgres_and_redis(durable=True) as servers:
        yield servers


@pytest.fixture
async def client(servers, clock) -> AsyncIterator[httpx.AsyncClient]:
    postgres, redis_server = servers
    settings = Settings(
        database_url=postgres.url,
        redis_url=redis_server.url,
        webhook_allow_private=True,
        run_worker=True,
    )
    app = create_app(settings)
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as c:
            yield c


def assert_unavailable(response: httpx.Response) -> None:
    """The documented 503: a JSON error, when to try again, and every answer's headers."""
    assert response.status_code == 503, response.text
    assert isinstance(response.json()["error"], str)
    assert response.headers["retry-after"].isdigit()
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["access-control-allow-origin"] == "*"


async def timed(request) -> httpx.Response:
    started = time.monotonic()
    response = await request
    # A hang guard: each dependency's own timeout is a few seconds; a request that waited
    # on a dead one for ever is what this catches, not a slow machine.
    assert time.monotonic() - started < 20, "a request hung while a dependency was down"
    return response


async def test_redis_outage_gives_503_then_recovers(client, servers):
    _, redis_server = servers
    space = (await client.post("/spaces", json={})).json()["uuid"]
    task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    assert (await client.put(f"/tasks/{task}", json={"current": 1, "end": 4})).status_code == 200

    redis_server.stop()
    try:
        assert_unavailable(await timed(client.put(f"/tasks/{task}", json={"current": 2})))
        assert_unavailable(await timed(client.get(f"/tasks/{task}")))
        assert_unavailable(await timed(client.get(f"/tasks/{task}/report?current=2")))
        assert_unavailable(await timed(client.get(f"/spaces/{space}")))
        assert_unavailable(await timed(client.get(f"/spaces/{space}?limit=1")))
        assert_unavailable(await timed(client.get(f"/spaces/{space}/events")))
        up = await timed(client.get("/up"))
        assert up.status_code == 503
        assert up.json()["checks"]["progress_store"]["status"] == "down"
        assert up.json()["checks"]["database"]["status"] == "up"
    finally:
        redis_server.start()

    response = await client.put(f"/tasks/{task}", json={"current": 3, "end": 4})
    assert response.status_code == 200
    assert response.json()["progress"]["current"] == 3
    assert (await client.get("/up")).status_code == 200
    assert [t["uuid"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"]] == [task]


async def test_postgres_outage_gives_503_then_recovers_without_losing_events(client, servers):
    postgres, _ = servers
    receiver = Receiver().start()
    try:
        space = (await client.post("/spaces", json={})).json()["uuid"]
        await client.post(f"/spaces/{space}/webhooks", json={"url": receiver.url})
        task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]

        postgres.stop()
        try:
            assert_unavailable(await timed(client.post("/spaces", json={})))
            assert_unavailable(await timed(client.get(f"/spaces/{space}")))
            assert_unavailable(await timed(client.post(f"/spaces/{space}/tasks", json={})))
            assert_unavailable(await timed(client.put(f"/tasks/{task}", json={"done": True})))
            up = await timed(client.get("/up"))
            assert up.status_code == 503
            assert up.json()["checks"]["database"]["status"] == "down"
        finally:
            postgres.start()

        # The refused finish left nothing behind: the task is still open and finishes now.
        before = (await client.get(f"/tasks/{task}")).json()
        assert before["finished_at"] is None
        finished = await client.put(f"/tasks/{task}", json={"done": True})
        assert finished.status_code == 200
        assert (await client.get("/up")).status_code == 200
        for _ in range(100):
            if receiver.deliveries:
                break
            await asyncio.sleep(0.05)
        assert len(receiver.deliveries) == 1
        assert json.loads(receiver.deliveries[0].body)["data"]["uuid"] == task
    finally:
        receiver.stop()


async def test_first_read_after_a_database_restart_succeeds(servers):
    """Pooled connections are not pinged before use: a read that meets one the restart
    killed is tried once more on a new connection instead of failing."""
    postgres, redis_server = servers
    settings = Settings(database_url=postgres.url, redis_url=redis_server.url, run_worker=False)
    app = create_app(settings)
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as c:
            space = (await c.post("/spaces", json={})).json()["uuid"]
            task = (await c.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
            assert (await c.get(f"/tasks/{task}")).status_code == 200
            postgres.stop()
            postgres.start()
            assert (await c.get(f"/tasks/{task}")).status_code == 200
            assert (await c.put(f"/tasks/{task}", json={"current": 1})).status_code == 200
            assert (await c.get("/up")).status_code == 200


async def load(
    client: httpx.AsyncClient, space: str, tasks: list[str], stop: asyncio.Event | None = None
) -> list[int]:
    """Creates, reads and reports until `stop` (without one: ten rounds); each answer's
    status, in order."""
    statuses: list[int] = []
    n = 0
    while not stop.is_set() if stop is not None else n < 10:
        n += 1
        task = tasks[n % len(tasks)]
        for request in (
            client.post(f"/spaces/{space}/tasks", json={"parent_uuid": tasks[0]}),
            client.get(f"/spaces/{space}?limit=5"),
            client.get(f"/tasks/{task}"),
            client.put(f"/tasks/{task}", json={"current": n, "end": 10**9}),
        ):
            response = await timed(request)
            if response.status_code == 503:
                assert_unavailable(response)
            statuses.append(response.status_code)
    return statuses


async def until_up(client: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + 20
    while (await client.get("/up")).status_code != 200:
        assert time.monotonic() < deadline, "the service did not recover"


async def test_a_crash_restart_of_postgres_under_load_answers_503s_then_nothing_fails(
    client, servers
):
    postgres, _ = servers
    space = (await client.post("/spaces", json={})).json()["uuid"]
    tasks = [(await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"] for _ in "abc"]
    stop = asyncio.Event()
    loader = asyncio.create_task(load(client, space, tasks, stop))
    try:
        await asyncio.to_thread(postgres.restart, "immediate")
        await until_up(client)
    finally:
        stop.set()
        during = await loader
    assert set(during) <= {200, 201, 503}, during
    # Back: no request fails on a connection from before the restart.
    after = await load(client, space, tasks)
    assert set(after) == {200, 201}, after


async def test_after_redis_is_killed_and_comes_back_empty_nothing_fails_on_an_old_connection(
    client, servers
):
    _, redis_server = servers
    space = (await client.post("/spaces", json={})).json()["uuid"]
    parent = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    assert (await client.put(f"/tasks/{parent}", json={"values": {"a": 1}})).status_code == 200
    redis_server.kill()
    redis_server.start()
    await until_up(client)
    # The pooled connections died with it: each command is tried again on a new one.
    child = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
    assert child.status_code == 201
    report = await client.put(f"/tasks/{parent}", json={"values": {"b": 2}})
    assert report.status_code == 200
    assert [c["uuid"] for c in report.json()["children"]] == [child.json()["uuid"]]


async def test_a_create_whose_commit_happened_answers_201_though_redis_is_down(client, servers):
    """A create needs only the database; telling other instances (a family version in
    Redis) comes after the commit, and its failure is no error of the create."""
    postgres, redis_server = servers
    settings = Settings(database_url=postgres.url, redis_url=redis_server.url, rate_limits=False)
    app = create_app(settings)  # rate limits off: their counters are in Redis too
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as c:
            space = (await c.post("/spaces", json={})).json()["uuid"]
            parent = (await c.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
            redis_server.stop()
            try:
                created = await timed(
                    c.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
                )
                assert created.status_code == 201, created.text
            finally:
                redis_server.start()
            await until_up(c)
            family = (await c.get(f"/tasks/{parent}")).json()
    assert [child["uuid"] for child in family["children"]] == [created.json()["uuid"]]
