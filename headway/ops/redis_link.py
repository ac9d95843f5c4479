"""Headway's link to Redis (or Valkey): the connection pool every user of Redis shares the
rules of, the errors that mean Redis is unavailable (`dependencies` answers 503 for
them), and Lua scripts run by their digest, loaded again when Redis lost them, the calls
of one turn of the event loop sent together. What the scripts do is their user's
(`progress.redis`, `progress.redis_allowances`); the change feed subscribes over the
progress store's client (`coherence.redis_feed`)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import NoScriptError

# Redis unavailable rather than a fault: it refused the connection or dropped it, did not
# answer in time, is still loading its data, or is full (`maxmemory` under `noeviction`:
# a full budget, not a bug).
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.OutOfMemoryError,
)


def connection_pool(url: str) -> redis.asyncio.BlockingConnectionPool:
    """Connections to Redis for one process. A burst of more requests than connections
    waits for a free one (up to 5 s, then 503) rather than failing at once. A command
    holds its connection for one round trip, so a few dozen serve any burst; a burst
    that opened one each would wait on hundreds of handshakes (and a busy machine's
    event loop could time some of them out: 503s for nothing).

    A connection from before a restart of Redis fails its next command: the command is
    tried again on a new connection (twice, backing off up to a quarter second), so that
    once Redis answers again no request fails because of a connection it left behind.
    Every command Headway sends may run twice (a write of the same state, a counter one
    higher, a change announced twice): none does harm.

    A command has 2 s to be answered; opening a connection has 5: a Redis that is up
    answers a connect in a millisecond, and the time-out is counted by this process's
    event loop, which a machine short of CPU can hold up for a second or two (a healthy
    Redis is not turned into 503s for it); a host that drops the packets is still a 503
    within the pool's own 5 s wait."""
    return redis.asyncio.BlockingConnectionPool.from_url(
        url,
        max_connections=64,
        timeout=5.0,
        socket_timeout=2.0,
        socket_connect_timeout=5.0,
        # Not after a time-out: a Redis that hangs answers 503 within a few seconds.
        retry=Retry(
            ExponentialBackoff(cap=0.25, base=0.02),
            2,
            supported_errors=(redis.exceptions.ConnectionError,),
        ),
        health_check_interval=30,
    )


async def close_client(client: redis.asyncio.Redis) -> None:
    """Close a client and every connection of its pool."""
    await client.aclose()
    await client.connection_pool.disconnect()


class Coalesced:
    """Calls of one Lua script made in the same turn of the event loop, sent together
    in one pipeline: one connection taken from the pool, one write and one round trip
    for all of them, where each call alone costs all three (most of a report's CPU on
    Redis). Each caller still gets its own result, or its own error."""

    def __init__(self, client: redis.asyncio.Redis, script: str) -> None:
        self._redis = client
        self._script = script
        self._digest = hashlib.sha1(script.encode()).hexdigest()
        self._waiting: list[tuple[Sequence[str], Sequence[object], asyncio.Future[Any]]] = []

    async def __call__(self, keys: Sequence[str], args: Sequence[object]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._send)
        self._waiting.append((keys, args, future))
        return await future

    def _send(self) -> None:
        batch, self._waiting = self._waiting, []
        task = asyncio.ensure_future(self._run(batch))
        _sending.add(task)
        task.add_done_callback(_sending.discard)

    async def _run(self, batch: list[tuple[Sequence[str], Sequence[object], Any]]) -> None:
        try:
            results = await self._evalsha(batch)
            lost = [n for n, result in enumerate(results) if isinstance(result, NoScriptError)]
            if lost:  # Redis restarted and lost its scripts: load it, run those again
                await self._redis.script_load(self._script)
                again = await self._evalsha([batch[n] for n in lost])
                for n, result in zip(lost, again, strict=True):
                    results[n] = result
        except Exception as exc:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled: the loop is closing
            for _, _, future in batch:
                future.cancel()
            raise
        for (_, _, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _evalsha(self, batch: list[tuple[Sequence[str], Sequence[object], Any]]) -> list[Any]:
        """Run the script by its digest for each call of `batch` (EVALSHA: the script's
        text is sent, and hashed by Redis, only when Redis does not know it)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for keys, args, _ in batch:
                pipe.evalsha(self._digest, len(keys), *keys, *args)
            return list(await pipe.execute(raise_on_error=False))


# Pipelines under way, held until done (the event loop keeps only weak references).
_sending: set[asyncio.Task[None]] = set()
