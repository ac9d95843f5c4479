"""Each live task's track of reports, kept by every progress store beside its progress
(`estimates.follow`; in Redis, its Lua twin `progress.redis_tracks`): the same track
whatever the store, gone with the progress, counted in its budget."""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator

import msgspec
import pytest

from bench.estimator import STREAMS
from headway.domain.estimates import Track, follow, pack, unpack
from headway.domain.tasks import Progress
from headway.progress import ProgressStore
from headway.progress.memory import ENTRY_BYTES, TRACK_BYTES, MemoryProgressStore
from headway.progress.redis import RedisProgressStore
from headway.progress.redis_allowances import REDIS_ENTRY_BYTES, REDIS_TRACK_BYTES

from .conftest import needs_redis
from .test_progress_contract import SPACE, STORES, TTL_S, stores_of, task

NO_VALUES = msgspec.Raw(b"{}")

# Reports beside the replayed streams: (seconds since the first, current, end).
EDGES = {
    "the count goes down": [(0, 5, 10), (1, 6, 10), (2, 3, 10), (3, 4, 10)],
    "the end changes": [(0, 1, 10), (1, 2, 10), (2, 3, 20), (3, 4, 20)],
    "no end": [(0, 1, None), (5, 2, None), (10, 3, None), (10, 4, None)],
    "the clock goes back": [(0, 1, 10), (10, 2, 10), (5, 3, 10), (6, 4, 10)],
    "a report without a count": [(0, 1, 10), (1, None, 10), (2, 3, 10)],
    "a burst": [(0, 1, 9), *((1 + k / 1000, 2 + k, 9) for k in range(40)), (9, 50, 9)],
    "fractions": [(0, 0.5, 2.25), (1, 0.75, 2.25), (2.5, 1.125, 2.25), (4, 1.5, 2.25)],
    "a long silence": [*((k, k, 100) for k in range(8)), (200, 9, 100), (201, 10, 100)],
    "many anchors": [(k * 3, k, 1000) for k in range(60)],
}


def streams() -> dict[str, list[tuple[float, float | None, float | None]]]:
    found = dict(EDGES)
    for name, stream in STREAMS.items():
        found[name] = [(r.at_s, r.current, r.end) for r in stream(random.Random(7))]
    return found


STREAMED = streams()


@pytest.fixture(params=STORES)
async def store(request, clock) -> AsyncIterator[ProgressStore]:
    """A store of each kind (memory, and a real Redis), on `clock`."""
    async with stores_of(request.param, request, clock) as make:
        yield await make()


@pytest.mark.parametrize("name", list(STREAMED))
async def test_every_store_keeps_the_track_follow_makes(store, clock, name):
    """The same reports leave the same track in memory and in Redis's Lua, report after
    report (anchors, restarts, bursts, silences), to the microsecond."""
    start_us = clock.now_us()
    expected: Track | None = None
    last_us = start_us
    for at_s, current, end in STREAMED[name]:
        clock.advance(us=start_us + round(at_s * 1e6) - clock.now_us())  # back, too
        now_us = clock.now_us()
        if now_us - last_us >= TTL_S * 1_000_000:
            expected = None  # silent for longer than progress lives: it expired
        expected, last_us = follow(expected, now_us, current, end), now_us
        await store.put(task(1), Progress(current, end, NO_VALUES, now_us), SPACE)
        assert await store.track(task(1)) == expected, (name, at_s)


def test_a_track_packs_and_unpacks_whole():
    track = Track(1_790_000_000_000_000, 2.5, None, 3, (1_790_000_000_000_000, 2.5, 1, 3))
    assert unpack(pack(track)) == track
    zero_end = msgspec.structs.replace(track, end=0)
    assert unpack(pack(zero_end)).end == 0  # an end of 0 is not "none"
    assert pack(None) is None and unpack(None) is None


async def test_a_track_goes_with_its_progress(store, clock):
    """Expired, deleted, finished, or released by its parent's finish: no track left."""
    for n in range(1, 5):
        await store.put(task(n), Progress(1, 10, NO_VALUES, clock.now_us()), SPACE)
        clock.advance(1)
        await store.put(task(n), Progress(2, 10, NO_VALUES, clock.now_us()), SPACE)
        assert (await store.track(task(n))).reports == 2
    await store.delete([task(1)])
    await store.put(task(2), Progress(3, 10, NO_VALUES, clock.now_us()), SPACE, finished=True)
    await store.release([task(3)])
    assert [await store.track(task(n)) for n in (1, 2, 3)] == [None, None, None]
    assert (await store.track(task(4))).reports == 2
    clock.advance(TTL_S)
    assert await store.track(task(4)) is None
    # Written again after it expired: a track of its own, from that report.
    await store.put(task(4), Progress(7, 10, NO_VALUES, clock.now_us()), SPACE)
    assert (await store.track(task(4))).reports == 1


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=needs_redis)])
async def test_with_estimates_off_no_track_is_kept(request, clock, kind):
    url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    if kind == "memory":
        store = MemoryProgressStore(TTL_S, clock, tracks=False)
    else:
        store = RedisProgressStore(url, TTL_S, clock, tracks=False)
    try:
        for current in (1, 2, 3):
            await store.put(task(9), Progress(current, 10, NO_VALUES, clock.now_us()), SPACE)
            clock.advance(1)
        assert (await store.get(task(9))).current == 3
        assert await store.track(task(9)) is None
    finally:
        await store.close()


def test_a_track_is_counted_in_every_live_entry():
    """A live entry is charged for a full track whether it has one yet or not, so that a
    report never changes its charge; a finished one keeps none."""
    most = Track(2**52, 2**40 + 0.5, 2**50 + 0.5, 2**40, (2**52, 2**40 + 0.5) * 8)
    assert len(pack(most)) <= 183
    assert sys.getsizeof(pack(most)) <= TRACK_BYTES
    assert ENTRY_BYTES == 460 + TRACK_BYTES
    assert REDIS_ENTRY_BYTES == 450 + REDIS_TRACK_BYTES
