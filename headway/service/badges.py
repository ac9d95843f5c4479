"""Badges of a share link: what the badge of its space, or of one task by its id, shows,
read as the link shows it (see `badges.states`), and kept a moment so that a badge asked
for again and again costs less than a task read."""

from __future__ import annotations

from typing import ClassVar

from ..badges.states import SPACE_TASKS, Badge, shown, space_badge, task_badge
from ..domain import Changed
from ..errors import NotFound
from .context import Stores
from .reads import SpaceReads
from .shares import NO_SHARED_TASK, Shares
from .tasks import Tasks

# Badges kept, over every link; and for how long at most, in µs: what a badge says can
# change without a write (a task stalls, progress expires, another instance writes), and
# a second late is well within what an image proxy keeps it (`api.badges.BADGE_MAX_AGE`).
BADGES_KEPT = 10_000
KEPT_US = 1_000_000

Key = tuple[str, str, str | None]  # (the link as written, the task's id or "", the label)


class KeptBadges:
    """What each badge asked for last said, by link, task id and label, for at most
    KEPT_US; any change of its space (a write, a revoke, the space's delete) drops it at
    once. A read that a change of its space overtook keeps nothing (`generation`)."""

    hears: ClassVar[frozenset[Changed]] = frozenset(Changed)

    def __init__(self, held: int = BADGES_KEPT) -> None:
        self._held = held
        self._kept: dict[Key, tuple[Badge, str, int]] = {}  # badge, space, kept until (µs)
        self._of_space: dict[str, set[Key]] = {}
        self._generations: dict[str, int] = {}  # of the spaces with badges kept or read

    def get(self, key: Key, now_us: int) -> Badge | None:
        found = self._kept.get(key)
        if found is None or found[2] <= now_us:
            return None
        return found[0]

    def generation(self, space_uuid: str) -> int:
        """Take before reading what a badge of the space shows; give it to `keep`."""
        return self._generations.setdefault(space_uuid, 0)

    def keep(self, key: Key, space_uuid: str, badge: Badge, now_us: int, generation: int) -> None:
        if self._generations.get(space_uuid) != generation:
            return  # the space changed (or was let go) while it was read
        kept = self._kept
        if key not in kept and len(kept) >= self._held:
            self._drop(next(iter(kept)))  # the one kept longest
        kept[key] = (badge, space_uuid, now_us + KEPT_US)
        self._of_space.setdefault(space_uuid, set()).add(key)

    def _drop(self, key: Key) -> None:
        _, space_uuid, _ = self._kept.pop(key)
        keys = self._of_space.get(space_uuid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._of_space[space_uuid]
                self._generations.pop(space_uuid, None)

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        if space_uuid in self._generations:
            self._generations[space_uuid] += 1
        for key in self._of_space.pop(space_uuid, ()):
            self._kept.pop(key, None)


class Badges:
    """Reads what a badge shows: the newest tasks of a link's space, or one task of it."""

    def __init__(self, stores: Stores, shares: Shares, reads: SpaceReads, tasks: Tasks) -> None:
        self._clock = stores.clock
        self._shares = shares
        self._reads = reads
        self._tasks = tasks
        self.kept = KeptBadges()
        stores.changes.register(self.kept)

    async def space(self, share_uuid: str, label: str | None = None) -> Badge:
        """The badge of the link's space; NotFound if the link is unknown or revoked."""
        key = (share_uuid, "", label)
        now_us = self._clock.now_us()
        badge = self.kept.get(key, now_us)
        if badge is not None:
            return badge
        _, space_uuid = await self._shares.kept_space_of(share_uuid)
        generation = self.kept.generation(space_uuid)
        head, pages = await self._reads.read(space_uuid, limit=SPACE_TASKS)
        tasks = shown([task async for page in pages for task in page])
        badge = space_badge(head["title"], tasks, now_us, label)
        self.kept.keep(key, space_uuid, badge, now_us, generation)
        return badge

    async def task(self, share_uuid: str, task_id: str, label: str | None = None) -> Badge:
        """The badge of the task `task_id` names under the link; NotFound if the link or
        the task is unknown (a deleted task included)."""
        key = (share_uuid, task_id, label)
        now_us = self._clock.now_us()
        badge = self.kept.get(key, now_us)
        if badge is not None:
            return badge
        link, space_uuid = await self._shares.kept_space_of(share_uuid)
        generation = self.kept.generation(space_uuid)
        task_uuid = await self._shares.ids.task_of(link, space_uuid, task_id)
        try:
            task = await self._tasks.get(task_uuid)
        except NotFound:
            raise NotFound(NO_SHARED_TASK) from None
        badge = task_badge(shown(task), now_us, label)
        self.kept.keep(key, space_uuid, badge, now_us, generation)
        return badge
