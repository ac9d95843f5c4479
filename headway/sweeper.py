"""The sweeper: the background job that keeps storage bounded. Each step writes the
spaces' noted activity (`service.activity`), forgets idempotency keys older than a day,
and, on one instance at a time (a lease in the database), deletes spaces idle for longer
than the retention, a small batch of tasks per transaction, so that SQLite's write lock
is never held for long and readers and reporters do not notice it."""

from __future__ import annotations

import asyncio
import logging
import uuid

from . import metrics
from .clock import Clock
from .dependencies import unavailable
from .service import Service
from .storage import channels, deletes

log = logging.getLogger("headway")

STEP_S = 60.0
LEASE_NAME = "sweeper"
# Idle spaces deleted per step, and tasks per transaction while deleting one.
SPACES_PER_STEP = 10
TASKS_PER_BATCH = 500


class Sweeper:
    """Retention: deletes spaces with no create, report or read for `retention_us`
    (None: keeps everything); and writes activity as it goes."""

    def __init__(
        self,
        service: Service,
        clock: Clock,
        retention_us: int | None,
        *,
        step_s: float = STEP_S,
        batch: int = TASKS_PER_BATCH,
    ) -> None:
        self.service = service
        self.clock = clock
        self.retention_us = retention_us
        self.step_s = step_s
        self.batch = batch
        self.holder = f"sweeper-{uuid.uuid4().hex[:12]}"

    async def run(self) -> None:
        """Step every `step_s` seconds until cancelled; a failed step is logged and
        counted, and the next comes all the same."""
        while True:
            await asyncio.sleep(self.step_s)
            try:
                await self.step()
            except Exception as exc:
                if unavailable(exc):
                    log.warning("sweeper: a dependency is unavailable (%s)", exc)
                else:
                    log.exception("sweeper: a step failed")
                    metrics.loop_failed("sweeper")

    async def step(self) -> int:
        """Write the activity noted here and forget idempotency keys older than a day (a
        bounded number of short deletes, on any instance: deleting twice harms nothing);
        then, if some spaces are idle and this instance holds the lease, delete up to
        SPACES_PER_STEP of them. Returns how many spaces."""
        db = self.service.db
        await self.service.activity.flush(db)
        forgotten = await self.service.keys.forget_expired()
        if forgotten:
            log.info("sweeper: forgot %d idempotency keys older than a day", forgotten)
        if self.retention_us is None:
            return 0
        now = self.clock.now_us()
        cutoff = now - self.retention_us
        idle = await db.fetch(
            "SELECT uuid FROM spaces WHERE active_at_us < ? ORDER BY active_at_us LIMIT ?",
            (cutoff, SPACES_PER_STEP),
        )
        if not idle:
            return 0  # nothing to do: no lease taken, nothing written
        async with db.write() as st:
            held = await channels.take_lease(
                st, LEASE_NAME, self.holder, now, now + round(self.step_s * 3 * 1_000_000)
            )
        if not held:
            return 0
        deleted = 0
        for (space_uuid,) in idle:
            if await self.delete_idle(space_uuid, cutoff):
                deleted += 1
        return deleted

    async def delete_idle(self, space_uuid: str, cutoff_us: int) -> bool:
        """Delete an idle space a batch of tasks at a time. It is first marked as being
        deleted (`active_at_us` -1, in the same conditional update that checks it is still
        idle), so that no activity noted meanwhile can leave it half deleted."""
        db, service = self.service.db, self.service
        async with db.write() as st:
            marked = await st.rows(
                "UPDATE spaces SET active_at_us = -1 WHERE uuid = ? AND active_at_us < ? "
                "RETURNING uuid",
                (space_uuid, cutoff_us),
            )
        if not marked:
            return False
        steps_left = True  # steps go first: none is ever left without its parent
        while True:
            gone: list[str] = []
            if steps_left:
                gone = await deletes.space_steps(db.fetch, space_uuid, self.batch)
                steps_left = len(gone) == self.batch
            if not steps_left:
                gone += await deletes.space_top_level(db.fetch, space_uuid, self.batch - len(gone))
            if len(gone) < self.batch:
                break  # the rest goes with the space, in one last short transaction
            async with db.write() as st:
                await deletes.delete_tasks(st, gone)
            metrics.deleted("retention", len(gone))
            await service.progress.delete(gone)
            await service.changes.deleted(space_uuid, gone)
        await service.deletes.space(space_uuid, reason="retention")
        log.info("sweeper: deleted a space idle since before the retention")
        return True
