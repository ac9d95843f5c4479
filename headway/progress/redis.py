"""Progress in Redis or Valkey: shared by every instance, expired by Redis itself."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import redis.asyncio
import redis.exceptions

from .. import metrics
from ..clock import Clock
from ..domain import Progress
from . import ProgressBudgetFull

# Failures that mean Redis is down or not ready: the service answers 503 for them.
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    # At maxmemory with noeviction (rate counters, progress): a full budget, not a bug.
    redis.exceptions.OutOfMemoryError,
)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Progress).decode


def connection_pool(url: str) -> redis.asyncio.BlockingConnectionPool:
    """Connections to Redis for one process. A burst of more requests than connections
    waits for a free one (up to 5 s, then 503) rather than failing at once."""
    return redis.asyncio.BlockingConnectionPool.from_url(
        url,
        max_connections=256,
        timeout=5.0,
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry_on_timeout=False,
        health_check_interval=30,
    )


class RedisProgressStore:
    """One key per task, `headway:progress:<uuid>`, holding the progress as compact JSON
    with a key TTL of `ttl` seconds set on every write, so Redis drops it after that
    much inactivity. Reads also compare `updated_at` with the clock, so that every
    instance agrees on expiry to the microsecond, whatever Redis's own timer says.
    """

    name = "redis"
    PREFIX = "headway:progress:"

    def __init__(self, url: str, ttl_seconds: int, clock: Clock) -> None:
        self._ttl_s = ttl_seconds
        self._ttl_us = ttl_seconds * 1_000_000
        self._clock = clock
        self._redis = redis.asyncio.Redis(connection_pool=connection_pool(url))

    def _live(self, raw: bytes | None) -> Progress | None:
        if raw is None:
            return None
        progress = _decode(raw)
        if progress.updated_at_us + self._ttl_us <= self._clock.now_us():
            return None
        return progress

    async def get(self, task_uuid: str) -> Progress | None:
        return self._live(await self._redis.get(self.PREFIX + task_uuid))

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        if not task_uuids:
            return []
        found: list[Progress | None] = []
        for start in range(0, len(task_uuids), 1000):
            keys = [self.PREFIX + uuid for uuid in task_uuids[start : start + 1000]]
            found.extend(self._live(raw) for raw in await self._redis.mget(keys))
        return found

    def admit(self, task_uuid: str, space_uuid: str, progress: Progress) -> None:
        """Redis bounds its own memory (`maxmemory` with `noeviction`): see `put`."""

    async def put(self, task_uuid: str, progress: Progress, space_uuid: str) -> None:
        try:
            await self._redis.set(self.PREFIX + task_uuid, _encode(progress), ex=self._ttl_s)
        except redis.exceptions.OutOfMemoryError:
            # Redis at its maxmemory with noeviction: the same refusal as a full budget.
            metrics.refused("redis_oom")
            raise ProgressBudgetFull("store") from None

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()
        await self._redis.connection_pool.disconnect()
