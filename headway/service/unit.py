"""One unit of work per write: it hands out the write's statements, gathers what the
write changed, and once the write is over publishes it, once, to every place that must
hear of it.

Every write of the service (a create, a report, a finish, a delete, the removal of tasks
to make room, a share link's revoke, a channel's or a webhook's change) runs inside one
`Unit`, opened by `Writes.unit` (no transaction: a report that finishes nothing) or
`Writes.transaction` (one database transaction). What it changed is said in one
vocabulary, `domain.Changed`, with `Unit.changed`, `Unit.deleted`, `Unit.pruned`,
`Unit.dropped`, `Unit.queued`; nothing else in the service drops a cache entry, bumps a
version, publishes to the change feed or wakes the worker.

When the unit ends (committed, failed or cancelled: a failed commit may have committed
all the same), `Writes.publish` runs, exactly once:
1. this process's caches forget what the changes made stale (`Cache.on_change`);
2. the progress of removed tasks is deleted;
3. every instance hears of them (`coherence.Coherence.announce`): with several, the
   families and spaces' rows they touched get new versions, so that other instances'
   caches stop trusting them; and the change feed wakes the live streams;
4. the worker is woken when an event was queued, the sweeper when a space was dropped.
Steps 2 to 4 are best-effort: the write is stored, and answers its success; a feed that
could not be told makes the space's watchers start over from a snapshot.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, Protocol

from ..coherence import Coherence, Told
from ..domain.tasks import Changed
from ..progress import ProgressStore
from ..storage.database import Database, Statements

log = logging.getLogger("headway")


# The changes whose tasks are gone, their progress with them.
_REMOVED = frozenset({Changed.DELETE, Changed.PRUNE})


class Cache(Protocol):
    """Anything the service keeps that a write can make stale."""

    # The kinds of change after which it may hold something stale; told of no other.
    hears: ClassVar[frozenset[Changed]]

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """Drop what the change made stale; never waits, never raises."""


def _nothing() -> None:
    pass


@dataclass(frozen=True, slots=True)
class Wake:
    """Who a unit wakes once it is over: the worker when it queued an event, the
    sweeper when it dropped a space. Given when the service is built (see `app`)."""

    worker: Callable[[], None] = _nothing
    sweeper: Callable[[], None] = _nothing


class Unit:
    """One write: its statements (`st`, inside `Writes.transaction`) and what it changed.
    Published by `Writes` once it ends; an async context manager."""

    __slots__ = ("_writes", "st", "told", "wakes_sweeper", "wakes_worker")

    def __init__(self, writes: Writes) -> None:
        self._writes = writes
        # Set by a transaction (`Writes.transaction`, `Unit.transaction`).
        self.st: Statements
        self.told: list[Told] = []
        self.wakes_worker = False
        self.wakes_sweeper = False

    async def __aenter__(self) -> Unit:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._writes.publish(self)

    def changed(
        self,
        kind: Changed,
        space_uuid: str,
        task_uuid: str,
        parent_uuid: str | None = None,
    ) -> None:
        """`task_uuid` (a child of `parent_uuid`) was created, reported or finished, or a
        share link (`task_uuid`) was revoked."""
        self.told.append(Told(kind, space_uuid, task_uuid, parent_uuid))

    def tell(self, told: Told) -> None:
        """A change already made as the coherence writes it (a report's)."""
        self.told.append(told)

    def deleted(self, space_uuid: str, task_uuids: Sequence[str], parent_uuid: str | None) -> None:
        """Tasks were deleted by their owner, their progress with them; the space's
        streams start over."""
        self.told.extend(Told(Changed.DELETE, space_uuid, uuid, parent_uuid) for uuid in task_uuids)

    def pruned(
        self, space_uuid: str, task_uuids: Sequence[str], replaced: Sequence[tuple[str, str]]
    ) -> None:
        """`task_uuids` were removed to make room for new tasks (see `service.caps`): the
        oldest finished top-level tasks of the space, each paired in `replaced` with the
        new task that took its place, and their steps. Only the streams the removal
        would leave wrong start over."""
        paired = dict(replaced)
        self.told.extend(
            Told(Changed.PRUNE, space_uuid, uuid, paired.get(uuid)) for uuid in task_uuids
        )

    def dropped(self, space_uuid: str, *, sweep: bool) -> None:
        """The space was deleted with everything in it; `sweep`: wake the sweeper to
        remove its rows now."""
        self.told.append(Told(Changed.DROP, space_uuid, ""))
        self.wakes_sweeper = self.wakes_sweeper or sweep

    def queued(self) -> None:
        """An event was queued for delivery: the worker is woken once this is over."""
        self.wakes_worker = True

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Statements]:
        """A database transaction of the unit's, committed as its block ends (the unit
        publishes later, when it ends itself)."""
        async with self._writes.db.write() as st:
            self.st = st
            yield st


class Writes:
    """Where units are opened, and published once each.

    Invariant: every write that changed (or may have changed: a failed commit may have
    committed all the same) a space's tasks runs in a unit that says so, and every cache
    of spaces or tasks is registered here. So once a write has answered, no cache of any
    instance serves what it replaced: this instance's caches dropped it, the others' see
    a new version, and the live streams were told.
    """

    def __init__(
        self,
        db: Database,
        progress: ProgressStore,
        coherence: Coherence,
        wake: Wake | None = None,
    ) -> None:
        self.db = db
        self.progress = progress
        self.coherence = coherence
        self.wake = wake or Wake()
        self.caches: list[Cache] = []
        self._hearing: dict[Changed, tuple[Cache, ...]] = {kind: () for kind in Changed}

    def register(self, cache: Cache) -> None:
        """From now on, tell `cache` of every change of a kind it hears."""
        self.caches.append(cache)
        self._sort()

    def replace(self, old: Cache | None, new: Cache | None) -> None:
        """Tell `new` instead of `old` (either may be None)."""
        self.caches = [cache for cache in self.caches if cache is not old]
        if new is not None:
            self.caches.append(new)
        self._sort()

    def _sort(self) -> None:
        self._hearing = {
            kind: tuple(cache for cache in self.caches if kind in cache.hears) for kind in Changed
        }

    def unit(self) -> Unit:
        """A unit of work without a transaction (`Unit.transaction` opens one); published
        when its `async with` block ends."""
        return Unit(self)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Unit]:
        """A unit of work in one database transaction (its statements: `Unit.st`),
        published once the transaction committed or failed."""
        unit = Unit(self)
        try:
            async with self.db.write() as st:
                unit.st = st
                yield unit
        finally:
            await self.publish(unit)

    async def publish(self, unit: Unit) -> None:
        """Tell everyone what `unit` changed (see the module docstring). Never raises."""
        told = unit.told
        if told:
            removed = self.forget(told)
            if removed:
                await self._remove_progress(removed)
            try:
                await self.coherence.announce(told)  # never raises; if it did, the write stands
            except Exception:
                log.exception("a change could not be announced")
        if unit.wakes_worker:
            self.wake.worker()
        if unit.wakes_sweeper:
            self.wake.sweeper()

    def forget(self, told: Sequence[Told]) -> list[str]:
        """Tell this process's caches: each drops what the changes made stale. The tasks
        removed (their progress goes too)."""
        hearing = self._hearing
        removed = []
        for each in told:
            kind = each.kind
            if kind in _REMOVED:
                removed.append(each.task_uuid)
            parent = None if kind is Changed.PRUNE else each.other
            for cache in hearing[kind]:
                cache.on_change(kind, each.space_uuid, each.task_uuid, parent)
        return removed

    async def _remove_progress(self, task_uuids: list[str]) -> None:
        try:
            await self.progress.delete(task_uuids)
        except Exception as exc:  # it expires in its time
            log.warning("progress of removed tasks not deleted (%s)", exc)
