"""When a task will end (see `headway.domain.estimates`): from the track its reports left beside
its progress, and from how long its job's succeeded runs usually take.

A task with children (a parent) keeps no track: its count is derived from its steps. It is
estimated from the steps done (a running step counting for the part of its own `end` it
reached) over the time since the parent was created, blended with its job's usual
duration by the part of it elapsed (its count is of the steps made so far), and never
below its running steps' own time left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

from ..background.loops import Parts
from ..caches.links import NO_SHARED_TASK
from ..caches.usual import UsualDurations
from ..domain.errors import NotFound
from ..domain.estimates import Basis, Estimate, Track, estimate
from ..domain.jobs import USUAL_FROM, USUAL_RUNS, Usual, job_key, usual
from ..domain.schemas import EstimateOut
from ..domain.tasks import Progress, TaskRow
from ..ops.dependencies import unavailable
from ..storage import jobs
from .context import Stores
from .families import Families
from .shares import Shares

log = logging.getLogger("headway")

# A parent's own time left is never below its running steps'; this many of them, the
# newest, are estimated for it (a family's running steps are few, but may be thousands).
STEPS_ESTIMATED = 32


class Estimates:
    """`GET /tasks/{t}/estimate` and its share link's twin."""

    def __init__(self, stores: Stores, families: Families, shares: Shares) -> None:
        self._stores = stores
        self._families = families
        self._shares = shares
        self.usual_kept = UsualDurations()
        self._parts = Parts("estimates")
        stores.writes.register(self.usual_kept)

    async def of_tasks(self, task_uuids: Sequence[str]) -> dict[str, Estimate]:
        """The estimates of those of these tasks that exist and are running, by uuid (as
        the live streams send them beside their tasks): their jobs' usual durations read
        in one go. A task whose estimate fails is left out (`loops.Parts`, logged once)."""
        families = []
        for task_uuid in task_uuids:
            try:
                row, children = await self._families.get(task_uuid)
            except NotFound:
                continue  # deleted meanwhile
            if not row.finished:
                families.append((row, children))
        usuals = await self._usuals([row for row, _ in families])
        found = {}
        for row, children in families:
            look = partial(self._estimate, row, children, usuals.get(row.uuid))
            estimate = await self._parts.run(f"task {row.uuid}", look, None)
            if estimate is not None:
                found[row.uuid] = estimate
        return found

    async def shown(self, task_uuids: Sequence[str]) -> dict[str, EstimateOut]:
        """`of_tasks` as the live streams send it; never raises: estimates that cannot be
        read (a dependency down, or a fault, logged) are left out, and the tasks' next
        events carry them."""
        try:
            found = await self.of_tasks(task_uuids)
        except Exception as exc:
            if unavailable(exc):
                log.warning("live: estimates not read (%s)", type(exc).__name__)
            else:
                log.exception("live: estimates not read")
            return {}
        return {uuid: EstimateOut.of(estimate) for uuid, estimate in found.items()}

    async def of_task(self, task_uuid: str) -> Estimate:
        """The task's estimate now; NotFound if there is no such task."""
        return (await self.read(task_uuid))[0]

    async def read(self, task_uuid: str) -> tuple[Estimate, int]:
        """`of_task`, and the tasks it read (1, and a parent's steps), as a read is rated."""
        row, children = await self._families.get(task_uuid)
        return await self._estimate(row, children, await self.usual(row)), 1 + len(children)

    async def read_shared(self, share_uuid: str, task_id: str) -> tuple[Estimate, int]:
        """The estimate of the task `task_id` names under the link, and the tasks it read;
        NotFound if the link or the task is unknown."""
        link, space_uuid = await self._shares.kept_space_of(share_uuid)
        task_uuid = await self._shares.ids.task_of(link, space_uuid, task_id)
        try:
            row, children = await self._families.get(task_uuid)
        except NotFound:
            raise NotFound(NO_SHARED_TASK) from None
        return await self._estimate(row, children, await self.usual(row)), 1 + len(children)

    async def _estimate(
        self, row: TaskRow, children: Sequence[TaskRow], known: Usual | None
    ) -> Estimate:
        store = self._stores.progress
        track: Track | None = None
        steps_left: tuple[float, Basis] | None = None
        if children:
            steps = await store.get_many([child.uuid for child in children])
            current: float | None = steps_done(children, steps)
            end: float | None = len(children)
            if not row.finished:
                steps_left = await self._steps_left(children, steps)
        else:
            progress = await store.get(row.uuid)
            current = None if progress is None else progress.current
            end = None if progress is None else progress.end
            if progress is not None and not row.finished:
                track = await store.track(row.uuid)
        return estimate(
            now_us=self._stores.clock.now_us(),
            created_at_us=row.created_at_us,
            track=track,
            current=current,
            end=end,
            usual=known,
            finished_at_us=row.finished_at_us,
            mean=bool(children),
            steps_left=steps_left,
        )

    async def _steps_left(
        self, children: Sequence[TaskRow], steps: Sequence[Progress | None]
    ) -> tuple[float, Basis] | None:
        """The longest time left among a parent's running steps (the newest
        `STEPS_ESTIMATED` of those that reported), and what it comes from; None when none
        has one."""
        running = [
            child
            for child, progress in zip(children, steps, strict=True)
            if not child.finished and progress is not None
        ][-STEPS_ESTIMATED:]
        if not running:
            return None
        usuals = await self._usuals(running)
        found = [await self._estimate(child, (), usuals.get(child.uuid)) for child in running]
        told = [(e.remaining_s, e.basis) for e in found if e.remaining_s is not None and e.basis]
        return max(told, key=lambda left: left[0]) if told else None

    async def usual(self, row: TaskRow) -> Usual | None:
        """How long the task's job usually takes (None: it is in no job, or its job has
        fewer than 5 succeeded runs)."""
        return (await self._usuals([row])).get(row.uuid)

    async def _usuals(self, rows: Sequence[TaskRow]) -> dict[str, Usual | None]:
        """Each task's job's usual duration, by task: kept (`caches.usual`), else read for
        all of them at once: the jobs' counts, then the runs of those with enough."""
        of_task: dict[str, tuple[str, str]] = {}  # task -> (job, space)
        for row in rows:
            parent_title = None
            if row.parent_uuid is not None:
                parent, _ = await self._families.get(row.parent_uuid)
                parent_title = parent.title
            job = job_key(row.space_uuid, row.title, row.source, parent_title)
            if job is not None:
                of_task[row.uuid] = (job, row.space_uuid)
        kept, now_us = self.usual_kept, self._stores.clock.now_us()
        found: dict[str, Usual | None] = {}
        missing: dict[str, str] = {}  # job -> space
        for job, space_uuid in of_task.values():
            held = kept.get(job, now_us)
            if held is not None:
                found[job] = held[0]
            else:
                missing[job] = space_uuid
        if missing:
            generation = kept.generation
            async with self._stores.db.read() as fetch:
                counts = await jobs.succeeded_counts(fetch, list(missing))
                enough = [job for job in missing if counts.get(job, 0) >= USUAL_FROM]
                runs = await jobs.newest_runs(fetch, enough, USUAL_RUNS) if enough else {}
            for job, space_uuid in missing.items():
                succeeded = runs[job][0] if job in runs else []
                known = usual([max(0.0, (done - began) / 1e6) for began, done in succeeded])
                found[job] = known
                kept.keep(job, space_uuid, known, now_us, generation)
        return {task: found[job] for task, (job, _) in of_task.items()}


def steps_done(children: Sequence[TaskRow], steps: Sequence[Progress | None]) -> float:
    """A parent's steps done: each finished step 1, each running one the part of its `end`
    its `current` reached (none without both)."""
    done = 0.0
    for child, progress in zip(children, steps, strict=True):
        if child.finished:
            done += 1
        elif progress is not None and progress.current is not None and progress.end:
            done += min(1.0, max(0.0, progress.current / progress.end))
    return done
