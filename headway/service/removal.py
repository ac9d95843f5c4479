"""Removing a deleted space's rows: a space's delete (its owner's or retention's) only
marks it deleted, in one short transaction (see `service.deletes`); its rows are removed
afterwards, by the sweeper (`headway.background.sweeper`), a batch per transaction, each
batch sized so that its transaction holds SQLite's write lock about HOLD_S (a few
milliseconds), so that other writers, readers and reporters do not notice it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..ops import metrics
from ..storage import deletes
from ..storage.database import Statements
from .context import Stores

log = logging.getLogger("headway")

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


@dataclass(slots=True)
class Run:
    """One run of removals: how many transactions it may run (None: as many as it takes),
    `may_go_on`, asked before each (False: the run's lease was lost), `sizes`, which its
    batches follow and teach, and the transactions it ran."""

    batches: int | None
    may_go_on: Callable[[], Awaitable[bool]]
    sizes: BatchSize
    done: int = 0

    async def goes_on(self) -> bool:
        if self.batches is not None and self.done >= self.batches:
            return False
        return await self.may_go_on()


class Removal:
    """Removes deleted spaces' rows, a batch per transaction, as a `Run` sizes them."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores

    def sizes(self, most: int = MOST_AT_ONCE, hold_s: float | None = None) -> BatchSize:
        """Batch sizes for this database: `hold_s` HOLD_S on SQLite, HOLD_S_POSTGRES on
        PostgreSQL, unless given."""
        if hold_s is None:
            hold_s = HOLD_S if self._stores.db.is_sqlite else HOLD_S_POSTGRES
        return BatchSize(most, hold_s)

    async def next_space(self, tried: set[str]) -> str | None:
        """The deleted space deleted first, but for those this run tried already (one left
        behind would be a bug: it is tried again by the next run, not forever by this)."""
        found = await deletes.deleted_spaces(self._stores.db.fetch, len(tried) + 1)
        return next((space for space in found if space not in tried), None)

    async def space(self, space_uuid: str, run: Run) -> bool:
        """Forget the space's progress, then remove its tasks (newest first: steps before
        their parents), its events, its keys and its row. False: the run stopped before
        the end (its `batches` ran, or its lease was lost)."""
        fetch = self._stores.db.fetch
        await self._forget_progress(space_uuid)
        started, first, tasks = time.perf_counter(), run.done, 0
        before_us: int | None = None
        while True:
            if not await run.goes_on():
                return False
            size = run.sizes.size
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
                if not await run.goes_on():
                    return False
                size = run.sizes.size
                rows: Sequence[object] = await read(fetch, space_uuid, size)
                if rows:
                    await self._batch(run, remove, rows)
                if len(rows) < size:
                    break
        if not await run.goes_on():
            return False
        await self._batch(run, lambda st, _: deletes.remove_space(st, space_uuid), [space_uuid])
        log.info(
            "sweeper: removed a deleted space's %d tasks in %d transactions, %.1f s",
            tasks,
            run.done - first,
            time.perf_counter() - started,
        )
        return True

    async def _batch(
        self,
        run: Run,
        remove: Callable[[Statements, Sequence[Item]], Awaitable[None]],
        rows: Sequence[Item],
    ) -> None:
        """One removal transaction, timed from the moment it holds the write lock to its
        commit; the time sizes the next batch."""
        async with self._stores.db.write() as st:
            started = time.perf_counter()
            await remove(st, rows)
        held = time.perf_counter() - started
        run.done += 1
        metrics.removal_transaction(held)
        run.sizes.took(len(rows), held)

    async def _forget_progress(self, space_uuid: str) -> None:
        """Forget the live progress of every task of the space, a page at a time (reads
        only): its memory counts for nobody from now, long before the last row goes."""
        stores, after_us = self._stores, -1
        while True:
            page = await deletes.tasks_oldest(stores.db.fetch, space_uuid, after_us, PROGRESS_PAGE)
            if page:
                await stores.progress.delete([row[0] for row in page])
                after_us = page[-1][1]
            if len(page) < PROGRESS_PAGE:
                return
            await asyncio.sleep(0)  # reads run on the event loop's thread with SQLite
