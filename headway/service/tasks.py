"""Tasks and reports, the hot path: creating a task, reading one, and applying a report
(which finishes the task when it says so)."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..coherence import Told
from ..domain import tasks as domain
from ..domain.errors import HeadwayError, NotFound, Unprocessable
from ..domain.jobs import job_key
from ..domain.schemas import CreateTask
from ..domain.tasks import Changed, FamilyVersion, Progress, Report, TaskRow, canonical_uuid
from ..ops.dependencies import unavailable
from ..progress import NO_CLIENT
from ..storage import jobs, queries
from ..storage.idempotency import KeyRow
from .activity import Activity
from .caps import Caps
from .context import NO_SPACE, NO_TASK, NOT_A_PARENT, Stores, canonical
from .families import Families, StepsProgress
from .group_commit import GroupCommit
from .idempotency import Idempotency, Keys, Settled, submitted
from .unit import Unit

log = logging.getLogger("headway")

# A report whose cached family keeps changing under it reloads it this many times, then
# writes without the version check (as without a cache: read the family, then write).
FAMILY_RELOADS = 3


class Tasks:
    """Creates (concurrent ones share a commit), reads and reports of tasks."""

    def __init__(self, stores: Stores, families: Families, caps: Caps, activity: Activity) -> None:
        self._stores = stores
        self._families = families
        self.caps = caps
        self._activity = activity
        self.keys = Keys(stores)
        # Each batch is one unit of work: what it made (and removed to make room) is told
        # as its commit ends, before anyone is answered; a create whose caller was
        # cancelled meanwhile commits, and is told, all the same.
        self.creates = GroupCommit(stores.writes.transaction, self._insert)

    async def create(
        self,
        space_uuid: str,
        body: CreateTask,
        idempotency: Idempotency | None = None,
        client: str = NO_CLIENT,
    ) -> dict[str, Any]:
        """Create a task; answered once the commit holding it is durable. With an
        `idempotency` key, the first answer under it again, if there is one (see
        `service.idempotency`). Refused before anything is written when the disk runs
        short, or when `client` holds its whole share of the progress budget."""
        self._stores.disk.admit()
        try:
            await self._stores.progress.admit_client(client)
        except Exception as exc:
            # A create needs only the database: with the progress store away, the share
            # cannot be counted, and the task's reports wait for the store anyway.
            if not unavailable(exc):
                raise
        space_key = canonical(space_uuid, NO_SPACE)
        parent_key = None
        if body.parent_uuid is not None:
            parent_key = canonical_uuid(body.parent_uuid)
            if parent_key is None:
                raise Unprocessable(NOT_A_PARENT)
        task_uuid = str(uuid.uuid4())
        hold = parent_key is not None and await self._reported_itself(parent_key)
        new = _NewTask(task_uuid, space_key, parent_key, body.title, body.source, idempotency, hold)
        outcome = await submitted(self.creates.submit, new, idempotency)
        if isinstance(outcome, dict):
            return outcome  # the first answer under the key again: nothing was created
        return {"uuid": task_uuid}

    async def _reported_itself(self, parent_uuid: str) -> bool:
        """Whether the would-be parent holds progress of its own (a report that did not
        finish it): its first step then marks it held (see `Families.finish_if_steps_done`).
        A progress store that does not answer tells nothing: a create needs only the
        database, and the step's finish looks again."""
        try:
            return await self._stores.progress.get(parent_uuid) is not None
        except Exception as exc:
            if not unavailable(exc):
                raise
            return False

    async def _insert(self, unit: Unit, batch: Sequence[_NewTask]) -> list[_Outcome]:
        """Write a batch of creates in one transaction, `unit`'s. A create refused for its
        own reason (unknown space 404, bad parent 422) is refused alone, before anything is
        written for it; the others of a space get its next instants, in the order they
        arrived. Creates with a key that is settled already (see `Keys.settle`) are
        answered so, and write nothing; the keys of those made are recorded with them."""
        st = unit.st
        claims = [
            (index, new.space_uuid, new.idempotency)
            for index, new in enumerate(batch)
            if new.idempotency is not None
        ]
        settled = await self.keys.settle(st, claims) if claims else {}
        wanted = {
            new.parent_uuid
            for index, new in enumerate(batch)
            if new.parent_uuid is not None and index not in settled
        }
        parents = await queries.parents_by_uuid(st, wanted)
        refused: dict[int, HeadwayError] = {}
        by_space: dict[str, list[int]] = defaultdict(list)
        steps = self.caps.steps_of(parents)
        for index, new in enumerate(batch):
            if index in settled:
                continue
            by_space[new.space_uuid].append(index)
            if new.parent_uuid is not None:
                found = parents.get(new.parent_uuid)
                refusal = _parent_refusal(found and found[0], new.space_uuid) or steps.add(
                    new.parent_uuid
                )
                if refusal is not None:
                    refused[index] = refusal
        now_us = self._stores.clock.now_us()
        outcomes: dict[int, _Outcome] = {}
        rows: list[TaskRow] = []
        # Spaces in one fixed order: on PostgreSQL, batches on several instances take
        # their spaces' row locks (the claims) in the same order, so never deadlock.
        for space_key in sorted(by_space):
            members = by_space[space_key]
            accepted = [index for index in members if index not in refused]
            top = [index for index in accepted if batch[index].parent_uuid is None]
            claimed = None
            if accepted:
                claimed = await queries.claim_created_at(
                    st, space_key, now_us, len(accepted), len(top)
                )
            elif await queries.space_head(st.rows, space_key) is not None:
                claimed = (0, 0)  # only refusals: which one depends on whether it exists
            if claimed is None:
                for index in members:
                    outcomes[index] = NotFound(NO_SPACE)  # before any parent's refusal
                continue
            first_us, held = claimed
            new_uuids = [batch[index].uuid for index in top]
            beyond = await self.caps.prune(unit, space_key, held, new_uuids)
            for index in top[len(top) - beyond :] if beyond else ():
                refused[index] = self.caps.full()
            for index in members:
                if index in refused:
                    outcomes[index] = refused[index]
            for offset, index in enumerate(i for i in accepted if i not in refused):
                new = batch[index]
                row = TaskRow(
                    new.uuid, space_key, new.parent_uuid, new.title, new.source, first_us + offset
                )
                outcomes[index] = row
                rows.append(row)
        if rows:
            for row in rows:
                unit.changed(Changed.CREATE, row.space_uuid, row.uuid, row.parent_uuid)
            named = [_job_of(row, parents) for row in rows]
            await queries.insert_tasks(st, rows, [job and job[0] for job in named])
            await queries.count_children(st, steps.added)
            made = {row.uuid for row in rows}
            await queries.hold_tasks(
                st, {new.parent_uuid for new in batch if new.hold_parent and new.uuid in made}
            )
            if claims:
                await self.keys.record(st, _key_rows(batch, outcomes, settled))
            await jobs.created(st, [job for job in named if job is not None], now_us)
        return [settled[i] if i in settled else outcomes[i] for i in range(len(batch))]

    async def get(self, task_uuid: str) -> domain.TaskView:
        row, children = await self._families.get(task_uuid)
        self._activity.note(row.space_uuid)
        progress = self._stores.progress
        if not children:
            return domain.view(row, await progress.get(row.uuid))
        found = await progress.get_many(self._families.cache.uuids(row, children))
        return self._families.view(row, found[0], children, found[1:])

    async def event_views(self, task_uuids: Sequence[str]) -> list[domain.TaskView]:
        """The tasks of `task_uuids` that exist, in that order, as the live stream shows
        them: as `get` answers, but with no children (each child is an event of its
        own). Their rows take at most one query, their progress one round trip."""
        families = await self._families.get_many(task_uuids)
        uuids: list[str] = []
        for row, children in families:
            uuids.append(row.uuid)
            uuids.extend(child.uuid for child in children)
        found = await self._stores.progress.get_many(uuids) if uuids else []
        views, at = [], 0
        for row, children in families:
            progress, held = found[at], found[at + 1 : at + 1 + len(children)]
            at += 1 + len(children)
            if children:
                views.append(domain.view(row, progress, list(zip(children, held, strict=True)), []))
            else:
                views.append(domain.view(row, progress))
        return views

    async def report(
        self, task_uuid: str, report: Report, client: str = NO_CLIENT
    ) -> domain.TaskView:
        """Replace a task's live state with `report`, sent by `client` (whose share of the
        progress budget it counts against); finish the task if the report says so.

        Finishing is decided by a conditional update in the database, so of several
        concurrent finishing reports exactly one records the completion and its event.
        A report that does not finish its task writes nothing to the database.

        A family is cached at a version; the write of a report that finishes nothing
        checks, in the same round trip, that the family it was decided on is still at it
        (see `Coherence.put`), and one that finishes decides on the database's rows.
        """
        key = canonical(task_uuid, NO_TASK)
        families = self._families
        cached = families.cache.get_versioned(key, self._stores.clock.now_us)
        seen: FamilyVersion | None = None  # a version the failed write saw, before any SQL
        for _ in range(FAMILY_RELOADS):
            if cached is None:
                row, children, version = await families.at_version(key, seen)
                fresh = True
            else:
                row, children, version = cached
                fresh = families.cache.decides_finish
            try:
                return await self._report(row, children, report, client, version, fresh=fresh)
            except _FamilyChanged as changed:
                seen, cached = changed.version, None
        # The family keeps changing: decided on the database's rows, written unchecked.
        row, children, _ = await families.at_version(key)
        return await self._report(row, children, report, client, None)

    async def _report(
        self,
        row: TaskRow,
        children: Sequence[TaskRow],
        report: Report,
        client: str,
        version: FamilyVersion | None,
        *,
        fresh: bool = True,
    ) -> domain.TaskView:
        """`report` applied to the family `row`, `children`. With a `version` (the family
        as cached at that version), raises `_FamilyChanged` having written nothing if the
        family is no longer at it, or if the report finishes the task and the family did
        not come `fresh` from the database (a finish is decided on the database's rows)."""
        store, writes = self._stores.progress, self._stores.writes
        # Only `{"done": true}` keeps anything of the last report; others replace it all.
        previous = await store.get(row.uuid) if report.is_done_only else None
        now_us = self._stores.clock.now_us()
        progress, finishing = domain.apply_report(
            previous, report, now_us, is_parent=bool(children)
        )
        self._activity.note(row.space_uuid)
        family: StepsProgress = []
        found: list[Progress | None] = []
        if children:
            found = await store.get_many([c.uuid for c in children])
            family = list(zip(children, found, strict=True))
        # Refused before anything is written, a finish included.
        finished = finishing or row.finished
        store.admit(row.uuid, row.space_uuid, progress, client=client, finished=finished)
        if finishing and not row.finished:
            if not fresh:
                raise _FamilyChanged(None)
            async with writes.unit() as unit:
                row, progress = await self._finish(
                    unit, row, progress, family, report, previous, now_us, client
                )
        else:
            async with writes.unit() as unit:
                told = Told(Changed.REPORT, row.space_uuid, row.uuid, row.parent_uuid)
                if version is None:
                    await store.put(
                        row.uuid, progress, row.space_uuid, client=client, finished=finished
                    )
                    announced = False
                else:
                    current, announced = await writes.coherence.put(
                        told, progress, version, client, finished
                    )
                    if current is not None:
                        raise _FamilyChanged(current)
                unit.tell(told._replace(announced=True) if announced else told)
        if children:
            return self._families.view(row, progress, children, found)
        return domain.view(row, progress)

    async def _finish(
        self,
        unit: Unit,
        row: TaskRow,
        progress: Progress,
        family: StepsProgress,
        report: Report,
        previous: Progress | None,
        now_us: int,
        client: str,
    ) -> tuple[TaskRow, Progress]:
        """Finish `row` with `progress`, then store its progress (finished: kept for
        reading, no longer counted as live), in `unit`, which tells of the finish once it
        ends; the row and progress as they now stand."""
        store = self._stores.progress
        row = await self._families.finish(unit, row, progress, family, now_us)
        try:
            if report.is_done_only:
                # Finishing waited on the database; a report that landed meanwhile holds
                # the last numbers now, and `{"done": true}` keeps them.
                latest = await store.get(row.uuid)
                if latest is not previous:
                    progress, _ = domain.apply_report(
                        latest, report, now_us, is_parent=bool(family)
                    )
            await store.put(row.uuid, progress, row.space_uuid, client=client, finished=True)
        except Exception as exc:
            if not unavailable(exc):
                raise
            # The finish is committed: the report answers it, though its last numbers
            # could not be kept (live progress is what a store that is down loses).
            log.warning("a finish is stored, its progress is not (%s)", type(exc).__name__)
        return row, progress


class _FamilyChanged(Exception):
    """A report's family changed since it was cached (`version`: its version now, if
    known); nothing was written, and the report is decided again on a fresh family."""

    def __init__(self, version: FamilyVersion | None) -> None:
        super().__init__(version)
        self.version = version


@dataclass(frozen=True, slots=True)
class _NewTask:
    """A create waiting for its batch: everything but its instant, which the batch claims."""

    uuid: str
    space_uuid: str
    parent_uuid: str | None
    title: str | None
    source: str | None
    idempotency: Idempotency | None = None
    # The parent reported itself: this step marks it held (see `Tasks._reported_itself`).
    hold_parent: bool = False


# What a batch answers a create: its row, its refusal, or what its key settled.
_Outcome = TaskRow | HeadwayError | Settled


def _key_rows(
    batch: Sequence[_NewTask], outcomes: dict[int, _Outcome], settled: dict[int, Settled]
) -> list[KeyRow]:
    """The keys of the batch's creates that were made, with their answers."""
    return [
        new.idempotency.row(new.space_uuid, new.space_uuid, {"uuid": new.uuid})
        for index, new in enumerate(batch)
        if new.idempotency is not None
        and index not in settled
        and isinstance(outcomes.get(index), TaskRow)
    ]


def _parent_refusal(parent: TaskRow | None, space_uuid: str) -> HeadwayError | None:
    """Why `parent` cannot take a child in the space, or None if it can."""
    if parent is None or parent.space_uuid != space_uuid:
        return Unprocessable(NOT_A_PARENT)
    if parent.parent_uuid is not None:
        return Unprocessable(
            "parent_uuid is already a step of another task: tasks nest one level only."
        )
    return None


def _job_of(
    row: TaskRow, parents: dict[str, tuple[TaskRow, int]]
) -> tuple[str, str, str, str | None, str | None] | None:
    """The job the new task is in, as `storage.jobs.created` notes it (None: untitled)."""
    if row.title is None:
        return None
    parent_title = None if row.parent_uuid is None else parents[row.parent_uuid][0].title
    key = job_key(row.space_uuid, row.title, row.source, parent_title)
    return cast(str, key), row.space_uuid, row.title, row.source, parent_title
