"""Progress in Redis or Valkey: shared by every instance, expired by Redis itself."""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import redis.asyncio
import redis.exceptions

from ..domain.clock import Clock
from ..domain.estimates import Track, unpack
from ..domain.tasks import FamilyVersion, Progress
from ..ops import metrics
from ..ops.redis_link import Coalesced, close_client, connection_pool
from . import (
    NO_CLIENT,
    ROOM_SLACK,
    Measurement,
    ProgressBudgetFull,
    ProgressStore,
    T,
    redis_tracks,
    refuse,
)
from . import redis_allowances as allowances

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Progress).decode

# A family's version key outlives its last change by this long, far beyond any cached
# family's life (`caches.families.VERSIONED_MAX_AGE_US`): a key can expire, and read 0
# again, only once no instance still holds a family read before that key's last bump.
FAMILY_VERSION_TTL_S = 30 * 86_400

# A deleted space's mark (see `drop_space`) outlives any family of it read before the
# delete (`caches.families.VERSIONED_MAX_AGE_US`, an hour), by far.
DROPPED_TTL_S = 3 * 3600

# A family's version is "<epoch>:<counter>": the counter of its key (0 while there is
# none) and the epoch of the Redis that counted it, a random id kept beside the counters
# (`FAMILY_EPOCH`, without a TTL). Redis restarted empty or flushed has lost its epoch as
# well as its counters: the first script to run afterwards sets a new one (the caller's
# fresh candidate), so a counter that starts again from 0 never matches a version read
# before. Only that script writes the epoch: the others only read (and so still answer at
# maxmemory). KEYS: the epoch key, the family's version key. ARGV[1]: a candidate epoch.
_VERSION_NOW = """
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[1], epoch)
end
local version = epoch .. ':' .. (redis.call('GET', KEYS[2]) or '0')
"""
_FAMILY_VERSION = _VERSION_NOW + "return version"
# KEYS: version keys to move on; ARGV[1]: their TTL.
_BUMP = """
for _, key in ipairs(KEYS) do
  redis.call('INCR', key)
  redis.call('EXPIRE', key, ARGV[1])
end
return 0
"""
# KEYS: as above, then the progress key and its space's dropped mark. ARGV: a candidate
# epoch, the version the caller's family was read at, a write's arguments
# (`redis_allowances.write_args`), and optionally a channel and a message to publish once
# written (the change feed's, in the same round trip). Writes only if the family is
# unchanged, its space not dropped, and its client's and its space's allowances have room;
# returns nil once written, `redis_allowances.ALLOWANCE_FULL` or `SPACE_FULL` if an allowance had no
# room, DROPPED if the space was deleted, else the version now. Refused whole by a Redis
# at its maxmemory.
DROPPED = "dropped"
_PUT_IF_FAMILY = (
    allowances.GROWS
    + allowances.HELPERS
    + _VERSION_NOW
    + f"""
if version ~= ARGV[2] then
  return version
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return '{DROPPED}'
end
local refused = write_at(KEYS[3], 2)
if refused then
  return refused
end
if ARGV[{3 + allowances.WRITE_ARGS}] then
  redis.call('PUBLISH', ARGV[{3 + allowances.WRITE_ARGS}], ARGV[{4 + allowances.WRITE_ARGS}])
end
return false
"""
)


async def free_room(client: redis.asyncio.Redis) -> int:
    """Let finished progress give way in a Redis over its maxmemory, until it is
    `ROOM_SLACK` of it under (see `redis_allowances.GIVE_WAY`): the bytes that gave way, as
    counted (0: it is full and has no finished progress to give), or -1 if it has room
    already (another made it, or there is no maxmemory). Any instance, or the rate
    counters, call it when Redis refuses a write for want of memory."""
    return int(await client.eval(allowances.GIVE_WAY, 0, ROOM_SLACK))


# How many times a write refused by a full Redis lets finished progress give way and is
# tried again. One is the rule; Redis's own memory moves by tens of KB beside what is
# freed (a connection's buffers, its script cache's first use), which a tiny maxmemory
# may notice.
ROOM_TRIES = 3


async def with_room(
    client: redis.asyncio.Redis, attempt: Callable[[], Awaitable[T]], *, full: bool = False
) -> T:
    """`attempt()` (a write that a full Redis refuses whole, having written nothing;
    `full`: it was just refused so); while Redis refuses it for want of memory, let
    finished progress give way (`free_room`) and attempt it again, ROOM_TRIES times at
    most. Raises Redis's OutOfMemoryError if Redis stays full, or is full and has no
    finished progress to give."""
    for _ in range(ROOM_TRIES):
        if full and not await free_room(client):
            raise redis.exceptions.OutOfMemoryError("Redis is full: no finished progress to give")
        try:
            return await attempt()
        except redis.exceptions.OutOfMemoryError:
            full = True
    return await attempt()


def _number(number: int | float | None) -> str:
    """A count as the track's Lua reads it ('' for none): exact, as Python writes it."""
    return "" if number is None else repr(number)


class RedisProgressStore(ProgressStore):
    """One key per task, `headway:progress:<uuid>`, holding the progress as compact JSON
    (after a header naming whose allowance it counts against: see `progress.redis_allowances`)
    with a key TTL of `ttl` seconds set on every write, so Redis drops it after that
    much inactivity. Reads also compare `updated_at` with the clock, so that every
    instance agrees on expiry to the microsecond, whatever Redis's own timer says.

    No client address may hold more than `client_bytes` of live progress, and no space
    more than `space_bytes`, counted in Redis for every instance at once, atomically
    with each write (see `progress.redis_allowances`); the store as a whole is bounded by
    Redis's own `maxmemory` (with `noeviction`: a full Redis refuses). A write refused by
    a full Redis first lets finished progress give way (`free_room`), then is tried
    again: as in memory, finished progress is kept only while live progress has room.
    """

    name = "redis"
    remembers_since_us: int | None = None
    PREFIX = "headway:progress:"
    FAMILY_PREFIX = "headway:family:"
    FAMILY_EPOCH = "headway:family-epoch"
    DROPPED_PREFIX = "headway:dropped:"

    def __init__(
        self,
        url: str,
        ttl_seconds: int,
        clock: Clock,
        *,
        client_bytes: int = 128 * 1024**2,
        space_bytes: int = 64 * 1024**2,
        tracks: bool = True,
    ) -> None:
        self._ttl_s = ttl_seconds
        self._tracks = tracks  # keep each live task's track of reports (for estimates)
        self._ttl_us = ttl_seconds * 1_000_000
        self._clock = clock
        self.client_bytes = client_bytes
        self.space_bytes = space_bytes
        self._redis = redis.asyncio.Redis(connection_pool=connection_pool(url))
        self._family_version = Coalesced(self._redis, _FAMILY_VERSION)
        self._bump = Coalesced(self._redis, _BUMP)
        self._put_if_family = Coalesced(self._redis, _PUT_IF_FAMILY)
        self._put = Coalesced(self._redis, allowances.PUT)
        self._admit_client = Coalesced(self._redis, allowances.ADMIT_CLIENT)
        self._delete = Coalesced(self._redis, allowances.DELETE)
        self._release = Coalesced(self._redis, allowances.RELEASE)
        # Candidate epochs: this process's random prefix and a count, never the same
        # twice (and cheaper than a random id per call, on the path of every report).
        self._epochs = map(f"{secrets.token_hex(8)}.{{}}".format, itertools.count())

    def _live(self, raw: bytes | None) -> Progress | None:
        if raw is None:
            return None
        progress = _decode(allowances.value_json(raw))
        return progress if progress.updated_at_us + self._ttl_us > self._clock.now_us() else None

    async def get(self, task_uuid: str) -> Progress | None:
        return self._live(await self._redis.get(self.PREFIX + task_uuid))

    async def track(self, task_uuid: str) -> Track | None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self.PREFIX + task_uuid)
            pipe.get(redis_tracks.TRACK_PREFIX + task_uuid)
            raw, packed = await pipe.execute()
        return unpack(packed) if self._live(raw) is not None else None

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        found: list[Progress | None] = []
        for start in range(0, len(task_uuids), 1000):
            keys = [self.PREFIX + uuid for uuid in task_uuids[start : start + 1000]]
            found.extend(self._live(raw) for raw in await self._redis.mget(keys))
        return found

    async def delete(self, task_uuids: Sequence[str]) -> None:
        for start in range(0, len(task_uuids), 1000):
            keys = [self.PREFIX + uuid for uuid in task_uuids[start : start + 1000]]
            await self._delete(keys=keys, args=[])

    async def release(self, task_uuids: Sequence[str]) -> None:
        if task_uuids:
            keys = [self.PREFIX + uuid for uuid in task_uuids]
            less = allowances.REDIS_ENTRY_BYTES - allowances.REDIS_KEPT_ENTRY_BYTES
            await self._release(keys=keys, args=[less])

    async def admit_client(self, client: str) -> None:
        """Raises as Redis does when it cannot tell (down, or full): the service lets the
        create pass then (see `Service.tasks.create`)."""
        cutoff = self._clock.now_us() - self._ttl_us
        args = [allowances.account_name(client), cutoff, self.client_bytes]
        if await self._admit_client(keys=[], args=args):
            refuse("client")

    def _write_args(
        self, progress: Progress, space_uuid: str, client: str, finished: bool
    ) -> list[object]:
        return allowances.write_args(
            _encode(progress),
            self._ttl_s,
            self._clock.now_us(),
            client,
            finished,
            self.client_bytes,
            space_uuid,
            self.space_bytes,
            _number(progress.current) if self._tracks else redis_tracks.OFF,
            _number(progress.end),
        )

    async def put(
        self,
        task_uuid: str,
        progress: Progress,
        space_uuid: str,
        *,
        client: str = NO_CLIENT,
        finished: bool = False,
    ) -> None:
        args = self._write_args(progress, space_uuid, client, finished)
        refused = await self._write(self._put, [self.PREFIX + task_uuid], args)
        if refused is not None:
            refuse("space" if refused == allowances.SPACE_FULL else "client")

    async def _write(self, script: Coalesced, keys: list[str], args: list[object]) -> Any:
        """Run a write's `script`; one that a full Redis refused (it wrote nothing) runs
        again once finished progress gave way (see `with_room`). A Redis still full, with
        no finished progress to give, is a full budget: ProgressBudgetFull("store")."""
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):
            return await script(keys=keys, args=args)
        try:
            return await with_room(self._redis, lambda: script(keys=keys, args=args), full=True)
        except redis.exceptions.OutOfMemoryError:
            # Redis at its maxmemory with noeviction: the same refusal as a full budget.
            metrics.refused("redis_oom")
            raise ProgressBudgetFull("store") from None

    async def free_room(self) -> int:
        """The module's `free_room`, on this store's Redis."""
        return await free_room(self._redis)

    # --- Family versions: what lets each instance cache families (see caches.families) ---

    async def family_version(self, task_uuid: str) -> FamilyVersion:
        """Its counter is 0 until the family's first change."""
        keys = [self.FAMILY_EPOCH, self.FAMILY_PREFIX + task_uuid]
        version = await self._family_version(keys=keys, args=[next(self._epochs)])
        return FamilyVersion(version.decode())

    async def bump_families(self, *task_uuids: str | None) -> None:
        """Their counters move on; bumps made in the same turn of the event loop share one
        round trip (`Coalesced`)."""
        keys = [self.FAMILY_PREFIX + uuid for uuid in dict.fromkeys(task_uuids) if uuid]
        if keys:
            await self._bump(keys=keys, args=[FAMILY_VERSION_TTL_S])

    async def drop_space(self, space_uuid: str) -> None:
        """Mark the space deleted for `put_if_family` (for DROPPED_TTL_S): a family of it
        another instance still holds fails the check, is read again, and is not found.
        A Redis that lost the mark lost the families' epoch too, which fails them all."""
        await self._redis.set(self.DROPPED_PREFIX + space_uuid, 1, ex=DROPPED_TTL_S)

    async def put_if_family(
        self,
        task_uuid: str,
        progress: Progress,
        space_uuid: str,
        version: FamilyVersion,
        announce: tuple[str, str] | None = None,
        *,
        client: str = NO_CLIENT,
        finished: bool = False,
    ) -> FamilyVersion | None:
        """See `coherence.FamilyVersions`; the version of a dropped space is DROPPED.
        Raises ClientAllowanceFull or ProgressBudgetFull, having written nothing, if the
        client's or the space's allowance is full (or Redis is, with nothing to give way)."""
        keys = [
            self.FAMILY_EPOCH,
            self.FAMILY_PREFIX + task_uuid,
            self.PREFIX + task_uuid,
            self.DROPPED_PREFIX + space_uuid,
        ]
        args: list[object] = [next(self._epochs), version]
        args.extend(self._write_args(progress, space_uuid, client, finished))
        if announce is not None:
            args.extend(announce)
        current = await self._write(self._put_if_family, keys, args)
        if current is None:
            return None
        if current in (allowances.ALLOWANCE_FULL, allowances.SPACE_FULL):
            refuse("space" if current == allowances.SPACE_FULL else "client")
        return FamilyVersion(current.decode())

    async def retry_with_room(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Once finished progress gave way (`with_room`)."""
        return await with_room(self._redis, attempt, full=True)

    @property
    def client(self) -> redis.asyncio.Redis:
        """The store's Redis client (its pool), which the change feed shares (see
        `coherence.shared`)."""
        return self._redis

    async def gauges(self) -> list[Measurement]:
        """Redis's own memory figures, from INFO (one cheap command); the keys are not
        counted, which would not be cheap."""
        info = await self._redis.info("memory")
        return [
            Measurement(
                "headway_redis_used_memory_bytes", "Memory Redis uses.", info["used_memory"]
            ),
            Measurement(
                "headway_redis_maxmemory_bytes",
                "Redis's maxmemory (0: no limit).",
                info.get("maxmemory", 0),
            ),
        ]

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await close_client(self._redis)
