"""Two instances on one PostgreSQL + Redis, each caching families checked by the family
versions in Redis: a change made on one is seen by the next report on the other."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import msgspec
import pytest
import redis.asyncio as redis

from headway.app import create_app
from headway.caches.families import VERSIONED_MAX_AGE_US
from headway.config import Settings
from headway.domain.clock import ManualClock
from headway.ops.redis_link import Coalesced
from headway.progress.redis import FAMILY_VERSION_TTL_S

from .conftest import BACKENDS, empty_backend, running

pytestmark = pytest.mark.skipif(
    "postgres" not in BACKENDS, reason="HEADWAY_TEST_BACKENDS excludes postgres"
)


class Instance:
    def __init__(self, app: Any, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client
        self.sql_reads = 0
        db = app.state.service.db
        db.fetch = self._counted(db.fetch)  # a family is read by `fetch`

    def _counted(self, read: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.sql_reads += 1
            return await read(*args, **kwargs)

        return counted

    async def put(self, task: str, **body: Any) -> dict[str, Any]:
        response = await self.client.put(f"/tasks/{task}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    async def create(self, space: str, **body: Any) -> str:
        response = await self.client.post(f"/spaces/{space}/tasks", json=body)
        assert response.status_code == 201, response.text
        return response.json()["uuid"]


@pytest.fixture
def pair_settings(shared_servers) -> Settings:
    postgres, redis_server = shared_servers
    return Settings(
        database_url=postgres.url, redis_url=redis_server.url, progress_ttl=60, run_worker=False
    )


@pytest.fixture
async def instances(
    pair_settings: Settings, clock: ManualClock
) -> AsyncIterator[tuple[Instance, Instance]]:
    one, two = create_app(pair_settings, clock), create_app(pair_settings, clock)
    async with running(one), running(two):
        await empty_backend(one, pair_settings)
        transports = [httpx.ASGITransport(app=app) for app in (one, two)]
        async with (
            httpx.AsyncClient(transport=transports[0], base_url="http://a.test") as a,
            httpx.AsyncClient(transport=transports[1], base_url="http://b.test") as b,
        ):
            yield Instance(one, a), Instance(two, b)


@pytest.fixture
def client(instances) -> httpx.AsyncClient:
    """The first instance's client: the one `space` makes its space with."""
    return instances[0].client


@pytest.fixture
async def redis_client(pair_settings: Settings) -> AsyncIterator[redis.Redis]:
    client = redis.Redis.from_url(pair_settings.redis_url)
    yield client
    await client.aclose()


async def completions(instance: Instance, task: str) -> int:
    async with instance.app.state.service.db.read() as fetch:  # a reader: not counted
        found = await fetch("SELECT count(*) FROM outbox WHERE task_uuid = ?", (task,))
    return found[0][0]


async def test_a_cached_report_reads_no_sql(instances, space):
    a, b = instances
    task = await a.create(space)
    await b.put(task, current=1, end=10)
    reads = b.sql_reads
    for n in range(2, 6):
        assert (await b.put(task, current=n, end=10))["progress"]["current"] == n
    assert b.sql_reads == reads


async def test_task_created_on_one_instance_is_reported_on_another_at_once(instances, space):
    a, b = instances
    task = await a.create(space)
    answer = await b.put(task, current=2, end=4)
    assert answer["progress"]["current"] == 2 and answer["finished_at"] is None


async def test_finish_on_one_instance_is_seen_by_the_next_report_on_another(instances, space):
    a, b = instances
    task = await a.create(space)
    await b.put(task, current=1, end=10)  # b caches the open task
    finished = await a.put(task, current=10, end=10)
    assert finished["finished_at"] is not None

    answer = await b.put(task, current=3, end=10)
    assert answer["finished_at"] == finished["finished_at"]
    assert answer["progress"]["ratio"] == 1
    assert await completions(a, task) == 1

    again = await b.put(task, current=10, end=10)  # finishing again records nothing
    assert again["finished_at"] == finished["finished_at"]
    assert await completions(a, task) == 1


async def test_child_created_on_one_instance_counts_in_the_next_parent_report(instances, space):
    a, b = instances
    parent = await a.create(space)
    await b.put(parent, current=5, end=9)  # b caches it childless
    await a.create(space, parent_uuid=parent)

    answer = await b.put(parent, current=7, end=9)
    assert answer["progress"]["aggregated"] is True
    assert (answer["progress"]["current"], answer["progress"]["end"]) == (0, 1)


async def test_a_stale_cached_family_is_not_finished_by_its_counts(instances, space):
    a, b = instances
    parent = await a.create(space)
    await b.put(parent, current=0, end=1)  # b caches it childless
    child = await a.create(space, parent_uuid=parent)

    answer = await b.put(parent, current=1, end=1)  # would finish a childless task
    assert answer["finished_at"] is None
    assert answer["progress"]["end"] == 1
    assert await completions(a, parent) == 0

    await b.put(child, current=1, end=1)
    parent_now = (await a.client.get(f"/tasks/{parent}")).json()
    assert parent_now["finished_at"] is None  # held open by its own reports
    assert (parent_now["progress"]["current"], parent_now["progress"]["end"]) == (1, 1)
    assert (await b.put(parent, done=True))["finished_at"] is not None
    assert await completions(a, parent) == 1


async def test_a_child_finished_elsewhere_updates_its_parent_cached_here(instances, space):
    a, b = instances
    parent = await a.create(space)
    children = [await a.create(space, parent_uuid=parent) for _ in range(2)]
    assert (await b.put(parent, values={"step": "x"}))["progress"]["current"] == 0

    await a.put(children[0], current=1, end=1)
    assert (await b.put(parent, values={"step": "y"}))["progress"]["current"] == 1

    await a.put(children[1], current=1, end=1)  # the parent's reports hold it open
    answer = await b.put(parent, values={"step": "z"})
    assert answer["finished_at"] is None
    assert answer["progress"]["current"] == 2
    answer = await b.put(parent, done=True)
    assert answer["finished_at"] is not None
    assert answer["progress"]["values"] == {"step": "z"}
    assert await completions(a, parent) == 1


async def test_version_keys_outlive_progress_and_correct_a_stale_cache(
    instances, space, redis_client, clock
):
    a, b = instances
    task = await a.create(space)
    await b.put(task, current=1, end=10)
    await a.put(task, current=10, end=10)

    key = f"headway:family:{task}"
    assert int(await redis_client.get(key)) >= 1
    ttl = await redis_client.ttl(key)
    assert 60 < FAMILY_VERSION_TTL_S - 5 <= ttl <= FAMILY_VERSION_TTL_S

    clock.advance(61)  # the progress expired; the version did not
    answer = await b.put(task, current=2, end=10)
    assert answer["finished_at"] is not None


async def test_a_lost_bump_is_seen_once_the_cached_family_is_too_old(
    instances, space, redis_client, clock
):
    a, b = instances
    parent = await a.create(space)
    await b.put(parent, current=1, end=9)  # b caches it childless, at version 0
    await a.create(space, parent_uuid=parent)
    await redis_client.delete(f"headway:family:{parent}")  # as if the bump was lost

    assert (await b.put(parent, current=2, end=9))["progress"]["end"] == 9  # stale, trusted
    clock.advance(us=VERSIONED_MAX_AGE_US)
    answer = await b.put(parent, current=3, end=9)
    assert answer["progress"]["aggregated"] is True and answer["progress"]["end"] == 1


async def test_a_family_cached_before_redis_lost_its_versions_is_read_again(
    instances, space, redis_client
):
    """Redis restarted empty (here: flushed) counts versions from 0 again; a family cached
    at a version read before is not trusted when the new counter comes back to it."""
    a, b = instances
    parent = await a.create(space)
    await b.create(space, parent_uuid=parent)  # the parent's version counter: 1
    assert (await a.put(parent, values={"step": "one"}))["progress"]["end"] == 1
    reads = a.sql_reads
    assert (await a.put(parent, values={"step": "two"}))["progress"]["end"] == 1
    assert a.sql_reads == reads  # a holds the family, at counter 1

    await redis_client.flushdb()
    await b.create(space, parent_uuid=parent)  # counted from 0 again: 1
    assert await redis_client.get(f"headway:family:{parent}") == b"1"

    answer = await a.put(parent, values={"step": "three"})
    assert (answer["progress"]["current"], answer["progress"]["end"]) == (0, 2)
    assert a.sql_reads > reads
    read = (await a.client.get(f"/tasks/{parent}")).json()
    assert read["progress"]["end"] == 2 and read["progress"]["values"] == {"step": "three"}


async def test_a_write_at_its_version_announces_the_change_in_the_same_call(shared_servers):
    from headway.domain.clock import SystemClock
    from headway.domain.tasks import Progress
    from headway.progress.redis import RedisProgressStore

    _, redis_server = shared_servers
    store = RedisProgressStore(redis_server.url, 60, SystemClock())
    listener = redis.Redis.from_url(redis_server.url)
    pubsub = listener.pubsub()
    try:
        await pubsub.subscribe("headway:changes:test")
        await pubsub.get_message(timeout=1)  # the subscription's confirmation
        progress = Progress(1, 2, msgspec.Raw(b"{}"), SystemClock().now_us())
        announce = ("headway:changes:test", "instance|task|t|")
        task = "7d7b1f0e-0000-4000-8000-000000000001"
        version = await store.family_version(task)
        assert await store.put_if_family(task, progress, "space", version, announce) is None
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
        assert message is not None and message["data"] == b"instance|task|t|"
        # A write refused for a stale version announces nothing.
        await store.bump_families(task)
        now = await store.put_if_family(task, progress, "space", version, announce)
        assert now is not None and now != version
        assert await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.3) is None
    finally:
        await pubsub.aclose()
        await listener.aclose()
        await store.close()


_ECHO_OR_FAIL = """
if KEYS[1] == 'bad' then
  return redis.error_reply('refused for this key alone')
end
return tonumber(ARGV[1]) * 2
"""


async def test_script_calls_of_one_turn_share_a_pipeline_each_with_its_own_result(
    redis_client,
):
    """Reports on Redis send their script calls together (see `redis_link.Coalesced`):
    every caller still gets its own answer, and one call's error stays its own."""
    calls = Coalesced(redis_client, _ECHO_OR_FAIL)
    keys = [["bad"] if n == 7 else [f"k{n}"] for n in range(20)]
    answers = await asyncio.gather(
        *(calls(keys=k, args=[n]) for n, k in enumerate(keys)), return_exceptions=True
    )
    for n, answer in enumerate(answers):
        if n == 7:
            assert isinstance(answer, redis.ResponseError)
            assert "refused for this key alone" in str(answer)
        else:
            assert answer == n * 2
    # Twenty calls at once took one connection: one pipeline, where calls of their own
    # would each have taken a connection of the (fresh) pool.
    pool = redis_client.connection_pool
    assert len(pool._available_connections) + len(pool._in_use_connections) == 1
    # A call after the others is a pipeline of its own, and gets its answer too.
    assert await calls(keys=["later"], args=[21]) == 42


async def test_a_failure_finished_on_one_instance_is_kept_on_the_other(instances, space):
    a, b = instances
    parent = await a.create(space, title="Deploy")
    step = await a.create(space, title="Run migrations", parent_uuid=parent)
    await b.put(step, current=1, end=4)  # b holds the family, and the space, cached
    await b.client.get(f"/spaces/{space}")
    await a.put(step, current=1, end=4, done=True, values={"error": "exit code 3"})

    answer = await b.put(step, current=2, end=4, values={"log": "again"})
    assert answer["finished_at"] is not None
    assert answer["progress"]["values"] == {"log": "again", "error": "exit code 3"}
    (listed,) = (await b.client.get(f"/spaces/{space}")).json()["tasks"]
    assert listed["finished_at"] is not None  # the parent finished with its last step
    assert listed["children"][0]["progress"]["values"] == answer["progress"]["values"]
    assert await completions(b, step) == 1
