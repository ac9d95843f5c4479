"""The change feed across instances, over Redis pub/sub: one channel per space, one
subscription per instance (not per watcher), and changes published in the background so
that a report never waits on them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

import redis.asyncio
import redis.exceptions

from ..ops import metrics
from ..ops.dependencies import unavailable
from .feed import RESYNC, Change, LocalFeed

log = logging.getLogger("headway")

CHANNEL_PREFIX = "headway:changes:"
# Changes waiting for their publish; beyond this (Redis down), the oldest are dropped and
# the watchers of every instance start over when it comes back.
MAX_WAITING = 100_000
# How often the subscriber looks at its queue of channels to (un)subscribe while it waits
# for messages.
POLL_S = 0.05
RETRY_S = 1.0


class RedisFeed(LocalFeed):
    """`LocalFeed`, plus Redis: a change published here reaches this process's listeners
    at once and the other instances' through their subscription to the space's channel.
    Messages carry the publishing instance, which skips its own."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        super().__init__()
        self._redis = client
        self._instance = secrets.token_hex(8)
        self._waiting: list[Change] = []
        self._published = asyncio.Event()
        self._requests: dict[str, bool] = {}  # channel -> subscribe (True) or not
        self._requested = asyncio.Event()
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._pubsub = client.pubsub()
        self._tasks = [
            asyncio.create_task(self._publish_loop(), name="headway-feed-publish"),
            asyncio.create_task(self._subscribe_loop(), name="headway-feed-subscribe"),
        ]
        self._down = False
        self._closed = False

    def publish(self, change: Change, *, announced: bool = False) -> None:
        super().publish(change)
        if announced:
            return
        if len(self._waiting) >= MAX_WAITING:
            del self._waiting[: MAX_WAITING // 2]
        self._waiting.append(change)
        self._published.set()

    def loops(self) -> dict[str, asyncio.Task[None]]:
        return dict(zip(("feed_publish", "feed_subscribe"), self._tasks, strict=True))

    async def ready(self, space_uuid: str) -> None:
        """Once Redis confirmed this instance's subscription to the space."""
        future = self._confirmed.get(CHANNEL_PREFIX + space_uuid)
        if future is not None:
            await asyncio.wait_for(asyncio.shield(future), 5.0)

    def _first_listener(self, space_uuid: str) -> None:
        channel = CHANNEL_PREFIX + space_uuid
        self._requests[channel] = True
        self._confirmed[channel] = asyncio.get_running_loop().create_future()
        self._requested.set()

    def _last_listener_gone(self, space_uuid: str) -> None:
        channel = CHANNEL_PREFIX + space_uuid
        self._requests[channel] = False
        future = self._confirmed.pop(channel, None)
        if future is not None and not future.done():
            future.cancel()
        self._requested.set()

    async def _publish_loop(self) -> None:
        # `_closed` is checked as well as cancellation: a cancellation that lands inside
        # the Redis client may be taken by it.
        while not self._closed:
            await self._published.wait()
            self._published.clear()
            changes, self._waiting = self._waiting, []
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for change in changes:
                        pipe.publish(CHANNEL_PREFIX + change.space_uuid, self._message(change))
                    await pipe.execute()
            except Exception as exc:  # never dies: the feed outlives any one failure
                self._failed("feed_publish", exc)
                await asyncio.sleep(RETRY_S)

    def announcement(self, change: Change) -> tuple[str, str]:
        return CHANNEL_PREFIX + change.space_uuid, self._message(change)

    def _message(self, change: Change) -> str:
        kind, _, task, parent = change
        return f"{self._instance}|{kind}|{task}|{parent or ''}"

    async def _subscribe_loop(self) -> None:
        while not self._closed:
            try:
                await self._apply_requests()
                if not self._pubsub.channels:
                    await self._requested.wait()
                    continue
                message = await self._pubsub.get_message(timeout=POLL_S)
                if self._down:
                    self._came_back()
                if message is not None:
                    self._received(message)
            except Exception as exc:  # never dies: the feed outlives any one failure
                self._failed("feed_subscribe", exc)
                await asyncio.sleep(RETRY_S)

    async def _apply_requests(self) -> None:
        self._requested.clear()
        requests, self._requests = self._requests, {}
        wanted = [channel for channel, on in requests.items() if on]
        unwanted = [channel for channel, on in requests.items() if not on]
        if wanted:
            await self._pubsub.subscribe(*wanted)
        if unwanted:
            await self._pubsub.unsubscribe(*unwanted)

    def _received(self, message: dict[str, object]) -> None:
        channel = _text(message.get("channel"))
        kind = message.get("type")
        if kind == "subscribe":
            future = self._confirmed.get(channel)
            if future is not None and not future.done():
                future.set_result(None)
            return
        if kind != "message":
            return
        instance, _, rest = _text(message.get("data")).partition("|")
        if instance == self._instance:
            return  # told to this process's listeners when published
        change_kind, _, rest = rest.partition("|")
        task, _, parent = rest.partition("|")
        space = channel.removeprefix(CHANNEL_PREFIX)
        LocalFeed.publish(self, Change(change_kind, space, task, parent or None))

    def _failed(self, loop: str, exc: Exception) -> None:
        """A loop's step failed: Redis unavailable (retried until it answers, then every
        watcher starts over), or anything else (logged; the watchers start over now)."""
        if unavailable(exc):
            if not self._down:
                log.warning("change feed: Redis unavailable (%s); retrying", type(exc).__name__)
                self._down = True
            return
        log.error("change feed: %s failed; its watchers start over", loop, exc_info=exc)
        metrics.loop_failed(loop)
        self._resync()

    def _came_back(self) -> None:
        """After a lost connection (resubscribed by redis-py): changes may have been lost,
        so every watcher here starts over."""
        self._down = False
        log.info("change feed: Redis is back")
        self._resync()

    def _resync(self) -> None:
        """Every watcher here starts over."""
        for space in list(self._listeners):
            LocalFeed.publish(self, Change(RESYNC, space, ""))

    async def close(self) -> None:
        self._closed = True
        self._published.set()
        self._requested.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.wait(self._tasks, timeout=2.0)
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            await self._pubsub.aclose()
        await super().close()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
