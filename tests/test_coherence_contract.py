"""What every coherence does (`headway.coherence`), run against each: one process alone
(progress in its memory) and several instances sharing a real Redis. A write at the
version just read lands; a change announced by any instance reaches the feed's
listeners; and a family changed by another instance is never written to at the version
read before (there is no other instance alone)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import pytest

from headway.app import make_coherence
from headway.caches.families import FamilyCache
from headway.coherence import Coherence, Told
from headway.coherence.feed import DROPPED, PRUNED, RESYNC, REVOKED, TASK, Change, ChangeFeed
from headway.domain.clock import ManualClock
from headway.domain.tasks import Changed, Progress
from headway.progress import ProgressStore
from headway.progress.memory import MemoryProgressStore
from headway.progress.redis import RedisProgressStore

from .conftest import needs_redis
from .protocols import assert_implements

SPACE = "5a1e0000-0000-4000-8000-000000000000"
TTL_S = 60

# Announced last: once another instance heard it, it heard everything before.
END = Told(Changed.REVOKE, SPACE, "end")
END_CHANGE = Change(REVOKED, SPACE, "end")

Make = Callable[[], Awaitable[tuple[Coherence, ProgressStore]]]


def task(n: int) -> str:
    return f"7a5c0000-0000-4000-8000-{n:012d}"


@pytest.fixture(
    params=[
        pytest.param("alone", id="one-process"),
        pytest.param("shared", id="several-instances", marks=needs_redis),
    ]
)
async def make(request, clock: ManualClock) -> AsyncIterator[Make]:
    """Instances of the coherence under test, each with its progress store (one process
    alone: the same one each time; several: each an instance of its own on one Redis)."""
    made: list[tuple[Coherence, ProgressStore]] = []

    async def instance() -> tuple[Coherence, ProgressStore]:
        if request.param == "alone":
            if not made:
                store: ProgressStore = MemoryProgressStore(TTL_S, clock)
                made.append((make_coherence(store), store))
            return made[0]
        store = RedisProgressStore(request.getfixturevalue("redis_url"), TTL_S, clock)
        made.append((make_coherence(store), store))
        return made[-1]

    try:
        yield instance
    finally:
        for coherence, store in made:
            await coherence.close()
            await store.close()


def progress(clock: ManualClock, current: float = 1) -> Progress:
    return Progress(current, 10, msgspec.Raw(b"{}"), clock.now_us())


def report(n: int, parent: int | None = None) -> Told:
    return Told(Changed.REPORT, SPACE, task(n), task(parent) if parent is not None else None)


@contextlib.asynccontextmanager
async def listening(feed: ChangeFeed) -> AsyncIterator[list[Change]]:
    heard: list[Change] = []
    stop = feed.subscribe(SPACE, heard.append)
    await feed.ready(SPACE)
    try:
        yield heard
    finally:
        stop()


async def until(heard: list[Change], last: Change) -> list[Change]:
    """What was heard up to `last` (left out), once it arrived (within 2 s)."""
    for _ in range(400):
        if last in heard:
            return heard[: heard.index(last)]
        await asyncio.sleep(0.005)
    raise AssertionError(f"{last} never arrived; heard {heard}")


async def test_it_implements_the_protocol(make: Make):
    coherence, _ = await make()
    assert_implements(coherence, Coherence)
    assert_implements(coherence.feed, ChangeFeed)
    assert isinstance(coherence.family_cache(), FamilyCache)


async def test_a_write_at_the_version_just_read_lands(make: Make, clock):
    coherence, store = await make()
    version = await coherence.version(task(1))
    written = await coherence.put(report(1), progress(clock, 3), version, "c", False)
    assert written[0] is None
    found = await store.get(task(1))
    assert found is not None and found.current == 3


async def test_a_family_changed_elsewhere_is_not_written_at_its_old_version(make: Make, clock):
    one, store = await make()
    other, _ = await make()
    version = await one.version(task(1))
    await other.announce([Told(Changed.FINISH, SPACE, task(2), task(1))])  # a step of it
    current, announced = await one.put(report(1), progress(clock), version, "c", False)
    if other is one:
        # Alone: no other instance; this process's caches were told before the write.
        assert other is one and current is None
    else:
        assert current is not None and current != version and not announced
        assert await store.get(task(1)) is None  # nothing written
        assert current == await one.version(task(1))


async def test_a_space_dropped_elsewhere_fails_every_write_of_it(make: Make, clock):
    one, _ = await make()
    other, _ = await make()
    version = await one.version(task(1))
    await other.announce([Told(Changed.DROP, SPACE, "")])
    current, _ = await one.put(report(1), progress(clock), version, "c", False)
    assert (current is None) == (other is one)  # alone, nothing is dropped elsewhere


async def test_what_a_unit_changed_reaches_every_instances_listeners(make: Make):
    one, _ = await make()
    other, _ = await make()
    told = [
        Told(Changed.CREATE, SPACE, task(2), task(1)),
        Told(Changed.REVOKE, SPACE, "share"),
        Told(Changed.DELETE, SPACE, task(3)),
        Told(Changed.DELETE, SPACE, task(4)),  # one resync for both
        Told(Changed.PRUNE, SPACE, task(5), task(6)),
        Told(Changed.PRUNE, SPACE, task(7)),  # a step of a pruned task: nothing of its own
        Told(Changed.DROP, SPACE, ""),
    ]
    expected = [
        Change(TASK, SPACE, task(2), task(1)),
        Change(REVOKED, SPACE, "share"),
        Change(RESYNC, SPACE, ""),
        Change(PRUNED, SPACE, task(5), task(6)),
        Change(DROPPED, SPACE, ""),
    ]
    async with listening(one.feed) as here, listening(other.feed) as there:
        await one.announce(told)
        assert here == expected  # this instance's listeners: at once
        await one.announce([END])
        assert await until(there, END_CHANGE) == expected


async def test_a_report_announced_with_its_write_is_heard_once_everywhere(make: Make, clock):
    one, _ = await make()
    other, _ = await make()
    version = await one.version(task(1))
    async with listening(one.feed) as here, listening(other.feed) as there:
        _, announced = await one.put(report(1), progress(clock), version, "c", False)
        await one.announce([report(1)._replace(announced=announced)])
        expected = [Change(TASK, SPACE, task(1))]
        assert here == expected
        await one.announce([END])
        assert await until(there, END_CHANGE) == expected  # once, not twice


async def test_a_cache_it_makes_holds_a_family_at_the_version_it_was_read(make: Make, clock):
    from headway.domain.tasks import TaskRow

    coherence, _ = await make()
    cache = coherence.family_cache()
    row = TaskRow(task(1), SPACE, None, "t", None, 1)
    version = await coherence.version(task(1))
    cache.put_versioned((row, ()), version, clock.now_us(), cache.generation)
    assert cache.get_versioned(task(1), clock.now_us) == (row, (), version)
    cache.on_change(Changed.FINISH, SPACE, task(1), None)
    assert cache.get_versioned(task(1), clock.now_us) is None
