"""The sweeper: the background job that keeps storage bounded. Each step writes the
spaces' noted activity (`service.activity`), forgets idempotency keys older than a day,
deletes spaces idle for longer than the retention (on one instance at a time: a lease in
the database), and removes the rows of deleted spaces.

A space's delete (its owner's or retention's) only marks it deleted, in one short
transaction (see `storage.deletes`); its rows are removed here afterwards, a batch per
transaction, each batch sized so that its transaction holds SQLite's write lock about
HOLD_S (a few milliseconds), so that other writers, readers and reporters do not notice
it. The delete wakes the sweeper of its process, which removes them at once; a space whose
removal was cut short (the process stopped) is finished by whichever instance's sweeper
holds the removal's lease next, once the lease of the one that stopped has lapsed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from ..domain.clock import Clock
from ..ops import metrics
from ..service import Service
from ..storage import deletes
from ..storage.database import Statements
from .lease import NamedLease
from .loops import survive

log = logging.getLogger("headway")

STEP_S = 60.0
LEASE_NAME = "sweeper"
# Deleted spaces' rows are removed on one instance at a time, under this lease: renewed
# as batches go, given back once nothing is left.
REMOVAL_LEASE = "space-removal"
REMOVAL_S = 30.0
# Idle spaces deleted per step.
SPACES_PER_STEP = 10
# Each removal transaction aims to take about this long: on SQLite it holds the write lock
# of the whole database (other writers wait for it), on PostgreSQL only the rows it
# removes, which nobody else uses. Batches start at FIRST_BATCH rows and move towards the
# size that takes it, between LEAST_BATCH (below, a transaction's fixed cost, its round
# trips and the commit's flush, is all it would take) and `batch` rows.
HOLD_S = 0.003
HOLD_S_POSTGRES = 0.008
FIRST_BATCH = 100
LEAST_BATCH = 50
MOST_AT_ONCE = 2000
# Tasks whose progress is forgotten per read, before their rows are removed.
PROGRESS_PAGE = 1000

Item = TypeVar("Item")


class BatchSize:
    """How many rows the next removal transaction takes: about as many as the last ones
    removed in `hold_s`, between LEAST_BATCH and `most`, at most doubling from one batch
    to the next (a fast batch of few rows says little of a large one)."""

    def __init__(self, most: int, hold_s: float = HOLD_S, first: int = FIRST_BATCH) -> None:
        self.most = max(1, most)
        self.least = min(LEAST_BATCH, self.most)
        self.hold_s = hold_s
        self.size = min(first, self.most)

    def took(self, rows: int, seconds: float) -> None:
        """A batch of `rows` held its transaction `seconds`."""
        if rows < self.size:
            return  # a space's last, short batch
        fit = rows * self.hold_s / seconds if seconds > 0 else 2 * rows
        self.size = max(self.least, min(self.most, 2 * self.size, int(fit)))


class Sweeper:
    """Retention: deletes spaces with no create, report or read for `retention_us`
    (None: keeps everything); removes deleted spaces' rows; and writes activity as it
    goes."""

    def __init__(
        self,
        service: Service,
        clock: Clock,
        retention_us: int | None,
        *,
        step_s: float = STEP_S,
        batch: int = MOST_AT_ONCE,
        hold_s: float | None = None,
        woken: asyncio.Event | None = None,
    ) -> None:
        """`woken`: set when a space is deleted (see `service.unit.Wake`): its rows are
        removed at once rather than at the next step."""
        self.service = service
        self.clock = clock
        self.retention_us = retention_us
        self.step_s = step_s
        if hold_s is None:
            hold_s = HOLD_S if service.db.is_sqlite else HOLD_S_POSTGRES
        self.sizes = BatchSize(batch, hold_s)
        holder = f"sweeper-{uuid.uuid4().hex[:12]}"
        # Idle spaces are deleted by one instance at a time: the one that took this lease
        # at its last step (it lasts three steps).
        self.lease = NamedLease(service.db, LEASE_NAME, holder, step_s * 3)
        # Deleted spaces' rows are removed by one instance at a time.
        self.removal = NamedLease(service.db, REMOVAL_LEASE, holder, REMOVAL_S)
        self._woken = woken or asyncio.Event()
        self._removing = asyncio.Lock()  # one removal at a time in this process

    def wake(self) -> None:
        """A space was deleted: remove its rows now rather than at the next step."""
        self._woken.set()

    async def run(self) -> None:
        """Step every `step_s` seconds, and remove deleted spaces' rows whenever woken,
        until cancelled; a failed step is logged and counted, and the next comes all
        the same."""
        loop = asyncio.get_running_loop()
        next_step = loop.time() + self.step_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(next_step):
                    await self._woken.wait()
            self._woken.clear()
            stepping = loop.time() >= next_step
            if stepping:
                next_step = loop.time() + self.step_s
            await survive("sweeper", self.step if stepping else self.remove)

    async def step(self) -> int:
        """Write the activity noted here and forget idempotency keys older than a day (a
        bounded number of short deletes, on any instance: deleting twice harms nothing);
        then, if some spaces are idle and this instance holds the lease, delete up to
        SPACES_PER_STEP of them; then remove deleted spaces' rows. Returns how many
        spaces were deleted for their idleness."""
        db = self.service.db
        await self.service.activity.flush(db)
        forgotten = await self.service.keys.forget_expired()
        if forgotten:
            log.info("sweeper: forgot %d idempotency keys older than a day", forgotten)
        deleted = await self.delete_idle()
        await self.remove()
        return deleted

    async def delete_idle(self) -> int:
        """Delete up to SPACES_PER_STEP spaces idle since before the retention, if this
        instance holds the lease; how many. Each goes as its owner's delete does, in one
        conditional transaction that checks it is still idle (activity noted meanwhile
        keeps it); its rows are removed by `remove`."""
        if self.retention_us is None:
            return 0
        db = self.service.db
        now = self.clock.now_us()
        cutoff = now - self.retention_us
        idle = await deletes.idle_spaces(db.fetch, cutoff, SPACES_PER_STEP)
        if not idle:
            return 0  # nothing to do: no lease taken, nothing written
        if not await self.lease.take(now):
            return 0
        deleted = 0
        for space_uuid in idle:
            if await self.service.deletes.idle_space(space_uuid, cutoff):
                log.info("sweeper: deleted a space idle since before the retention")
                deleted += 1
        return deleted

    async def remove(self, batches: int | None = None) -> int:
        """Remove the rows of deleted spaces, a batch per transaction, oldest delete
        first, until none is left, if this instance holds (or takes) the removal's lease;
        how many transactions. With `batches`, stop after that many (the lease is then
        kept until it lapses, as a process that stopped would keep it)."""
        async with self._removing:
            run = _Removal(batches)
            tried: set[str] = set()
            while (space_uuid := await self._next_space(tried)) is not None:
                if not tried and not await self.removal.take(self.clock.now_us()):
                    return 0
                tried.add(space_uuid)
                if not await self._remove_space(space_uuid, run):
                    return run.done
            if tried:
                await self.removal.give_back()
            return run.done

    async def _next_space(self, tried: set[str]) -> str | None:
        """The deleted space deleted first, but for those this run tried already (one left
        behind would be a bug: it is tried again by the next run, not forever by this)."""
        found = await deletes.deleted_spaces(self.service.db.fetch, len(tried) + 1)
        return next((space for space in found if space not in tried), None)

    async def _remove_space(self, space_uuid: str, run: _Removal) -> bool:
        """Forget the space's progress, then remove its tasks (newest first: steps before
        their parents), its events, its keys and its row. False: the run stopped before
        the end (its `batches` ran, or the lease was lost)."""
        fetch = self.service.db.fetch
        await self._forget_progress(space_uuid)
        started, first, tasks = time.perf_counter(), run.done, 0
        before_us: int | None = None
        while True:
            if not await self._may_go_on(run):
                return False
            size = self.sizes.size
            page = await deletes.tasks_newest(fetch, space_uuid, before_us, size)
            if page:
                await self._batch(run, deletes.remove_tasks, [row[0] for row in page])
                tasks, before_us = tasks + len(page), page[-1][1]
                metrics.deleted("space", len(page))
            if len(page) < size:
                break
        for read, remove in (
            (deletes.event_ids, deletes.remove_events),
            (deletes.key_pairs, deletes.remove_keys),
        ):
            while True:
                if not await self._may_go_on(run):
                    return False
                size = self.sizes.size
                rows: Sequence[object] = await read(fetch, space_uuid, size)
                if rows:
                    await self._batch(run, remove, rows)
                if len(rows) < size:
                    break
        if not await self._may_go_on(run):
            return False
        await self._batch(run, lambda st, _: deletes.remove_space(st, space_uuid), [space_uuid])
        log.info(
            "sweeper: removed a deleted space's %d tasks in %d transactions, %.1f s",
            tasks,
            run.done - first,
            time.perf_counter() - started,
        )
        return True

    async def _may_go_on(self, run: _Removal) -> bool:
        """Whether the run may take another batch: its `batches` not all spent, and the
        lease still held (renewed once a third of it has passed)."""
        if run.batches is not None and run.done >= run.batches:
            return False
        return await self.removal.keep(self.clock.now_us())  # False: another took it

    async def _batch(
        self,
        run: _Removal,
        remove: Callable[[Statements, Sequence[Item]], Awaitable[None]],
        rows: Sequence[Item],
    ) -> None:
        """One removal transaction, timed from the moment it holds the write lock to its
        commit; the time sizes the next batch."""
        async with self.service.db.write() as st:
            started = time.perf_counter()
            await remove(st, rows)
        held = time.perf_counter() - started
        run.done += 1
        metrics.removal_transaction(held)
        self.sizes.took(len(rows), held)

    async def _forget_progress(self, space_uuid: str) -> None:
        """Forget the live progress of every task of the space, a page at a time (reads
        only): its memory counts for nobody from now, long before the last row goes."""
        service, after_us = self.service, -1
        while True:
            page = await deletes.tasks_oldest(service.db.fetch, space_uuid, after_us, PROGRESS_PAGE)
            if page:
                await service.progress.delete([row[0] for row in page])
                after_us = page[-1][1]
            if len(page) < PROGRESS_PAGE:
                return
            await asyncio.sleep(0)  # reads run on the event loop's thread with SQLite


class _Removal:
    """One run of `Sweeper.remove`: the transactions it ran, and how many it may run
    (None: as many as it takes)."""

    __slots__ = ("batches", "done")

    def __init__(self, batches: int | None) -> None:
        self.batches = batches
        self.done = 0
