"""How a long-lived background task (the worker, the stall watch, the sweeper, the disk
watch) is stopped: cancelled, and waited for until it has ended.

A cancellation can be lost on Python 3.11: `asyncio.wait_for`, which redis-py uses to
send a command, returns the result of a call that completed as it was cancelled, and the
loop around it goes on to its next turn. So a task that has not ended is cancelled again
every `AGAIN_S` until it does: a shutdown never waits forever on one that missed it, and a
task's own cleanup (giving a lease up, handing attempts back) has that long.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("headway")

AGAIN_S = 2.0  # how long a cancelled task has to end before it is cancelled again


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
