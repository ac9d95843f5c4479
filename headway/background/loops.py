"""How a long-lived background task (the worker, the stall watch, the live messages, the
sweeper, the disk watch) runs its looks (`repeat`, `survive`, `Parts`) and is stopped:
cancelled, and waited for until it has ended.

A cancellation can be lost on Python 3.11: `asyncio.wait_for`, which redis-py uses to
send a command, returns the result of a call that completed as it was cancelled, and the
loop around it goes on to its next turn. So a task that has not ended is cancelled again
every `AGAIN_S` until it does: a shutdown never waits forever on one that missed it, and a
task's own cleanup (giving a lease up, handing attempts back) has that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger("headway")

AGAIN_S = 2.0  # how long a cancelled task has to end before it is cancelled again
MAX_FAILING = 4096  # parts remembered as failing; beyond, all are forgotten

T = TypeVar("T")
S = TypeVar("S")


async def stop(*tasks: asyncio.Task[object] | None) -> None:
    """Cancel each of `tasks` (None: none) and return once all have ended; one that ended
    with an error has it logged."""
    pending = {task for task in tasks if task is not None}
    while pending:
        for task in pending:
            task.cancel()
        done, pending = await asyncio.wait(pending, timeout=AGAIN_S)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s ended with an error", task.get_name(), exc_info=task.exception())


async def survive(name: str, look: Callable[[], Awaitable[object]]) -> bool:
    """Run one look of the loop `name`; an error is logged (a dependency that is down, as
    a warning; anything else with its traceback, and counted), never raised, so that the
    next look comes all the same. False when it failed."""
    from ..ops import metrics
    from ..ops.dependencies import unavailable

    try:
        await look()
    except Exception as exc:
        if being_cancelled():
            raise  # a library turned the cancellation into an error
        if unavailable(exc):
            log.warning("%s: a dependency is unavailable (%s)", name, exc)
        else:
            log.exception("%s: a look failed", name)
            metrics.loop_failed(name)
        return False
    return True


async def repeat(
    name: str,
    look: Callable[[], Awaitable[object]],
    wait_s: Callable[[bool], float],
    at_stop: Callable[[], Awaitable[None]] | None = None,
    *,
    woken: asyncio.Event | None = None,
) -> None:
    """The loop `name` until cancelled: a `look` (as `survive` runs it), then `wait_s(it
    went well)` seconds of sleep, cut short when `woken` is set (it is cleared before each
    look, so that a wake-up during a look is not lost); once cancelled, `at_stop()` (give
    a lease back, hand sends back)."""
    woken = woken or asyncio.Event()
    try:
        while True:
            woken.clear()
            wait = wait_s(await survive(name, look))
            # asyncio.timeout, not wait_for: in 3.11, wait_for loses a cancellation that
            # arrives as the wake-up does, and the loop would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await woken.wait()
    finally:
        if at_stop is not None:
            await at_stop()


def being_cancelled() -> bool:
    """Whether the running task is being cancelled."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Parts:
    """The parts of a look (the spaces a watch looks at, the tasks it estimates): one that
    fails is skipped, so that it stops none of the others. Its error is logged once, with
    its traceback and the part's uuid masked, and counted; not again while it keeps
    failing (an attacker's space would fill the log at every look); every uuid in the
    traceback is masked too (an error's text may hold one). A dependency that is
    down is no part's fault: it is raised, and fails the whole look."""

    def __init__(self, name: str) -> None:
        self.name = name  # the loop's, as `survive` names it
        self._failing: set[str] = set()

    async def run(self, part: str, look: Callable[[], Awaitable[T]], skipped: S) -> T | S:
        """`look()`, or `skipped` if it failed; `part` names it, by a uuid."""
        from ..ops import metrics
        from ..ops.dependencies import unavailable
        from ..ops.logs import masked

        try:
            found = await look()
        except Exception as exc:
            if unavailable(exc):
                raise
            metrics.loop_failed(self.name)
            if part not in self._failing:
                if len(self._failing) >= MAX_FAILING:
                    self._failing.clear()
                self._failing.add(part)
                trace = masked("".join(traceback.format_exception(exc)).rstrip())
                log.error("%s: %s skipped, it failed\n%s", self.name, masked(part), trace)
            return skipped
        self._failing.discard(part)
        return found
