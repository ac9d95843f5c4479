"""What every progress store does, run against each (memory, and a real Redis): reads,
writes, expiry on the store's clock, budget admission, gauges; and what
every store shared by instances does with family versions (Redis)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import pytest
import redis.asyncio as redis

from headway.coherence import FamilyVersions
from headway.domain.clock import ManualClock
from headway.domain.estimates import ANCHORS
from headway.domain.tasks import Progress
from headway.progress import ClientAllowanceFull, Measurement, ProgressBudgetFull, ProgressStore
from headway.progress.memory import MemoryProgressStore
from headway.progress.redis import RedisProgressStore

from .conftest import needs_redis
from .protocols import assert_implements

TTL_S = 60
TTL_US = TTL_S * 1_000_000
SPACE = "5a1e0000-0000-4000-8000-000000000000"
OTHER_SPACE = "5a1e0000-0000-4000-8000-000000000001"
# What a scrape shows of each store (see headway.ops.metrics).
GAUGES = {
    "memory": {
        "headway_live_tasks",
        "headway_progress_bytes",
        "headway_progress_finished_bytes",
        "headway_progress_budget_bytes",
    },
    "redis": {"headway_redis_used_memory_bytes", "headway_redis_maxmemory_bytes"},
}

MakeStore = Callable[..., Awaitable[ProgressStore]]


def task(n: int) -> str:
    return f"7a5c0000-0000-4000-8000-{n:012d}"


def shown(progress: Progress | None) -> tuple[object, ...] | None:
    """What a read tells of progress (a store may hand out a subclass of Progress)."""
    if progress is None:
        return None
    return (progress.current, progress.end, bytes(progress.values), progress.updated_at_us)


STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", id="redis", marks=needs_redis),
]
SHARED_STORES = [pytest.param("redis", id="redis", marks=needs_redis)]


@pytest.fixture(params=STORES)
async def make_store(request, clock: ManualClock) -> AsyncIterator[MakeStore]:
    """Stores of the kind under test on `clock`, closed at the end; with Redis, each is an
    instance of its own on the same Redis."""
    async with stores_of(request.param, request, clock) as make:
        yield make


@pytest.fixture(params=SHARED_STORES)
async def make_shared_store(request, clock: ManualClock) -> AsyncIterator[MakeStore]:
    """As `make_store`, for the kinds of store several instances share."""
    async with stores_of(request.param, request, clock) as make:
        yield make


@contextlib.asynccontextmanager
async def stores_of(
    kind: str, request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[MakeStore]:
    made: list[ProgressStore] = []
    url = request.getfixturevalue("redis_url") if kind == "redis" else ""

    async def make(**budgets: int) -> ProgressStore:
        """A store; `budgets`: its `space_bytes` and `client_bytes`."""
        if kind == "memory":
            store: ProgressStore = MemoryProgressStore(TTL_S, clock, **budgets)
        else:
            store = RedisProgressStore(url, TTL_S, clock, **budgets)
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> ProgressStore:
    return await make_store()


@pytest.fixture
async def shared_store(make_shared_store: MakeStore) -> ProgressStore:
    return await make_shared_store()


def progress(clock: ManualClock, current: float | None = 1, **values: object) -> Progress:
    return Progress(current, 10, msgspec.Raw(msgspec.json.encode(values)), clock.now_us())


# --- Every store ---------------------------------------------------------------------------


async def test_the_store_has_every_member_of_the_protocol(store):
    assert_implements(store, ProgressStore)
    assert store.name in GAUGES


async def test_a_task_never_written_reads_none(store):
    assert await store.get(task(1)) is None
    assert await store.get_many([task(1), task(2)]) == [None, None]
    assert await store.get_many([]) == []


async def test_a_write_reads_back_whole_and_the_next_replaces_it(store, clock):
    first = Progress(2.5, None, msgspec.Raw(b'{"log":"\\u00e9t\xc3\xa9","n":1}'), clock.now_us())
    await store.put(task(1), first, SPACE)
    assert shown(await store.get(task(1))) == shown(first)

    clock.advance(1)
    second = progress(clock, 3, step="two")
    await store.put(task(1), second, SPACE)
    assert shown(await store.get(task(1))) == shown(second)
    assert [shown(p) for p in await store.get_many([task(1)])] == [shown(second)]


async def test_many_are_read_in_the_order_asked_however_many(store, clock):
    written = {0: task(1), 999: task(2), 1000: task(3), 1499: task(4)}  # Redis asks by 1000
    for index, uuid in written.items():
        await store.put(uuid, progress(clock, index), SPACE)
    asked = [written.get(index, task(10_000 + index)) for index in range(1500)]
    found = await store.get_many(asked)
    assert len(found) == 1500
    for index, answer in enumerate(found):
        if index in written:
            assert answer is not None and answer.current == index
        else:
            assert answer is None


async def test_progress_expires_its_ttl_after_its_last_write(store, clock):
    await store.put(task(1), progress(clock), SPACE)
    clock.advance(TTL_S / 2)
    await store.put(task(2), progress(clock), SPACE)
    clock.advance(us=TTL_US // 2 - 1)
    assert await store.get(task(1)) is not None  # a microsecond before its expiry
    clock.advance(us=1)
    assert await store.get(task(1)) is None
    found = await store.get_many([task(1), task(2)])
    assert found[0] is None and found[1] is not None


async def test_reads_never_extend_expiry_and_a_rewrite_does(store, clock):
    await store.put(task(1), progress(clock), SPACE)
    await store.put(task(2), progress(clock), SPACE)
    for _ in range(3):
        clock.advance(TTL_S / 4)
        assert await store.get(task(1)) is not None
        assert (await store.get_many([task(1)]))[0] is not None
    await store.put(task(2), progress(clock, 2), SPACE)
    clock.advance(TTL_S / 4)
    assert await store.get(task(1)) is None
    assert (await store.get(task(2))).current == 2


async def test_an_expired_task_written_again_reads_its_new_progress(store, clock):
    await store.put(task(1), progress(clock, 1), SPACE)
    clock.advance(TTL_S)
    assert await store.get(task(1)) is None
    await store.put(task(1), progress(clock, 2), SPACE)
    assert (await store.get(task(1))).current == 2


async def test_a_store_with_room_admits_new_tasks_and_rewrites(store, clock):
    store.admit(task(1), SPACE, progress(clock, note="x" * 1000))
    await store.put(task(1), progress(clock, note="x" * 1000), SPACE)
    store.admit(task(1), SPACE, progress(clock, note="x" * 2000))  # a rewrite that grows
    store.admit(task(2), SPACE, progress(clock))


async def write(store: ProgressStore, uuid: str, written: Progress, space: str, **how) -> None:
    """Admit, then put, as the service writes a report."""
    store.admit(uuid, space, written, **how)
    await store.put(uuid, written, space, **how)


async def test_no_space_holds_more_than_its_share_and_a_refusal_writes_nothing(make_store, clock):
    """A space's live progress stops at `space_bytes` (new tasks under 90% of it),
    refused with ProgressBudgetFull("space"): nothing written, other spaces go on, its
    tasks that hold progress report on; a finish, a delete and expiry give room back."""
    store = await make_store(space_bytes=20_000, client_bytes=10**9)
    note = "x" * 1000
    held = []
    for n in range(100):
        try:
            await write(store, task(n), progress(clock, note=note), SPACE)
        except ProgressBudgetFull as refusal:
            assert refusal.which == "space" and refusal.status == 503
            assert "This space" in refusal.message
            break
        held.append(task(n))
    else:
        pytest.fail("the space's share never refused a write")
    assert 8 <= len(held) <= 13  # 18,000 bytes of tasks counted at 1,400 to 1,600
    assert await store.get(task(len(held))) is None
    await write(store, task(200), progress(clock, note=note), OTHER_SPACE)
    await write(store, held[0], progress(clock, 2, note=note), SPACE)  # not growing: passes
    for n, free in enumerate(
        (
            lambda: write(store, held[1], progress(clock, note=note), SPACE, finished=True),
            lambda: store.delete([held[2]]),
            lambda: store.release([held[3]]),
        )
    ):
        await free()
        await write(store, task(400 + n), progress(clock, note=note), SPACE)
        with pytest.raises(ProgressBudgetFull):  # full again, with that task
            await write(store, task(300), progress(clock, note=note), SPACE)
    clock.advance(TTL_S)
    for n in held[:8]:
        await write(store, n, progress(clock, note=note), SPACE)


async def test_the_client_share_is_refused_before_the_space_share(make_store, clock):
    store = await make_store(space_bytes=10_000, client_bytes=10_000)
    for n in range(20):
        try:
            await write(store, task(n), progress(clock, note="x" * 1000), SPACE)
        except (ClientAllowanceFull, ProgressBudgetFull) as refusal:
            assert isinstance(refusal, ClientAllowanceFull)
            break
    else:
        pytest.fail("no share refused a write")


async def test_a_store_that_answers_pings(store):
    await store.ping()


async def test_gauges_are_the_same_series_before_and_after_writes(store, clock):
    before = await store.gauges()
    for n in range(3):
        await store.put(task(n), progress(clock, note="x" * 100), SPACE)
    after = await store.gauges()
    for measured in (before, after):
        assert all(isinstance(gauge, Measurement) for gauge in measured)
        assert {gauge.name for gauge in measured} == GAUGES[store.name]
        assert len(measured) == len(GAUGES[store.name])  # each once
        assert all(gauge.documentation and gauge.value >= 0 for gauge in measured)
    if store.name == "memory":
        held = {gauge.name: gauge.value for gauge in after}
        assert held["headway_live_tasks"] == 3
        assert 3 * 100 < held["headway_progress_bytes"] <= held["headway_progress_budget_bytes"]
    else:
        used = {gauge.name: gauge.value for gauge in after}["headway_redis_used_memory_bytes"]
        assert used > 0


# --- Stores shared by instances: family versions (see caches.families) --------------------


async def test_a_shared_store_keeps_family_versions(shared_store):
    assert_implements(shared_store, FamilyVersions)


async def test_a_family_version_moves_only_when_its_family_is_bumped(make_shared_store):
    one, other = await make_shared_store(), await make_shared_store()  # two instances
    version = await one.family_version(task(1))
    assert await other.family_version(task(1)) == version
    await other.bump_families(task(2), None)
    assert await one.family_version(task(1)) == version
    await other.bump_families(task(1), task(1), None)
    moved = await one.family_version(task(1))
    assert moved != version
    assert await other.family_version(task(1)) == moved


async def test_a_write_at_its_family_version_is_stored_and_a_stale_one_is_not(
    make_shared_store, clock
):
    one, other = await make_shared_store(), await make_shared_store()
    version = await one.family_version(task(1))
    assert await one.put_if_family(task(1), progress(clock, 1), SPACE, version) is None
    assert (await other.get(task(1))).current == 1

    await other.bump_families(task(1))
    now = await one.put_if_family(task(1), progress(clock, 2), SPACE, version)
    assert now is not None and now == await other.family_version(task(1))
    assert (await one.get(task(1))).current == 1  # nothing written
    assert await one.put_if_family(task(1), progress(clock, 3), SPACE, now) is None
    assert (await other.get(task(1))).current == 3


async def test_versions_read_before_the_store_lost_everything_never_match(
    shared_store, clock, redis_url
):
    """Redis restarted empty (here: flushed): counters start again from 0, and a version
    read before never matches one counted after, even at the same count."""
    await shared_store.bump_families(task(1))
    before = await shared_store.family_version(task(1))
    admin = redis.Redis.from_url(redis_url)
    try:
        await admin.flushdb()
    finally:
        await admin.aclose()
    await shared_store.bump_families(task(1))  # the same count as `before`
    assert await shared_store.put_if_family(task(1), progress(clock), SPACE, before) is not None
    assert await shared_store.get(task(1)) is None
    after = await shared_store.family_version(task(1))
    assert after != before
    assert await shared_store.put_if_family(task(1), progress(clock), SPACE, after) is None


# --- The memory store's budget -------------------------------------------------------------


@pytest.mark.parametrize("finished", [False, True])
async def test_the_memory_store_counts_what_its_entries_really_hold(clock, finished):
    """What the budget counts is what the process's memory holds for the entries: keys,
    structs, numbers, values, a live entry's track of reports (full: it has reported
    often) and a finished entry's place in its writer's order, as tracemalloc sees them,
    and a little more (allocator size classes and dict tables, which the process's RSS
    shows: see the bench's `memory_budget`); never less."""
    import gc
    import tracemalloc
    import uuid

    store = MemoryProgressStore(TTL_S, clock, budget_bytes=2**40)
    uuids = [str(uuid.uuid4()) for _ in range(5_000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for second in range(1 if finished else ANCHORS + 1):  # a track of every anchor
            for n, key in enumerate(uuids):
                values = msgspec.Raw(msgspec.json.encode({"log": f"step {n}"}))
                at_us = clock.now_us() + second * 1_000_000 + n
                written = Progress(n + second + 0.5, 5_000, values, at_us)
                await store.put(key, written, SPACE, client="192.0.2.1", finished=finished)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    held += sum(map(sys.getsizeof, uuids))  # the keys, made before (the store keeps them)
    assert 1.0 < store.bytes_used / held < 1.25, store.bytes_used / held


# --- Clients' and spaces' accounts in Redis (see progress.redis_allowances) ---------------


async def accounts(url: str) -> dict[tuple[str, str], tuple[int, dict[str, int]]]:
    """Every account Redis holds, by (client or space, pool): the bytes counted and the
    members (task uuid: bytes); and the keepers' ranking as ("keepers", name) entries."""
    admin = redis.Redis.from_url(url)
    try:
        found: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}
        for kind, pools in (("client", ("live", "kept")), ("space", ("live",))):
            async for key in admin.scan_iter(match=f"headway:{kind}:*"):
                owner = key.decode().split(":", 2)[2]
                counted = await admin.hgetall(key)
                for pool in pools:
                    members = await admin.zrange(
                        f"headway:{pool}:{owner}"
                        if kind == "client"
                        else f"headway:space-live:{owner}",
                        0,
                        -1,
                    )
                    sizes = dict(member.decode().split(" ") for member in members)
                    found[(owner, pool)] = (
                        int(counted.get(pool.encode(), 0)),
                        {uuid: int(size) for uuid, size in sizes.items()},
                    )
        for keeper, score in await admin.zrange("headway:keepers", 0, -1, withscores=True):
            found[(keeper.decode(), "keepers")] = (int(score), {})
        return found
    finally:
        await admin.aclose()


def assert_exact(found: dict[tuple[str, str], tuple[int, dict[str, int]]]) -> None:
    """Each account counts exactly the sum of its members, and the keepers' ranking
    holds each client keeping finished progress at exactly its bytes."""
    for (owner, pool), (counted, members) in found.items():
        if pool != "keepers":
            assert counted == sum(members.values()), (owner, pool)
    keepers = {owner: counted for (owner, pool), (counted, _) in found.items() if pool == "keepers"}
    kept = {owner: counted for (owner, pool), (counted, _) in found.items() if pool == "kept"}
    assert keepers == {owner: counted for owner, counted in kept.items() if counted}


@needs_redis
async def test_every_account_in_redis_counts_exactly_what_it_holds(redis_url, clock):
    """Rewrites (same size, another size), a write by another client, a finish, a
    release, a delete and an expiry each leave every account (each client's, each
    space's) equal to the sum of what it lists, listing exactly the unexpired progress
    it counts: a client's, live and finished; a space's, live only."""
    store = RedisProgressStore(redis_url, TTL_S, clock, client_bytes=10**9, space_bytes=10**9)
    try:
        one, other = "192.0.2.1", "2001:db8::/64"
        await store.put(task(1), progress(clock, 1, note="a"), SPACE, client=one)
        await store.put(task(1), progress(clock, 2, note="a"), SPACE, client=one)  # same size
        await store.put(task(1), progress(clock, 3, note="a" * 50), SPACE, client=one)
        await store.put(task(2), progress(clock, 1), SPACE, client=one)
        await store.put(task(2), progress(clock, 2), SPACE, client=other)  # moves to other
        await store.put(task(3), progress(clock, 1), OTHER_SPACE, client=one, finished=True)
        await store.put(task(4), progress(clock, 1), OTHER_SPACE, client=one)
        await store.put(task(7), progress(clock, 1), OTHER_SPACE, client=other)
        await store.put(
            task(7), progress(clock, 2, note="b"), OTHER_SPACE, client=other, finished=True
        )
        await store.release([task(4)])
        await store.delete([task(1)])
        clock.advance(TTL_S / 2)
        await store.put(task(5), progress(clock, 1), SPACE, client=one)
        found = await accounts(redis_url)
        assert_exact(found)
        wanted = {
            (one, "live"): {task(5)},
            (one, "kept"): {task(3), task(4)},
            (other, "live"): {task(2)},
            (other, "kept"): {task(7)},
            (SPACE, "live"): {task(2), task(5)},
            (OTHER_SPACE, "live"): set(),
        }
        for account, members in wanted.items():
            assert set(found.get(account, (0, {}))[1]) == members, account
        clock.advance(TTL_S / 2)  # 1, 2, 3, 4 and 7 expire; 5 does not
        await store.put(task(6), progress(clock, 1), SPACE, client=one)  # uncounts what expired
        found = await accounts(redis_url)
        assert_exact(found)
        assert set(found[(one, "live")][1]) == {task(5), task(6)}
        assert set(found[(SPACE, "live")][1]) == {task(5), task(6)}
        await store.admit_client(one)  # a client far within its share
    finally:
        await store.close()


async def test_instances_count_one_share_of_a_space(make_shared_store, clock):
    """Two instances on one Redis: a space's share is counted once for both."""
    instances = [await make_shared_store(space_bytes=20_000, client_bytes=10**9) for _ in "ab"]
    written = 0
    for n in range(100):
        try:
            await write(instances[n % 2], task(n), progress(clock, note="x" * 1000), SPACE)
        except ProgressBudgetFull as refusal:
            assert refusal.which == "space"
            break
        written += 1
    assert 8 <= written <= 13  # as on one instance (see above), not twice as many
    with pytest.raises(ProgressBudgetFull):
        await write(
            instances[(written + 1) % 2], task(200), progress(clock, note="x" * 1000), SPACE
        )


@needs_redis
async def test_a_full_redis_lets_finished_progress_give_way_largest_keeper_first(redis_url, clock):
    """At its maxmemory, Redis refuses writes; a write so refused first lets finished
    progress give way, from the client keeping the most, oldest first, as the memory
    store does with its budget, and is written. The accounts stay exact."""
    store = RedisProgressStore(redis_url, TTL_S, clock, client_bytes=10**9, space_bytes=10**9)
    admin = redis.Redis.from_url(redis_url)
    keeper, small, live = "192.0.2.1", "192.0.2.2", "192.0.2.3"
    note = "x" * 1000
    try:
        for n in range(320):
            client = keeper if n < 300 else small
            await store.put(
                task(n), progress(clock, note=note), SPACE, client=client, finished=True
            )
            clock.advance(us=1)
        assert await store.free_room() == -1  # no maxmemory: room enough
        used = (await admin.info("memory"))["used_memory"]
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", used + 64 * 1024)
        for n in range(1000, 1100):  # about 150 KB of live progress: more than is left
            await store.put(task(n), progress(clock, note=note), OTHER_SPACE, client=live)
    finally:
        await admin.config_set("maxmemory", 0)
        await admin.aclose()
    try:
        assert await store.get(task(0)) is None  # the largest keeper's oldest gave way
        assert await store.get(task(299)) is not None  # not all of it
        assert None not in await store.get_many([task(n) for n in range(300, 320)])
        assert None not in await store.get_many([task(n) for n in range(1000, 1100)])
        assert_exact(await accounts(redis_url))
    finally:
        await store.close()


@needs_redis
async def test_a_task_that_reports_on_stays_counted_however_long_ago_it_was_first_scored(
    redis_url, clock
):
    """A rewrite at the same size within half a TTL of the last leaves the accounts as
    they are (its score stays that of an earlier write); a trim that finds it by that
    older score sees it was written since, and scores it anew rather than uncount it."""
    store = RedisProgressStore(redis_url, TTL_S, clock, client_bytes=10**9, space_bytes=10**9)
    half_us = TTL_US // 2
    try:
        clock.advance(us=half_us - clock.now_us() % half_us + 1)  # a half has just begun
        await store.put(task(1), progress(clock, 1), SPACE, client="192.0.2.1")
        clock.advance(10)
        await store.put(task(1), progress(clock, 2), SPACE, client="192.0.2.1")  # same half
        clock.advance(TTL_S - 5)  # expired by its first write's time, not by its last
        await store.put(task(2), progress(clock, 1), SPACE, client="192.0.2.1")  # trims
        assert (await store.get(task(1))).current == 2
        found = await accounts(redis_url)
        assert_exact(found)
        for account in (("192.0.2.1", "live"), (SPACE, "live")):
            assert set(found[account][1]) == {task(1), task(2)}, account
        clock.advance(10)  # now it has expired
        await store.put(task(3), progress(clock, 1), SPACE, client="192.0.2.1")
        found = await accounts(redis_url)
        assert_exact(found)
        for account in (("192.0.2.1", "live"), (SPACE, "live")):
            assert set(found[account][1]) == {task(2), task(3)}, account
    finally:
        await store.close()
