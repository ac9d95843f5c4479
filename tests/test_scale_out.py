"""Several real `headway serve` and `headway worker` processes on one PostgreSQL + Redis
behave as one service."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest
import redis.asyncio as redis

from .conftest import BACKENDS
from .live_server import HeadwayProcess, LiveServer, environment, headway_command
from .receiver import Receiver
from .test_events import WAIT_S, watching

pytestmark = pytest.mark.skipif(
    "postgres" not in BACKENDS, reason="HEADWAY_TEST_BACKENDS excludes postgres"
)

PROGRESS_TTL_S = 2


@dataclass(frozen=True)
class Cluster:
    urls: list[str]  # of the server instances
    database_url: str
    redis_url: str


@pytest.fixture(scope="module")
def cluster(shared_servers, tmp_path_factory) -> Iterator[Cluster]:
    """Two server instances and two workers on a database of their own."""
    postgres, redis_server = shared_servers
    postgres.create_database("scaleout")
    database_url = postgres.url.rsplit("/", 1)[0] + "/scaleout"
    redis_url = redis_server.url.rsplit("/", 1)[0] + "/3"
    env = {
        "HEADWAY_DATABASE_URL": database_url,
        "HEADWAY_REDIS_URL": redis_url,
        "HEADWAY_PROGRESS_TTL": str(PROGRESS_TTL_S),
        "HEADWAY_RUN_WORKER": "false",
        "HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true",
    }
    subprocess.run(
        [*headway_command(), "migrate"], env=environment(**env), check=True, capture_output=True
    )
    directory = tmp_path_factory.mktemp("cluster")
    servers = [LiveServer(directory, **env) for _ in range(2)]
    workers = [HeadwayProcess(directory, "worker", **env) for _ in range(2)]
    with contextlib.ExitStack() as running:
        for process in [*workers, *servers]:
            running.enter_context(process)
        yield Cluster([server.url for server in servers], database_url, redis_url)


@pytest.fixture(scope="module")
def cluster_without_redis(shared_servers, tmp_path_factory) -> Iterator[list[str]]:
    """Two server instances on one PostgreSQL and no Redis: nothing but the database
    carries news from one to the other (live progress is each one's own)."""
    postgres, _ = shared_servers
    postgres.create_database("scaleout_alone")
    env = {
        "HEADWAY_DATABASE_URL": postgres.url.rsplit("/", 1)[0] + "/scaleout_alone",
        "HEADWAY_RUN_WORKER": "false",
    }
    directory = tmp_path_factory.mktemp("cluster-alone")
    servers = [LiveServer(directory, **env) for _ in range(2)]
    with contextlib.ExitStack() as running:
        for server in servers:
            running.enter_context(server)
        yield [server.url for server in servers]


@pytest.fixture
async def clients(cluster) -> AsyncIterator[list[httpx.AsyncClient]]:
    clients = [httpx.AsyncClient(base_url=url, timeout=10) for url in cluster.urls]
    yield clients
    for client in clients:
        await client.aclose()


@pytest.fixture
async def cluster_redis(cluster) -> AsyncIterator[redis.Redis]:
    client = redis.Redis.from_url(cluster.redis_url)
    yield client
    await client.aclose()


async def until_every_delivery_is_settled(cluster: Cluster, timeout: float = 15.0) -> None:
    """Wait until the cluster's database holds no delivery: each is removed once its
    worker has its answer (or gives up), so every event queued by then has arrived."""
    conn = await asyncpg.connect(cluster.database_url)
    try:
        async with asyncio.timeout(timeout):
            while await conn.fetchval("SELECT count(*) FROM deliveries"):
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"deliveries still queued after {timeout} s")
    finally:
        await conn.close()


async def test_instances_share_spaces_tasks_and_progress(clients):
    one, two = clients
    space = (await one.post("/spaces", json={"title": "shared"})).json()["uuid"]
    task = (await two.post(f"/spaces/{space}/tasks", json={"title": "t"})).json()["uuid"]
    await one.put(f"/tasks/{task}", json={"current": 4, "end": 8, "values": {"log": "x"}})
    seen = (await two.get(f"/tasks/{task}")).json()
    assert seen["progress"]["current"] == 4
    assert seen["progress"]["values"] == {"log": "x"}
    assert (await two.get("/up")).json()["checks"]["progress_store"]["backend"] == "redis"


async def test_concurrent_creates_across_instances_page_exactly_once(clients):
    space = (await clients[0].post("/spaces", json={})).json()["uuid"]
    created = await asyncio.gather(
        *(
            client.post(f"/spaces/{space}/tasks", json={"title": str(n)})
            for n, client in zip(range(40), itertools.cycle(clients), strict=False)
        )
    )
    uuids = {r.json()["uuid"] for r in created}
    tasks = (await clients[1].get(f"/spaces/{space}")).json()["tasks"]
    stamps = [t["created_at"] for t in tasks]
    assert len(set(stamps)) == 40 and stamps == sorted(stamps)

    seen, before, turn = [], None, itertools.cycle(clients)
    while True:
        params = {"limit": 7} if before is None else {"limit": 7, "before": before}
        page = (await next(turn).get(f"/spaces/{space}", params=params)).json()["tasks"]
        if not page:
            break
        seen += [t["uuid"] for t in page]
        before = min(t["created_at"] for t in page)
    assert sorted(seen) == sorted(uuids) and len(seen) == 40


async def test_concurrent_completions_across_instances_give_one_event_each(cluster, clients):
    receiver = Receiver().start()
    try:
        space = (await clients[0].post("/spaces", json={})).json()["uuid"]
        await clients[1].post(f"/spaces/{space}/webhooks", json={"url": receiver.url})
        parent = (await clients[0].post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        children = [
            (
                await clients[n % 2].post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
            ).json()["uuid"]
            for n in range(5)
        ]
        answers = await asyncio.gather(
            *(
                client.put(f"/tasks/{child}", json={"current": 1, "end": 1})
                for child in children
                for client in clients
                for _ in range(5)
            )
        )
        assert {a.status_code for a in answers} == {200}
        finished = (await clients[1].get(f"/tasks/{parent}")).json()
        assert finished["finished_at"] is not None
        assert finished["progress"]["current"] == 5

        # Each event's deliveries are queued with it, in the transaction that finishes its
        # task: once none is left, a second event for a task would have arrived too. (Two
        # workers sending one delivery would need its claim's 60 s lease to lapse.)
        await until_every_delivery_is_settled(cluster)
        uuids = [json.loads(d.body)["data"]["uuid"] for d in receiver.deliveries]
        assert sorted(uuids) == sorted([*children, parent])
        assert len(set(receiver.ids())) == 6
    finally:
        receiver.stop()


async def test_expiry_is_shared_by_every_instance(clients, cluster_redis):
    space = (await clients[0].post("/spaces", json={})).json()["uuid"]
    task = (await clients[0].post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    await clients[0].put(f"/tasks/{task}", json={"current": 1})
    assert (await clients[1].get(f"/tasks/{task}")).json()["progress"]["current"] == 1
    # The progress is one key in Redis, which Redis drops after HEADWAY_PROGRESS_TTL.
    key = f"headway:progress:{task}"
    assert 0 < await cluster_redis.pttl(key) <= PROGRESS_TTL_S * 1000
    # Time passes for that key (its TTL shortened), rather than for the test: once Redis
    # has dropped it, no instance shows the progress any more.
    await cluster_redis.pexpire(key, 1)
    async with asyncio.timeout(5):
        while await cluster_redis.exists(key):
            await asyncio.sleep(0.005)
    for client in clients:
        assert (await client.get(f"/tasks/{task}")).json()["progress"] is None


async def test_family_changes_on_one_instance_reach_the_next_report_on_another(clients):
    one, two = clients
    space = (await one.post("/spaces", json={})).json()["uuid"]
    parent = (await one.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    await two.put(f"/tasks/{parent}", json={"current": 1, "end": 9})  # two caches it childless
    child = (await one.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})).json()["uuid"]
    seen = (await two.put(f"/tasks/{parent}", json={"current": 2, "end": 9})).json()
    assert seen["progress"]["aggregated"] is True and seen["progress"]["end"] == 1

    await two.put(f"/tasks/{child}", json={"current": 0, "end": 1})  # two caches the child
    finished = (await one.put(f"/tasks/{child}", json={"current": 1, "end": 1})).json()
    assert finished["finished_at"] is not None
    again = (await two.put(f"/tasks/{child}", json={"current": 0, "end": 1})).json()
    assert again["finished_at"] == finished["finished_at"]
    parent_seen = (await two.put(f"/tasks/{parent}", json={"values": {"a": 1}})).json()
    # Its step's finish, made on one, is seen on two; its own reports hold it open.
    assert (parent_seen["progress"]["current"], parent_seen["progress"]["end"]) == (1, 1)
    assert parent_seen["finished_at"] is None
    done = (await two.put(f"/tasks/{parent}", json={"done": True})).json()
    assert done["finished_at"] is not None


async def test_a_change_on_one_instance_reaches_streams_open_on_another(clients):
    a, b = clients
    space = (await a.post("/spaces", json={"title": "across"})).json()["uuid"]
    parent = (await a.post(f"/spaces/{space}/tasks", json={"title": "p"})).json()["uuid"]
    async with watching(b, f"/spaces/{space}/events") as watcher:
        await watcher.snapshot()
        child = (
            await a.post(f"/spaces/{space}/tasks", json={"title": "c", "parent_uuid": parent})
        ).json()["uuid"]
        created, aggregate = await watcher.task_events(2)
        assert (created["uuid"], aggregate["uuid"]) == (child, parent)
        # A report that finishes nothing is announced by its write to Redis itself.
        await a.put(f"/tasks/{child}", json={"current": 2, "end": 5})
        await a.put(f"/tasks/{child}", json={"current": 3, "end": 5})
        reported = await watcher.until(lambda task: task["uuid"] == child)
        if reported["progress"]["current"] == 2:
            reported = await watcher.until(lambda task: task["uuid"] == child)
        assert reported["progress"]["current"] == 3
        await a.put(f"/tasks/{child}", json={"current": 5, "end": 5})
        await watcher.until(lambda task: task["uuid"] == child and task["finished_at"])
        await watcher.until(lambda task: task["uuid"] == parent and task["finished_at"])


async def test_revoking_a_share_link_on_one_instance_ends_its_streams_on_another(clients):
    a, b = clients
    space = (await a.post("/spaces", json={"title": "shared"})).json()["uuid"]
    share = (await a.post(f"/spaces/{space}/shares", json={})).json()
    async with watching(b, share["url"] + "/events") as watcher:
        await watcher.snapshot()
        await a.delete(f"/spaces/{space}/shares/{share['uuid']}")
        await asyncio.wait_for(watcher.ended.wait(), WAIT_S)


async def test_a_space_read_on_one_instance_sees_every_create_and_finish_made_on_another(
    clients, cluster_redis
):
    """Each instance holds a small space's rows while the space's version in Redis is
    the one they were read at: a create or a finish through the other instance, or Redis
    losing its versions, shows in the very next read."""
    one, two = clients
    space = (await one.post("/spaces", json={})).json()["uuid"]

    async def titles_and_finished() -> list[tuple[str, bool]]:
        tasks = (await two.get(f"/spaces/{space}")).json()["tasks"]
        return [(task["title"], task["finished_at"] is not None) for task in tasks]

    assert await titles_and_finished() == []  # two holds the space, empty
    first = (await one.post(f"/spaces/{space}/tasks", json={"title": "a"})).json()["uuid"]
    assert await titles_and_finished() == [("a", False)]
    assert await titles_and_finished() == [("a", False)]  # held again
    await one.put(f"/tasks/{first}", json={"done": True})
    assert await titles_and_finished() == [("a", True)]
    parent = (await one.post(f"/spaces/{space}/tasks", json={"title": "p"})).json()["uuid"]
    body = {"title": "c", "parent_uuid": parent}
    await one.post(f"/spaces/{space}/tasks", json=body)
    tasks = (await two.get(f"/spaces/{space}")).json()["tasks"]
    assert [task["title"] for task in tasks] == ["a", "p"]
    assert [child["title"] for child in tasks[1]["children"]] == ["c"]
    # Redis loses every version (a restart, a flush): a counter back at 0 matches nothing
    # read before, so the create below shows, although its bump makes the counter 1 again.
    await cluster_redis.flushall()
    await one.post(f"/spaces/{space}/tasks", json={"title": "b"})
    await cluster_redis.flushall()
    await one.post(f"/spaces/{space}/tasks", json={"title": "d"})
    assert [title for title, _ in await titles_and_finished()] == ["a", "p", "b", "d"]


async def test_a_delete_on_one_instance_is_404_on_another_at_once(clients):
    """Instance two holds the space's rows and the families of its tasks; a delete made
    through instance one shows there in the very next read and report."""
    one, two = clients
    space = (await one.post("/spaces", json={})).json()["uuid"]
    parent = (await one.post(f"/spaces/{space}/tasks", json={"title": "p"})).json()["uuid"]
    body = {"title": "c", "parent_uuid": parent}
    child = (await one.post(f"/spaces/{space}/tasks", json=body)).json()["uuid"]
    kept = (await one.post(f"/spaces/{space}/tasks", json={"title": "k"})).json()["uuid"]
    for _ in range(2):  # two caches everything
        assert (await two.get(f"/spaces/{space}")).status_code == 200
        assert (await two.put(f"/tasks/{child}", json={"current": 1})).status_code == 200
        assert (await two.put(f"/tasks/{kept}", json={"current": 1})).status_code == 200
    assert (await one.delete(f"/tasks/{child}")).status_code == 204
    assert (await two.put(f"/tasks/{child}", json={"current": 2})).status_code == 404
    assert (await two.get(f"/tasks/{child}")).status_code == 404
    shown = (await two.get(f"/tasks/{parent}")).json()
    assert shown["children"] == []
    assert (await one.delete(f"/spaces/{space}")).status_code == 204
    assert (await two.get(f"/spaces/{space}")).status_code == 404
    assert (await two.put(f"/tasks/{kept}", json={"current": 2})).status_code == 404
    assert (await two.get(f"/tasks/{parent}")).status_code == 404


async def test_deleting_a_space_on_one_instance_ends_its_streams_on_another(clients):
    a, b = clients
    space = (await a.post("/spaces", json={"title": "doomed"})).json()["uuid"]
    share = (await a.post(f"/spaces/{space}/shares", json={})).json()
    async with (
        watching(b, f"/spaces/{space}/events") as owner,
        watching(b, share["url"] + "/events") as shared,
    ):
        await owner.snapshot()
        await shared.snapshot()
        assert (await a.delete(f"/spaces/{space}")).status_code == 204
        await asyncio.wait_for(owner.ended.wait(), WAIT_S)
        await asyncio.wait_for(shared.ended.wait(), WAIT_S)
    assert (await b.get(f"/spaces/{space}/events")).status_code == 404


async def test_a_share_links_task_ids_are_the_same_on_every_instance(clients):
    a, b = clients
    space = (await a.post("/spaces", json={})).json()["uuid"]
    await a.post(f"/spaces/{space}/tasks", json={"title": "t"})
    share = (await b.post(f"/spaces/{space}/shares", json={})).json()
    shown = [(await client.get(share["url"])).json() for client in clients]
    assert shown[0] == shown[1] and shown[0]["tasks"][0]["id"]


async def test_one_idempotency_key_sent_to_two_instances_at_once_creates_one_task(clients):
    space = (await clients[0].post("/spaces", json={})).json()["uuid"]
    answers = await asyncio.gather(
        *(
            client.post(
                f"/spaces/{space}/tasks", json={"title": "once"}, headers={"idempotency-key": "k"}
            )
            for client in clients * 6
        )
    )
    assert {answer.status_code for answer in answers} == {201}
    assert len({answer.json()["uuid"] for answer in answers}) == 1
    assert len((await clients[1].get(f"/spaces/{space}")).json()["tasks"]) == 1


async def test_without_redis_a_revocation_on_one_instance_ends_its_streams_on_another(
    cluster_without_redis,
):
    """Nothing carries the revocation from one instance to the other but the database,
    and the space stays quiet: the link's stream ends within a second all the same."""
    a, b = (httpx.AsyncClient(base_url=url, timeout=10) for url in cluster_without_redis)
    async with a, b:
        space = (await a.post("/spaces", json={"title": "quiet"})).json()["uuid"]
        await a.post(f"/spaces/{space}/tasks", json={"title": "t"})
        share = (await a.post(f"/spaces/{space}/shares", json={})).json()
        kept = (await a.post(f"/spaces/{space}/shares", json={})).json()
        async with (
            watching(b, share["url"] + "/events") as revoked,
            watching(b, kept["url"] + "/events") as other,
        ):
            for watcher in (revoked, other):
                await watcher.snapshot()
            # Each stream ends within a second of the answer to the change (that answer's
            # own time, on a busy machine, is not the other instance's to make up).
            assert (await a.delete(f"/spaces/{space}/shares/{share['uuid']}")).status_code == 204
            await asyncio.wait_for(revoked.ended.wait(), WAIT_S)
            assert not other.ended.is_set()
            assert (await a.delete(f"/spaces/{space}")).status_code == 204
            await asyncio.wait_for(other.ended.wait(), WAIT_S)
        assert (await b.get(share["url"] + "/events")).status_code == 404
