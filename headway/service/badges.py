"""Badges of a share link: what the badge of its space, or of one task by its id, shows,
read as the link shows it (see `badges.states`)."""

from __future__ import annotations

from ..badges.states import SPACE_TASKS, Badge, shown, space_badge, task_badge
from ..errors import NotFound
from .context import Stores
from .reads import SpaceReads
from .shares import NO_SHARED_TASK, Shares
from .tasks import Tasks


class Badges:
    """Reads what a badge shows: the newest tasks of a link's space, or one task of it."""

    def __init__(self, stores: Stores, shares: Shares, reads: SpaceReads, tasks: Tasks) -> None:
        self._clock = stores.clock
        self._shares = shares
        self._reads = reads
        self._tasks = tasks

    async def space(self, share_uuid: str, label: str | None = None) -> Badge:
        """The badge of the link's space; NotFound if the link is unknown or revoked."""
        space_uuid = await self._shares.space_of(share_uuid)
        head, pages = await self._reads.read(space_uuid, limit=SPACE_TASKS)
        tasks = shown([task async for page in pages for task in page])
        return space_badge(head["title"], tasks, self._clock.now_us(), label)

    async def task(self, share_uuid: str, task_id: str, label: str | None = None) -> Badge:
        """The badge of the task `task_id` names under the link; NotFound if the link or
        the task is unknown (a deleted task included)."""
        _, task_uuid = await self._shares.task_of(share_uuid, task_id)
        try:
            task = await self._tasks.get(task_uuid)
        except NotFound:
            raise NotFound(NO_SHARED_TASK) from None
        return task_badge(shown(task), self._clock.now_us(), label)
