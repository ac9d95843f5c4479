"""Deleting: a task with its children, or a whole space with everything it holds, each in
one transaction, then told to every cache, instance and stream through `Changes`."""

from __future__ import annotations

from .. import metrics
from ..domain import Changed, canonical_uuid
from ..errors import NotFound
from ..storage import deletes, queries
from .context import NO_SPACE, NO_TASK, Stores
from .families import Families


class Deletes:
    """Removes what its owner asks to remove: nothing of it can be read afterwards."""

    def __init__(self, stores: Stores, families: Families) -> None:
        self._stores = stores
        self._families = families

    async def task(self, task_uuid: str) -> None:
        """Delete a task, its children and their progress. Its parent's aggregate follows;
        a parent whose remaining steps have all finished finishes, with its one event."""
        key = canonical_uuid(task_uuid)
        if key is None:
            raise NotFound(NO_TASK)
        stores = self._stores
        finished_parent = False
        async with stores.db.write() as st:
            found = await deletes.family_uuids(st.rows, key)
            if found is None:
                raise NotFound(NO_TASK)
            space_uuid, parent_uuid, children = found
            if parent_uuid is not None:
                await queries.lock_task(st, parent_uuid)
            await deletes.delete_tasks(st, [*children, key])
            await queries.count_deleted(st, space_uuid, parent_uuid)
            if parent_uuid is not None:
                now_us = stores.clock.now_us()
                finished_parent = await self._families.finish_if_steps_done(st, parent_uuid, now_us)
        gone = [*children, key]
        metrics.deleted("owner", len(gone))
        await stores.progress.delete(gone)
        await stores.changes.deleted(space_uuid, gone, parent_uuid)
        if finished_parent:
            assert parent_uuid is not None
            self._families.on_event()
            await self._families.release(parent_uuid)
            await stores.changes.changed(Changed.FINISH, space_uuid, parent_uuid)

    async def space(self, space_uuid: str, reason: str = "owner") -> None:
        """Delete a space and everything of it: tasks and their progress, webhooks,
        channels, share links and undelivered events; its streams end everywhere."""
        key = canonical_uuid(space_uuid)
        if key is None:
            raise NotFound(NO_SPACE)
        stores = self._stores
        async with stores.db.write() as st:
            gone = await deletes.delete_space(st, key)
        if gone is None:
            raise NotFound(NO_SPACE)
        metrics.deleted(reason, len(gone), 1)
        await stores.progress.delete(gone)
        await stores.changes.deleted(key, gone, whole_space=True)
