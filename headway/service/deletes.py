"""Deleting: a task with its children, or a whole space with everything it holds, each in
one short transaction, a unit of work that tells every cache, instance and stream (a
space's rows are removed afterwards by the sweeper: see `storage.deletes`)."""

from __future__ import annotations

from ..domain.errors import NotFound
from ..domain.tasks import Changed, canonical_uuid
from ..ops import metrics
from ..storage import deletes, queries
from .context import NO_SPACE, NO_TASK, Stores, canonical
from .families import Families


class Deletes:
    """Removes what its owner asks to remove: nothing of it can be read afterwards."""

    def __init__(self, stores: Stores, families: Families) -> None:
        self._stores = stores
        self._families = families

    async def task(self, task_uuid: str) -> None:
        """Delete a task, its children and their progress. Its parent's aggregate follows;
        a parent whose remaining steps have all finished finishes, with its one event."""
        key = canonical(task_uuid, NO_TASK)
        stores = self._stores
        async with stores.writes.unit() as unit:
            async with unit.transaction() as st:
                found = await deletes.family_uuids(st.rows, key)
                if found is None:
                    raise NotFound(NO_TASK)
                space_uuid, parent_uuid, children = found
                if parent_uuid is not None:
                    await queries.lock_task(st, parent_uuid)
                gone = [*children, key]
                await deletes.delete_tasks(st, gone)
                if parent_uuid is not None:  # one step less, or one top-level task less
                    await queries.count_children(st, {parent_uuid: -1})
                else:
                    await queries.count_top_level(st, space_uuid, -1)
                unit.deleted(space_uuid, gone, parent_uuid)
                finished_parent = False
                if parent_uuid is not None:
                    now_us = stores.clock.now_us()
                    finished_parent = await self._families.finish_if_steps_done(
                        unit, parent_uuid, now_us
                    )
                    if finished_parent:
                        unit.changed(Changed.FINISH, space_uuid, parent_uuid)
            metrics.deleted("owner", len(gone))
            if finished_parent:
                assert parent_uuid is not None
                await self._families.release(parent_uuid)

    async def space(self, space_uuid: str) -> None:
        """Delete a space and everything of it: tasks and their progress, webhooks,
        channels, share links and undelivered events; its streams end everywhere.

        What the owner sees is done when this returns, in one short transaction: the space
        is marked deleted, so that no read finds it or anything of it, no create adds to
        it and nothing of it is delivered. Its rows (up to millions of tasks) are removed
        after, a batch at a time, by the sweeper, woken once this is committed; if this
        process stops first, by any instance's sweeper later."""
        key = canonical_uuid(space_uuid)
        if key is None or not await self._delete_space(key, "owner"):
            raise NotFound(NO_SPACE)

    async def idle_spaces(self, idle_before_us: int, limit: int) -> list[str]:
        """Up to `limit` spaces with no activity noted since before `idle_before_us`."""
        return await deletes.idle_spaces(self._stores.db.fetch, idle_before_us, limit)

    async def idle_space(self, space_uuid: str, idle_before_us: int) -> bool:
        """Delete the space as `space` does if it has been idle since before
        `idle_before_us` still (retention); whether it was. The sweeper calling this
        removes its rows next: it is not woken."""
        return await self._delete_space(space_uuid, "retention", idle_before_us)

    async def _delete_space(self, key: str, reason: str, idle_before_us: int | None = None) -> bool:
        stores = self._stores
        async with stores.writes.transaction() as unit:
            gone = await deletes.delete_space(
                unit.st, key, stores.clock.now_us(), idle_before_us=idle_before_us
            )
            if gone:
                unit.dropped(key, sweep=idle_before_us is None)
        if gone:
            metrics.deleted(reason, 0, 1)
        return gone
