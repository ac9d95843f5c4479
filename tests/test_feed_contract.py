"""What every change feed does, run against each (`LocalFeed`, and `RedisFeed` on a real
Redis): a change reaches the listeners of its space only, an unsubscribed listener hears
nothing more, a closed feed stays quiet; and what a feed across instances does (Redis):
a change made on one instance reaches the others once, announced or not, and a lost
connection tells every watcher to start over."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as redis

from headway.coherence import redis_feed
from headway.coherence.feed import RESYNC, REVOKED, TASK, Change, ChangeFeed, LocalFeed
from headway.coherence.redis_feed import RedisFeed

from .conftest import needs_redis
from .protocols import assert_implements

WAIT_S = 5.0  # for what must arrive; nothing here waits for what must not
SPACE, OTHER_SPACE = "5a1e0000-0000-4000-8000-00000000000a", "5a1e0000-0000-4000-8000-00000000000b"
FEEDS = [pytest.param("local", id="local"), pytest.param("redis", id="redis", marks=needs_redis)]
SHARED_FEEDS = [pytest.param("redis", id="redis", marks=needs_redis)]

MakeFeed = Callable[[], Awaitable[ChangeFeed]]


def change(n: int, space: str = SPACE, parent: str | None = None) -> Change:
    return Change(TASK, space, f"7a5c0000-0000-4000-8000-{n:012d}", parent)


class Heard:
    """A listener that keeps what it hears, and waits for a change to arrive."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self._arrived = asyncio.Event()

    def __call__(self, change: Change) -> None:
        self.changes.append(change)
        self._arrived.set()

    async def until(self, expected: Change) -> list[Change]:
        """Everything heard so far, once `expected` has arrived."""
        async with asyncio.timeout(WAIT_S):
            while expected not in self.changes:
                self._arrived.clear()
                await self._arrived.wait()
        return self.changes


@contextlib.asynccontextmanager
async def feeds_of(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[MakeFeed]:
    """Feeds of `kind`, closed at the end: with Redis, each one an instance's of its own on
    the same Redis; in-process, one feed is all one service has."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    feeds: list[ChangeFeed] = []
    clients: list[redis.Redis] = []

    async def make() -> ChangeFeed:
        feed: ChangeFeed
        if kind == "local":
            feed = LocalFeed()
        else:
            clients.append(redis.Redis.from_url(url))
            feed = RedisFeed(clients[-1])
        feeds.append(feed)
        return feed

    try:
        yield make
    finally:
        for feed in feeds:
            await feed.close()
        for client in clients:
            await client.aclose()


@pytest.fixture(params=FEEDS)
async def feed(request) -> AsyncIterator[ChangeFeed]:
    async with feeds_of(request.param, request) as make:
        yield await make()


@pytest.fixture(params=SHARED_FEEDS)
async def make_shared_feed(request) -> AsyncIterator[MakeFeed]:
    async with feeds_of(request.param, request) as make:
        yield make


async def listen(feed: ChangeFeed, space: str) -> Heard:
    heard = Heard()
    feed.subscribe(space, heard)
    await feed.ready(space)
    return heard


# --- Every feed ----------------------------------------------------------------------------


async def test_the_feed_has_every_member_of_the_protocol(feed):
    assert_implements(feed, ChangeFeed)


async def test_a_change_reaches_every_listener_of_its_space_whole_and_in_order(feed):
    first, second = await listen(feed, SPACE), await listen(feed, SPACE)
    other = await listen(feed, OTHER_SPACE)
    changes = [change(1), change(2, parent=change(1).task_uuid), Change(REVOKED, SPACE, "s")]
    for each in changes:
        feed.publish(each)
    marker = change(3, OTHER_SPACE)
    feed.publish(marker)
    assert await first.until(changes[-1]) == changes
    assert await second.until(changes[-1]) == changes
    assert await other.until(marker) == [marker]  # nothing of the other space before it


async def test_an_unsubscribed_listener_hears_nothing_more(feed):
    gone, staying = Heard(), await listen(feed, SPACE)
    unsubscribe = feed.subscribe(SPACE, gone)
    await feed.ready(SPACE)
    feed.publish(change(1))
    unsubscribe()
    unsubscribe()  # a second time changes nothing
    feed.publish(change(2))
    assert await staying.until(change(2)) == [change(1), change(2)]
    assert gone.changes == [change(1)]


async def test_a_change_announced_with_a_write_still_reaches_this_feeds_listeners(feed):
    heard = await listen(feed, SPACE)
    announcement = feed.announcement(change(1))
    assert announcement is None or all(isinstance(part, str) for part in announcement)
    feed.publish(change(1), announced=announcement is not None)
    assert await heard.until(change(1)) == [change(1)]


async def test_a_closed_feed_takes_publishes_and_tells_nobody(feed):
    heard = await listen(feed, SPACE)
    await feed.close()
    feed.publish(change(1))
    assert heard.changes == []


# --- Feeds across instances ----------------------------------------------------------------


async def test_a_change_on_one_instance_reaches_the_others_listeners_of_its_space_once(
    make_shared_feed,
):
    one, other = await make_shared_feed(), await make_shared_feed()
    here = await listen(one, SPACE)
    there, elsewhere = await listen(other, SPACE), await listen(other, OTHER_SPACE)
    one.publish(change(1, parent="p"))
    one.publish(change(2, OTHER_SPACE))
    assert await there.until(change(1, parent="p")) == [change(1, parent="p")]
    assert await elsewhere.until(change(2, OTHER_SPACE)) == [change(2, OTHER_SPACE)]
    other.publish(change(3))  # after `one`'s own change, which it heard once, at once
    assert await here.until(change(3)) == [change(1, parent="p"), change(3)]


async def test_an_announced_change_is_not_published_again(make_shared_feed, redis_url):
    one, other = await make_shared_feed(), await make_shared_feed()
    there = await listen(other, SPACE)
    channel, message = one.announcement(change(1))
    writer = redis.Redis.from_url(redis_url)  # as the store's write publishes it
    try:
        await writer.publish(channel, message)
    finally:
        await writer.aclose()
    one.publish(change(1), announced=True)
    one.publish(change(2))
    assert await there.until(change(2)) == [change(1), change(2)]


async def test_an_instance_whose_last_listener_of_a_space_left_stops_listening_to_it(
    make_shared_feed, redis_url
):
    one, other = await make_shared_feed(), await make_shared_feed()
    gone, staying = Heard(), await listen(other, OTHER_SPACE)
    unsubscribe = other.subscribe(SPACE, gone)
    await other.ready(SPACE)
    channel = one.announcement(change(1))[0]
    admin = redis.Redis.from_url(redis_url)
    try:
        assert await admin.pubsub_numsub(channel) == [(channel.encode(), 1)]
        unsubscribe()
        async with asyncio.timeout(WAIT_S):  # the subscriber unsubscribes in its own time
            while await admin.pubsub_numsub(channel) != [(channel.encode(), 0)]:
                await asyncio.sleep(0.01)
    finally:
        await admin.aclose()
    one.publish(change(1))
    one.publish(change(2, OTHER_SPACE))
    assert await staying.until(change(2, OTHER_SPACE)) == [change(2, OTHER_SPACE)]
    assert gone.changes == []


async def test_a_lost_connection_tells_every_watcher_to_start_over(
    make_shared_feed, redis_url, monkeypatch
):
    monkeypatch.setattr(redis_feed, "RETRY_S", 0.01)
    one, other = await make_shared_feed(), await make_shared_feed()
    heard, elsewhere = await listen(other, SPACE), await listen(other, OTHER_SPACE)
    admin = redis.Redis.from_url(redis_url)
    try:
        assert await admin.client_kill_filter(_type="pubsub") >= 1  # every feed's subscriber
    finally:
        await admin.aclose()
    resync = Change(RESYNC, SPACE, "")
    assert await heard.until(resync) == [resync]
    assert await elsewhere.until(Change(RESYNC, OTHER_SPACE, "")) == [
        Change(RESYNC, OTHER_SPACE, "")
    ]
    # Changes reach it again, once its subscription is back (a publish that Redis ran
    # before the subscription is lost: published again until one arrives).
    async with asyncio.timeout(WAIT_S):
        while change(1) not in heard.changes:
            one.publish(change(1))
            await asyncio.sleep(0.01)


async def test_an_unexpected_error_in_either_loop_is_survived_and_watchers_start_over(
    make_shared_feed, monkeypatch, caplog
):
    """Neither loop of a feed across instances dies of an error it does not know: it is
    logged, this instance's watchers start over (they may have missed a change), and
    changes flow again at once."""
    monkeypatch.setattr(redis_feed, "RETRY_S", 0.01)
    one, other = await make_shared_feed(), await make_shared_feed()
    heard = await listen(other, SPACE)
    mine = await listen(one, SPACE)
    failing = {"_message": one, "_received": other}  # a publish's step, a receipt's
    for name, feed in failing.items():
        real = getattr(feed, name)
        calls: list[object] = []

        def once(*args: object, real=real, calls=calls, name=name) -> object:
            calls.append(args)
            if len(calls) == 1:
                raise ValueError(f"an unexpected error in {name}")
            return real(*args)

        monkeypatch.setattr(feed, name, once)
    one.publish(change(1))  # fails in one's publish loop: `mine` starts over
    assert Change(RESYNC, SPACE, "") in await mine.until(Change(RESYNC, SPACE, ""))
    async with asyncio.timeout(WAIT_S):  # fails once in other's subscribe loop, then flows
        while change(2) not in heard.changes:
            one.publish(change(2))
            await asyncio.sleep(0.01)
    assert Change(RESYNC, SPACE, "") in heard.changes
    assert "feed_publish failed" in caplog.text and "feed_subscribe failed" in caplog.text
    for feed in (one, other):
        assert not any(task.done() for task in feed.loops().values())
