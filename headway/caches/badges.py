"""What each badge said last, kept a moment so that a badge asked for again and again
costs less than a task read."""

from __future__ import annotations

from typing import ClassVar

from ..badges.states import Badge
from ..domain.tasks import Changed
from .bounded import Bounded

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
        # badge, space, kept until (µs)
        self._kept: Bounded[Key, tuple[Badge, str, int]] = Bounded(
            count=held, on_drop=self._dropped
        )
        self._of_space: dict[str, set[Key]] = {}
        self._generations: dict[str, int] = {}  # of the spaces with badges kept or read

    def get(self, key: Key, now_us: int) -> Badge | None:
        found = self._kept.get(key)
        return None if found is None or found[2] <= now_us else found[0]

    def generation(self, space_uuid: str) -> int:
        """Take before reading what a badge of the space shows; give it to `keep`."""
        return self._generations.setdefault(space_uuid, 0)

    def keep(self, key: Key, space_uuid: str, badge: Badge, now_us: int, generation: int) -> None:
        if self._generations.get(space_uuid) != generation:
            return  # the space changed (or was let go) while it was read
        self._of_space.setdefault(space_uuid, set()).add(key)
        self._kept.put(key, (badge, space_uuid, now_us + KEPT_US))

    def _dropped(self, key: Key, held: tuple[Badge, str, int]) -> None:
        """The bound pushed `key` out: its space keeps no note of it."""
        space_uuid = held[1]
        keys = self._of_space.get(space_uuid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._of_space[space_uuid]
                self._generations.pop(space_uuid, None)

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        generations = self._generations
        if space_uuid in generations:  # a badge of the space is kept or being read
            generations[space_uuid] += 1
            kept = self._of_space.pop(space_uuid, None)
            if kept:
                self._kept.forget(*kept)
