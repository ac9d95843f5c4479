"""Families and finishing: a task's row with its children (cached where that is safe),
a parent's answer, and the record of a finish with its completion events."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import msgspec

from ..caches.families import FamilyCache
from ..domain import tasks as domain
from ..domain.completion import completion_event
from ..domain.errors import NotFound
from ..domain.jobs import USUAL_RUNS, usual
from ..domain.tasks import Changed, FamilyVersion, Progress, TaskRow, canonical_uuid
from ..ops import metrics
from ..ops.dependencies import unavailable
from ..storage import channel_queue, jobs, queries, webhooks
from ..storage.database import Statements
from .context import NO_TASK, Stores, canonical
from .unit import Unit

# A parent's steps, each with its progress (None: it has none).
StepsProgress = list[tuple[TaskRow, Progress | None]]


class Families:
    """Task families, read through `cache`, which the coherence made (see `coherence`):
    a report decides on a family at a version (see `Tasks.report`); a read shows it as
    the cache holds it where no version needs checking, else as the database does."""

    def __init__(self, stores: Stores, cache: FamilyCache, outbox_per_endpoint: int) -> None:
        self._stores = stores
        self.cache = cache
        # Undelivered events one webhook or channel holds (HEADWAY_OUTBOX_PER_ENDPOINT).
        self.outbox_per_endpoint = outbox_per_endpoint
        stores.writes.register(cache)

    async def get(self, task_uuid: str) -> tuple[TaskRow, Sequence[TaskRow]]:
        """The family as a read shows it (see `FamilyCache.held_for_read`)."""
        key = canonical(task_uuid, NO_TASK)
        cache = self.cache
        held = cache.held_for_read(key)
        if held is not None:
            return held
        generation = cache.generation
        family = await self._read(key)
        cache.keep_read(family, generation)
        return family

    async def get_many(self, task_uuids: Sequence[str]) -> list[tuple[TaskRow, Sequence[TaskRow]]]:
        """The families of those of `task_uuids` that exist, in that order, as `get`
        reads them: those the cache does not hold in one query."""
        keys = [key for key in map(canonical_uuid, task_uuids) if key is not None]
        cache = self.cache
        held = {key: cache.held_for_read(key) for key in keys}
        missing = [key for key in keys if held.get(key) is None]
        if missing:
            generation = cache.generation
            read = await queries.read_families(self._stores.db.fetch, missing)
            for family in read.values():
                held[family[0].uuid] = family
                cache.keep_read(family, generation)
        return [family for family in map(held.get, keys) if family is not None]

    async def at_version(
        self, key: str, version: FamilyVersion | None = None
    ) -> tuple[TaskRow, Sequence[TaskRow], FamilyVersion]:
        """The family of the task (a canonical uuid) read afresh, with the version it is
        at (read before the rows, unless given: a change racing the read can only make
        it look older), and held so in the cache."""
        stores, cache = self._stores, self.cache
        if version is None:
            version = await stores.writes.coherence.version(key)
        generation = cache.generation
        row, children = await self._read(key)
        cache.put_versioned((row, children), version, stores.clock.now_us(), generation)
        return row, children, version

    async def _read(self, key: str) -> tuple[TaskRow, Sequence[TaskRow]]:
        row, children = await queries.read_family(self._stores.db.fetch, key)
        if row is None:
            raise NotFound(NO_TASK)
        return row, children

    def view(
        self,
        row: TaskRow,
        progress: Progress | None,
        children: Sequence[TaskRow],
        found: Sequence[Progress | None],
    ) -> domain.TaskView:
        """The answer for a parent, its children's JSON and aggregate reused from the
        family cache where it holds them (see `caches.families`)."""
        made = self.cache.children_answer(row.uuid, children, found)
        if made is not None:
            return domain.view(row, progress, (), made.shown, (made.done, made.latest_us))
        return domain.view(row, progress, list(zip(children, found, strict=True)))

    async def finish(
        self, unit: Unit, row: TaskRow, progress: Progress, family: StepsProgress, now_us: int
    ) -> TaskRow:
        """Record the completion of `row` (and of its parent, if it was the last open
        child), with one outbox event each, in a transaction of `unit`, which tells of
        the finish once it ends (even if this raises: the finish may have committed all
        the same). Returns the row as it now stands."""
        duration = domain.duration_seconds(row.created_at_us, now_us)
        unit.changed(Changed.FINISH, row.space_uuid, row.uuid, row.parent_uuid)
        finished = msgspec.structs.replace(row, finished_at_us=now_us, duration=duration)
        event = _Event(domain.view(finished, progress, family), now_us)
        finished = event.kept(finished)
        async with unit.transaction() as st:
            if row.parent_uuid is not None:
                await queries.lock_task(st, row.parent_uuid)
            if not await queries.finish_task(
                st, row.uuid, now_us, duration, event.failed, event.error
            ):
                # Another report finished it first, and its finish time stands; or it was
                # deleted meanwhile (its space too, maybe).
                found = (await queries.tasks_by_uuid(st, (row.uuid,))).get(row.uuid)
                if found is None:
                    raise NotFound(NO_TASK)
                return found
            row = finished
            await self._record_event(unit, event)
            runs = [(row.uuid, event.failed)]
            parent_done = row.parent_uuid is not None and await self.finish_if_steps_done(
                unit, row.parent_uuid, now_us, {row.uuid: progress}, runs
            )
            await jobs.finished(st, runs, now_us)
        if parent_done:
            assert row.parent_uuid is not None
            await self.release(row.parent_uuid)
        return row

    async def release(self, parent_uuid: str) -> None:
        """The parent finished with its last step: its own progress, written while it was
        active, no longer counts as live (see `progress.ProgressStore.release`). A store
        that does not answer keeps counting it until it expires."""
        try:
            await self._stores.progress.release([parent_uuid])
        except Exception as exc:
            if not unavailable(exc):
                raise

    async def finish_if_steps_done(
        self,
        unit: Unit,
        parent_uuid: str,
        now_us: int,
        known: dict[str, Progress] | None = None,
        runs: list[tuple[str, bool]] | None = None,
    ) -> bool:
        """Finish the parent, with its event, if it has steps and every one of them has
        finished (after a step's finish, or a step's delete), unless it is held open by
        its own reporter. Call under the parent's row lock (`queries.lock_task`), within
        the transaction of `unit` that changed its steps. `known`: progress just written
        and not yet stored. True: it finished here (the caller tells `unit` so, unless a
        change of a step of it told already). `runs`: where to add its run, for the caller
        to count in its job with its own (else it is counted here).

        A parent with progress of its own received a report that did not finish it: it
        is held (marked so in the database, which outlasts that progress's expiry), and
        only its own `done` finishes it."""
        st = unit.st
        parent, steps = await queries.read_family(st.rows, parent_uuid)
        if parent is None or parent.finished or not steps:
            return False
        progress = self._stores.progress
        own = await progress.get(parent.uuid)
        if own is not None:
            await queries.hold_tasks(st, (parent.uuid,))
            return False
        if any(not step.finished for step in steps):
            return False
        duration = domain.duration_seconds(parent.created_at_us, now_us)
        parent = msgspec.structs.replace(parent, finished_at_us=now_us, duration=duration)
        found = await progress.get_many([s.uuid for s in steps])
        known = known or {}
        family = [(s, known.get(s.uuid, p)) for s, p in zip(steps, found, strict=True)]
        event = _Event(domain.view(parent, None, family), now_us)
        if not await queries.finish_task(
            st, parent.uuid, now_us, duration, event.failed, event.error, unless_held=True
        ):
            return False
        await self._record_event(unit, event)
        if runs is None:
            await jobs.finished(st, [(parent.uuid, event.failed)], now_us)
        else:
            runs.append((parent.uuid, event.failed))
        return True

    async def _record_event(self, unit: Unit, event: _Event) -> None:
        """Write the completion event (bounded in size: see `completion_event`) and queue
        it for every webhook of the space, and for each of its channels that wants it;
        beyond an endpoint's cap, its oldest undelivered events are given up. The worker
        is woken once `unit` is over."""
        st = unit.st
        unit.queued()
        event_id = f"msg_{uuid.uuid4().hex}"
        task, payload, now_us = event.task, event.payload, event.now_us
        cap = self.outbox_per_endpoint
        space_uuid = task.space_uuid
        watched = (True, True)
        if st.is_sqlite:
            # One write transaction at a time, and this one holds the lock: the event
            # loop's reader sees what it sees, without a trip to the writer's thread.
            watched = await webhooks.space_endpoints(self._stores.db.fetch, space_uuid)
        queued = webhooks.FanOut(0)
        if watched[0]:
            queued = await webhooks.fan_out(st, event_id, space_uuid, now_us, cap=cap)
        await queries.insert_event(
            st, event_id, space_uuid, task.uuid, payload, now_us, webhooks=queued.webhooks
        )
        pushed_out = 0
        if watched[1]:
            pushed_out = await channel_queue.fan_out(
                st,
                event_id,
                space_uuid,
                task.uuid,
                await _with_usual(st, event),
                failed=event.failed,
                step=task.parent_uuid is not None,
                now_us=now_us,
                cap=cap,
            )
        if queued.given_up:
            metrics.delivery("given_up", queued.given_up)
            metrics.given_up("webhook", "cap", queued.given_up)
        if pushed_out:
            metrics.channel_delivery("given_up", pushed_out)
            metrics.given_up("channel", "cap", pushed_out)


async def _with_usual(st: Statements, event: _Event) -> str:
    """The event as channels take it: with `usual_s`, how long its job's succeeded runs
    before this one usually took (their p50), when it has 5, for the message to say it
    ("✓ Deploy finished in 14 min, usually 12 min")."""
    found = await jobs.job_of(st.rows, event.task.uuid)
    if found is None:
        return event.payload
    job, created_us = found
    runs = await jobs.newest_runs(st.rows, [job], USUAL_RUNS + 1)
    before = [
        (finished - created) / 1e6
        for created, finished in runs[job][0]
        if (created, finished) != (created_us, event.now_us)
    ]
    known = usual(before[:USUAL_RUNS])
    if known is None:
        return event.payload
    return event.payload[:-1] + ',"usual_s":' + repr(known.p50_s) + "}"


class _Event:
    """A finished task's completion event (bounded in size: see `completion_event`), and
    whether the task failed, with the error it reported itself (None: none), judged once
    for its row (which keeps both: see `domain.TaskRow`), its job and its channels."""

    __slots__ = ("error", "failed", "now_us", "payload", "task")

    def __init__(self, task: domain.TaskView, now_us: int) -> None:
        self.task = task
        self.now_us = now_us
        self.payload = completion_event(task, now_us)
        # Only an answer that names an error somewhere can have failed (a reduced event
        # may have left values out: judged on the whole answer then).
        payload = self.payload
        maybe = (
            '"error"' in payload or '"children_omitted"' in payload or '"values_omitted"' in payload
        )
        failure = domain.view_failure(task) if maybe else None
        self.failed = failure is not None
        self.error = None if failure is None else failure.error

    def kept(self, row: TaskRow) -> TaskRow:
        """The finished `row` with the outcome this event judged, as its finish stores it."""
        return msgspec.structs.replace(row, failed=self.failed, error=self.error)
