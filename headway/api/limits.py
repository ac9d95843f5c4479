"""What one client may do: request rates per client address, decided in one place.

Every kind of request that creates or writes (spaces, tasks, webhooks, shares, channels,
reports), and reads, has its limits, written in the `limits` library's notation
("600/second;6000/minute") and parsed by it. A request passes only within all of them; a
refused one is answered 429 with `Retry-After` and changes nothing.

A write costs 1. A read is let through while its client's allowance is not spent (it
counts 1 then), and pays the rest of the tasks it renders as it goes (`charge`, see
`api.visitor`), into debt if need be: the client's next reads wait until the debt is
paid back, so a client reading a big space in a loop is refused after a few reads.

Where the counts live:
- Embedded default: token buckets in this process's memory, on the service's clock
  (tests move time instead of sleeping). A bucket of "600/second" holds 600 tokens and
  refills at 600 a second, so a burst of 600 passes at once. A check costs about a
  microsecond; the report path pays it on every report. Reads take their tokens a
  chunk at a time (up to 64, paid ahead), so most reads pay a dict lookup.
  (The `limits` library's own memory storage costs about ten times that.)
- With HEADWAY_REDIS_URL: the `limits` library's sliding-window counters in Redis,
  shared by every instance (one Redis round trip per limit). Reads count in its fixed
  windows instead: a sliding window refuses a cost that does not fit and counts nothing
  of it, so it cannot carry a debt, while a fixed window adds every cost to its count
  and refuses once the count is over the limit, until the window ends. A read's pages
  are paid for with a round trip each.

Rates are counted per client address (see `api.addresses`).
"""

from __future__ import annotations

import abc
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from limits import RateLimitItem, parse_many

from ..config import RATED, Settings
from ..domain.clock import Clock, SystemClock
from ..domain.errors import TooManyRequests
from ..ops import metrics

if TYPE_CHECKING:
    from limits.aio.storage import Storage
    from limits.aio.strategies import RateLimiter as RateLimiterStrategy

Kind = Literal[
    "spaces", "tasks", "webhooks", "shares", "channels", "reports", "creates", "reads", "wheels"
]
KINDS: tuple[Kind, ...] = RATED  # type: ignore[assignment]  # config's one list of them
# The kinds that create something: each also counts against the daily cap on creates.
CREATES: frozenset[str] = frozenset({"spaces", "tasks", "webhooks", "shares", "channels"})

_WHAT = {
    "spaces": "spaces created",
    "tasks": "tasks created (and /mcp requests)",
    "webhooks": "webhooks registered",
    "shares": "share links created",
    "channels": "channels registered or tested",
    "reports": "reports",
    "creates": "creates (of every kind)",
    "reads": "tasks read",
    "wheels": "client wheels downloaded",
}

# How a count that a full Redis refused is tried again once finished progress gave way
# there (see `RedisProgressStore.retry_with_room`): the counters share the progress
# store's Redis, and its memory.
Room = Callable[[Callable[[], Awaitable[float]]], Awaitable[float]]


class RateLimiter(abc.ABC):
    """Decides whether a client address may do one more thing of a kind, now: the
    limits and the refusal, with the counts where `rate_limiter` put them (this
    process's `MemoryRates`, or Redis's `SharedRates`)."""

    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.rate_limits
        self._limits: dict[str, list[RateLimitItem]] = {
            kind: parse_many(getattr(settings, f"rate_{kind}")) for kind in KINDS
        }

    def counted_here(self, kind: Kind, address: str) -> bool:
        """`check` without an await, where the counts are in this process (rates on):
        True once counted (TooManyRequests if over a limit); False where they are not,
        for `check` to count. The hottest paths (task reads, reports) call it first: a
        coroutine would cost about as much again as the count."""
        return False

    @abc.abstractmethod
    async def check(self, kind: Kind, address: str) -> None:
        """Count one `kind` for `address` (a create also against the daily cap on creates);
        raise TooManyRequests if it is over a limit."""

    @abc.abstractmethod
    async def charge(self, kind: Kind, address: str, cost: int) -> None:
        """Count `cost` more `kind` for `address`, refusing nothing: what a request let
        through by `check` turned out to cost beyond the 1 it counted there (a read: the
        tasks it rendered). An overdrawn client's next requests are refused until the
        debt is paid back (at most one bucket's worth in memory, the rest of the window's
        in Redis)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Let go of what the counts hold (a connection pool)."""

    def _refusal(self, kind: Kind, wait_s: float) -> TooManyRequests:
        metrics.refused(f"rate_{kind}")
        retry = max(1, math.ceil(wait_s))
        return TooManyRequests(
            f"Too many {_WHAT[kind]} from your address (limits: "
            f"{'; '.join(str(item) for item in self._limits[kind])}); retry in {retry} s.",
            headers={"retry-after": str(retry)},
        )


def rate_limiter(
    settings: Settings, clock: Clock | None = None, room: Room | None = None
) -> RateLimiter:
    """The rates the settings ask for: counted in Redis, shared by every instance, when
    HEADWAY_REDIS_URL is set and rates are on; else in this process, on `clock` (the
    system's unless given). `room`: see `Room` (None: a full Redis refuses the count)."""
    if settings.redis_url is not None and settings.rate_limits:
        return SharedRates(settings, settings.redis_url, room)
    return MemoryRates(settings, clock or SystemClock())


class MemoryRates(RateLimiter):
    """Rates counted in this process's memory: token buckets (`TokenBuckets`) on the
    service's clock."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        super().__init__(settings)
        longest_s = max(item.get_expiry() for items in self._limits.values() for item in items)
        self._buckets = TokenBuckets(clock, longest_s)
        # Reads are taken from their buckets a chunk at a time (a thousandth of the
        # smallest limit, at most 64; 1 for small limits: exact): the reads a client has
        # paid for ahead then pass with a dict lookup (see `counted_here`).
        self._chunk = max(1, min(64, min(item.amount for item in self._limits["reads"]) // 1000))
        self._paid_reads: dict[str, int] = {}

    def counted_here(self, kind: Kind, address: str) -> bool:
        buckets = self._buckets
        if kind == "reads":
            paid = self._paid_reads.get(address)
            if paid:
                self._paid_reads[address] = paid - 1
                return True
            return self._read_chunk(buckets, address)
        if kind in CREATES:
            wait_s = buckets.take(("creates", address), self._limits["creates"])
            if wait_s > 0:
                raise self._refusal("creates", wait_s)
        wait_s = buckets.take((kind, address), self._limits[kind])
        if wait_s > 0:
            raise self._refusal(kind, wait_s)
        return True

    async def check(self, kind: Kind, address: str) -> None:
        if self.enabled:
            self.counted_here(kind, address)

    async def charge(self, kind: Kind, address: str, cost: int) -> None:
        if self.enabled and cost > 0:
            self._buckets.charge((kind, address), self._limits[kind], cost)

    async def close(self) -> None:
        """Nothing to let go: the buckets are this process's memory."""

    def _read_chunk(self, buckets: TokenBuckets, address: str) -> bool:
        """Take a chunk of reads from the client's buckets (while it is not in debt), one
        for this read and the rest paid ahead; 429 once the client's allowance is spent."""
        items = self._limits["reads"]
        wait_s = buckets.take(("reads", address), items)
        if wait_s > 0:
            raise self._refusal("reads", wait_s)
        if self._chunk > 1:
            buckets.charge(("reads", address), items, self._chunk - 1)
            if len(self._paid_reads) >= TokenBuckets.SWEEP_ABOVE:
                self._paid_reads.clear()  # what was paid ahead is forfeit, no more
            self._paid_reads[address] = self._chunk - 1
        return True


class TokenBuckets:
    """Token buckets in memory, one per (kind, address), each holding one level per limit.

    A level may go below zero (`charge`: a debt), down to minus its size. Idle buckets
    are dropped once they have refilled (a full bucket is the same as no bucket; from the
    deepest debt that takes two periods), whenever there are many of them, so memory
    follows the addresses active within twice the longest period, not every address ever
    seen; and never more than MOST are kept (about 250 bytes each): past that, those
    updated longest ago go, as if they had refilled (an address that many others followed
    has little left to count).
    """

    SWEEP_ABOVE = 10_000
    MOST = 100_000

    def __init__(self, clock: Clock, longest_s: int) -> None:
        self._now = clock.now_us
        self._idle_us = 2 * longest_s * 1_000_000  # then even the deepest debt is paid
        # key -> [tokens of each limit..., time of the last update in µs]
        self._state: dict[tuple[str, str], list[float]] = {}
        self._sweep_at = self.SWEEP_ABOVE
        # Each limit list's (size, tokens per µs), worked out once.
        self._specs: dict[int, tuple[tuple[float, float], ...]] = {}

    def take(self, key: tuple[str, str], items: list[RateLimitItem]) -> float:
        """Take one token from each limit's level; 0 if taken, else seconds to wait (until
        every level holds a token again)."""
        spec = self._specs.get(id(items)) or self._spec(items)
        now = self._now()
        state = self._state.get(key)
        if state is None:
            if len(self._state) >= self._sweep_at:
                self._sweep(now)
            state = self._state[key] = [*(size for size, _ in spec), now]
        elapsed_us = now - state[-1]
        state[-1] = now
        if len(spec) == 1:  # most kinds have one limit: no loops
            size, per_us = spec[0]
            level = state[0] + elapsed_us * per_us
            if level < 1:
                state[0] = level
                return (1 - level) / per_us / 1_000_000
            state[0] = (size if level > size else level) - 1
            return 0.0
        wait_us = 0.0
        for i, (size, per_us) in enumerate(spec):
            level = state[i] + elapsed_us * per_us
            if level > size:
                level = size
            state[i] = level
            if level < 1 and (1 - level) / per_us > wait_us:
                wait_us = (1 - level) / per_us
        if wait_us:
            return wait_us / 1_000_000
        for i in range(len(spec)):
            state[i] -= 1
        return 0.0

    def charge(self, key: tuple[str, str], items: list[RateLimitItem], cost: int) -> None:
        """Take `cost` tokens from each limit's level, refusing nothing: a level may go
        below zero, down to minus its size (a debt the next `take`s wait out)."""
        spec = self._specs.get(id(items)) or self._spec(items)
        now = self._now()
        state = self._state.get(key)
        if state is None:
            state = self._state[key] = [*(size for size, _ in spec), now]
        elapsed_us = now - state[-1]
        state[-1] = now
        for i, (size, per_us) in enumerate(spec):
            state[i] = max(min(state[i] + elapsed_us * per_us, size) - cost, -size)

    def _spec(self, items: list[RateLimitItem]) -> tuple[tuple[float, float], ...]:
        """Each limit's (size, tokens per µs), worked out once per limit list."""
        spec = self._specs[id(items)] = tuple(
            (float(item.amount), item.amount / (item.get_expiry() * 1_000_000)) for item in items
        )
        return spec

    def _sweep(self, now: int) -> None:
        idle_before = now - self._idle_us
        state = {k: v for k, v in self._state.items() if v[-1] > idle_before}
        if len(state) > self.MOST // 2:
            newest = sorted(state.items(), key=lambda item: item[1][-1])[-self.MOST // 2 :]
            state = dict(newest)
        self._state = state
        self._sweep_at = min(self.MOST, max(self.SWEEP_ABOVE, 2 * len(state)))

    def __len__(self) -> int:
        return len(self._state)


class SharedRates(RateLimiter):
    """Rates counted in Redis, shared by instances: the `limits` library's sliding
    windows, and fixed windows for the kinds that are charged after they pass (`OWING`)."""

    # Kinds whose requests pass while the window is not spent, then pay what they cost.
    # A Redis at its maxmemory cannot count them: they pass (the request itself writes
    # nothing, and would be served), rather than answer 503 for want of a counter.
    OWING: frozenset[str] = frozenset({"reads"})

    def __init__(self, settings: Settings, redis_url: str, room: Room | None = None) -> None:
        from limits.aio.storage import RedisStorage
        from limits.aio.strategies import FixedWindowRateLimiter, SlidingWindowCounterRateLimiter
        from redis.exceptions import OutOfMemoryError

        from ..ops.redis_link import connection_pool

        super().__init__(settings)
        url = "redis+" + redis_url if redis_url.startswith("unix://") else redis_url
        self._pool = connection_pool(redis_url)
        self._storage: Storage = RedisStorage(
            "async+" + url,
            implementation="redispy",
            key_prefix="headway:rate",
            connection_pool=self._pool,
        )
        self._strategy = SlidingWindowCounterRateLimiter(self._storage)
        # `hit(item, ..., cost=n)` adds n to the window's count whatever it was, and says
        # whether the count is still within the limit (`limits.aio.strategies`).
        self._owing = FixedWindowRateLimiter(self._storage)
        self._full = OutOfMemoryError
        self._room = room

    async def check(self, kind: Kind, address: str) -> None:
        if not self.enabled:
            return
        for counted in ("creates", kind) if kind in CREATES else (kind,):
            wait_s = await self.hit(counted, address, self._limits[counted])
            if wait_s > 0:
                raise self._refusal(counted, wait_s)

    async def hit(self, kind: str, address: str, items: list[RateLimitItem]) -> float:
        """Count one hit against each limit; 0 if within all, else seconds to wait. A
        Redis at its maxmemory first lets finished progress give way (as a write of
        progress would), then counts once more; still full, it raises."""
        if kind not in self.OWING:
            strategy = self._strategy
            try:
                return await self._hit(strategy, kind, address, items)
            except self._full:
                if self._room is None:
                    raise
                return await self._room(lambda: self._hit(strategy, kind, address, items))
        try:
            return await self._hit(self._owing, kind, address, items)
        except self._full:
            return 0.0

    @staticmethod
    async def _hit(
        strategy: RateLimiterStrategy, kind: str, address: str, items: list[RateLimitItem]
    ) -> float:
        for item in items:
            if not await strategy.hit(item, kind, address):
                stats = await strategy.get_window_stats(item, kind, address)
                return max(stats.reset_time - time.time(), 1.0)
        return 0.0

    async def charge(self, kind: Kind, address: str, cost: int) -> None:
        """Add `cost` to each of the kind's fixed windows, over its limit if need be."""
        if not self.enabled or cost <= 0:
            return
        assert kind in self.OWING, kind
        with contextlib.suppress(self._full):
            for item in self._limits[kind]:
                await self._owing.hit(item, kind, address, cost=cost)

    async def close(self) -> None:
        await self._pool.disconnect()
