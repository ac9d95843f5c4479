"""Several instances sharing PostgreSQL and Redis: none sees the others' writes, so what
each caches carries a version kept in Redis (see `caches.families`), a report's write
checks it in the same round trip as the write, and changes cross instances over Redis
pub/sub (`coherence.redis_feed`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..caches.families import FamilyCache, VersionedFamilyCache
from ..caches.spaces import ShownTasks, space_version_key
from ..domain.tasks import Changed, FamilyVersion, Progress
from ..progress.redis import RedisProgressStore
from .feed import TASK, Change, Told, tell
from .redis_feed import RedisFeed

log = logging.getLogger("headway")

# Versions bumped per round trip.
BUMPS_AT_ONCE = 1000
# Changes that leave every cached family and space's rows as they were.
_NO_BUMP = frozenset({Changed.REPORT, Changed.REVOKE})


class SeveralInstances:
    """`Coherence` for instances sharing a Redis progress store."""

    def __init__(self, store: RedisProgressStore) -> None:
        self._store = store
        self.feed = RedisFeed(store.client)

    def family_cache(self) -> FamilyCache:
        return VersionedFamilyCache()

    def shown_tasks(self) -> ShownTasks | None:
        return None

    def head_shows_space(self, rows_held: bool) -> bool:
        return rows_held

    async def version(self, key: str) -> FamilyVersion:
        return await self._store.family_version(key)

    async def put(
        self, told: Told, progress: Progress, version: FamilyVersion, client: str, finished: bool
    ) -> tuple[FamilyVersion | None, bool]:
        # The change is announced to the other instances by the write itself.
        change = Change(TASK, told.space_uuid, told.task_uuid, told.other)
        note = self.feed.announcement(change)
        current = await self._store.put_if_family(
            told.task_uuid,
            progress,
            told.space_uuid,
            version,
            note,
            client=client,
            finished=finished,
        )
        return current, current is None and note is not None

    async def announce(self, told: Sequence[Told]) -> None:
        if any(each.kind not in _NO_BUMP for each in told):
            try:
                await self._bump(told)
            except Exception as exc:
                # Other instances' cached families are trusted at most
                # `caches.families.VERSIONED_MAX_AGE_US`.
                log.warning("a change could not be announced to other instances (%s)", exc)
        tell(self.feed, told)

    async def _bump(self, told: Sequence[Told]) -> None:
        """New versions of the families and spaces' rows the changes touched, and the
        spaces dropped marked so."""
        store = self._store
        keys: dict[str, None] = {}
        for each in told:
            kind = each.kind
            if kind in _NO_BUMP:
                continue
            if kind is Changed.DROP:
                await store.drop_space(each.space_uuid)
            elif kind is Changed.CREATE:
                # A new task is in no cache yet: only its parent's family changed.
                if each.other is not None:
                    keys[each.other] = None
            else:
                keys[each.task_uuid] = None
                if each.other is not None and kind is not Changed.PRUNE:
                    keys[each.other] = None
            keys[space_version_key(each.space_uuid)] = None
        bumped = list(keys)
        for start in range(0, len(bumped), BUMPS_AT_ONCE):
            await store.bump_families(*bumped[start : start + BUMPS_AT_ONCE])

    async def close(self) -> None:
        await self.feed.close()
