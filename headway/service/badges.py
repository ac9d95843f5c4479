"""Badges of a share link: what the badge of its space, or of one task by its id, shows,
read as the link shows it (see `badges.states`), and kept a moment so that a badge asked
for again and again costs less than a task read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..badges.states import SPACE_TASKS, Badge, shown, space_badge, task_badge
from ..caches.badges import KeptBadges
from ..caches.links import NO_SHARED_TASK
from ..domain.errors import NotFound
from .context import Stores
from .estimates import Estimates
from .reads import SpaceReads
from .shares import Shares
from .tasks import Tasks


class Badges:
    """Reads what a badge shows: the newest tasks of a link's space, or one task of it."""

    def __init__(
        self,
        stores: Stores,
        shares: Shares,
        reads: SpaceReads,
        tasks: Tasks,
        estimates: Estimates,
    ) -> None:
        self._clock = stores.clock
        self._shares = shares
        self._reads = reads
        self._tasks = tasks
        self._estimates = estimates
        self.kept = KeptBadges()
        stores.writes.register(self.kept)

    async def space(self, share_uuid: str, label: str | None = None) -> Badge:
        """The badge of the link's space; NotFound if the link is unknown or revoked."""

        async def read(link: str, space_uuid: str, now_us: int) -> Badge:
            head, pages = await self._reads.read(space_uuid, limit=SPACE_TASKS)
            tasks = shown([task async for page in pages for task in page])
            return space_badge(head["title"], tasks, now_us, label)

        return await self._kept((share_uuid, "", label), read)

    async def task(self, share_uuid: str, task_id: str, label: str | None = None) -> Badge:
        """The badge of the task `task_id` names under the link; NotFound if the link or
        the task is unknown (a deleted task included)."""

        async def read(link: str, space_uuid: str, now_us: int) -> Badge:
            task_uuid = await self._shares.ids.task_of(link, space_uuid, task_id)
            try:
                task = await self._tasks.get(task_uuid)
                estimate = None if task.finished_at else await self._estimates.of_task(task_uuid)
            except NotFound:
                raise NotFound(NO_SHARED_TASK) from None
            return task_badge(shown(task), now_us, label, estimate)

        return await self._kept((share_uuid, task_id, label), read)

    async def _kept(
        self, key: tuple[str, str, str | None], read: Callable[[str, str, int], Awaitable[Badge]]
    ) -> Badge:
        """The badge kept under `key` (link, task id, label), else the one `read(link,
        space_uuid, now_us)` makes, then kept."""
        now_us = self._clock.now_us()
        badge = self.kept.get(key, now_us)
        if badge is not None:
            return badge
        link, space_uuid = await self._shares.kept_space_of(key[0])
        generation = self.kept.generation(space_uuid)
        badge = await read(link, space_uuid, now_us)
        self.kept.keep(key, space_uuid, badge, now_us, generation)
        return badge
