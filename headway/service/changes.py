"""The one point every write calls once it is stored: `Changes.changed`.

It tells every registered cache what changed (each decides what to drop), then, with
progress in Redis, bumps the versions of the families and of the space's rows that other
instances' caches check (see `storage.families`, `storage.small_spaces`), then tells
the change feed, which wakes the live streams of every instance. Nothing else in the
service drops a cache entry, bumps a version or publishes to the feed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import ClassVar, Protocol

from ..dependencies import unavailable
from ..domain import Changed
from ..progress.feed import DROPPED, PRUNED, RESYNC, REVOKED, TASK, Change, ChangeFeed
from ..storage.families import FamilyVersions
from ..storage.small_spaces import space_version_key

log = logging.getLogger("headway")

# The changes after which other instances' cached families are stale.
_BUMPED = frozenset({Changed.CREATE, Changed.FINISH})


class Cache(Protocol):
    """Anything the service keeps that a write can make stale."""

    # The kinds of change after which it may hold something stale; told of no other.
    hears: ClassVar[frozenset[Changed]]

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """Drop what the change made stale; never waits, never raises."""


class Changes:
    """Where every write says what it changed.

    Invariant: every write that changed (or may have changed: a failed commit may have
    committed all the same) a space's tasks calls `changed` exactly once, after its
    commit and before it answers (a create: `forget` as its batch's commit ends, then
    `announce`), and every cache of spaces or tasks is registered here.
    So once a write has answered, no cache of any instance serves what it replaced: this
    instance's caches dropped it, the others' see a new family version, and the live
    streams were told.
    """

    def __init__(self, feed: ChangeFeed, versions: FamilyVersions | None = None) -> None:
        self.feed = feed
        self.versions = versions  # None: no other instance caches families
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

    async def changed(
        self,
        kind: Changed,
        space_uuid: str,
        task_uuid: str,
        parent_uuid: str | None = None,
        *,
        announced: bool = False,
    ) -> None:
        """`task_uuid` of the space (a child of `parent_uuid`) changed as `kind` says:
        `forget`, then `announce`. Never raises: what follows a commit is best-effort."""
        self.forget(kind, space_uuid, task_uuid, parent_uuid)
        await self.announce(kind, space_uuid, task_uuid, parent_uuid, announced=announced)

    def forget(
        self, kind: Changed, space_uuid: str, task_uuid: str, parent_uuid: str | None = None
    ) -> None:
        """Tell this process's caches (each drops what the change made stale). A batch
        of creates calls it as its commit ends, before any of them is answered (see
        `storage.batch`), and then each create `announce`s itself."""
        for cache in self._hearing[kind]:
            cache.on_change(kind, space_uuid, task_uuid, parent_uuid)

    async def announce(
        self,
        kind: Changed,
        space_uuid: str,
        task_uuid: str,
        parent_uuid: str | None = None,
        *,
        announced: bool = False,
    ) -> None:
        """Tell the other instances (with Redis: a new version of the families they may
        cache) and the change feed. `announced`: the progress store already told the
        other instances' feeds, in the same round trip as the write (see
        `RedisProgressStore.put_if_family`)."""
        change = self.change(kind, space_uuid, task_uuid, parent_uuid)
        try:
            if kind in _BUMPED and self.versions is not None:
                # A new task is in no cache yet: only its parent's family changed, and
                # the rows of its space.
                await self.versions.bump_families(
                    *((parent_uuid,) if kind is Changed.CREATE else (task_uuid, parent_uuid)),
                    space_version_key(space_uuid),
                )
            self.feed.publish(change, announced=announced)
        except Exception as exc:
            # The write is stored: it answers its success all the same. The space's
            # watchers here start over from a snapshot; other instances' cached
            # families are trusted at most `storage.families.VERSIONED_MAX_AGE_US`.
            if unavailable(exc):
                log.warning("a change could not be announced (%s); watchers resync", exc)
            else:
                log.exception("a change could not be announced; watchers resync")
            with contextlib.suppress(Exception):
                self.feed.publish(Change(RESYNC, space_uuid, ""))

    async def deleted(
        self,
        space_uuid: str,
        task_uuids: Sequence[str],
        parent_uuid: str | None = None,
        *,
        whole_space: bool = False,
    ) -> None:
        """Tasks were deleted, or (`whole_space`, no tasks named) the space with everything
        in it: every cache forgets each of them (or everything of the space), the other
        instances see new versions of their families (or the space marked dropped, which
        no family of it they hold passes) and of the space's rows, and the space's streams
        end (`DROPPED`: they have nothing to show) or start over (`RESYNC`: their tasks
        went). Never raises."""
        kind = Changed.DROP if whole_space else Changed.DELETE
        for task_uuid in task_uuids or ("",):
            self.forget(kind, space_uuid, task_uuid, parent_uuid)
        await self._bump_deleted(space_uuid, [*task_uuids, parent_uuid], drop_space=whole_space)
        with contextlib.suppress(Exception):
            self.feed.publish(Change(DROPPED if whole_space else RESYNC, space_uuid, ""))

    async def pruned(
        self, space_uuid: str, task_uuids: Sequence[str], replaced: Sequence[tuple[str, str]]
    ) -> None:
        """`task_uuids` were removed to make room for new tasks (see `service.caps`): the
        oldest finished top-level tasks of the space, each paired in `replaced` with the
        new task that took its place, and their steps, which this process's caches
        forgot as the removal committed. The other instances see new versions of their
        families and of the space's rows; the streams are told which task went for
        which (`PRUNED`): only those it would leave wrong start over, where an owner's
        delete starts every stream of the space over. Never raises."""
        await self._bump_deleted(space_uuid, task_uuids)
        with contextlib.suppress(Exception):
            for task_uuid, new_uuid in replaced:
                self.feed.publish(Change(PRUNED, space_uuid, task_uuid, new_uuid))

    async def _bump_deleted(
        self, space_uuid: str, keys: Sequence[str | None], *, drop_space: bool = False
    ) -> None:
        """With Redis: new versions of the deleted tasks' families (`keys`) and of the
        space's rows, for the other instances' caches; and (`drop_space`) the space marked
        dropped."""
        try:
            if self.versions is not None:
                if drop_space:
                    await self.versions.drop_space(space_uuid)
                keys = [*keys, space_version_key(space_uuid)]
                for start in range(0, len(keys), 1000):
                    await self.versions.bump_families(*keys[start : start + 1000])
        except Exception as exc:
            log.warning("a delete could not be announced to other instances (%s)", exc)

    @staticmethod
    def change(
        kind: Changed, space_uuid: str, task_uuid: str, parent_uuid: str | None = None
    ) -> Change:
        """The change feed's message for a change."""
        if kind is Changed.REVOKE:
            return Change(REVOKED, space_uuid, task_uuid)
        return Change(TASK, space_uuid, task_uuid, parent_uuid)
