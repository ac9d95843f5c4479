"""One process serving alone (progress in its memory): it sees every write, so its caches
are current by construction and its change feed reaches every watcher there is."""

from __future__ import annotations

from collections.abc import Sequence

from ..caches.families import ALONE, FamilyCache
from ..caches.spaces import ShownTasks
from ..domain.tasks import FamilyVersion, Progress
from ..progress import ProgressStore
from .feed import LocalFeed, Told, tell


class OneProcess:
    """`Coherence` for a process that serves alone."""

    def __init__(self, progress: ProgressStore) -> None:
        self._progress = progress
        self.feed = LocalFeed()

    def family_cache(self) -> FamilyCache:
        return FamilyCache()

    def shown_tasks(self) -> ShownTasks | None:
        return ShownTasks()

    def head_shows_space(self, rows_held: bool) -> bool:
        return True

    async def version(self, key: str) -> FamilyVersion:
        return ALONE

    async def put(
        self, told: Told, progress: Progress, version: FamilyVersion, client: str, finished: bool
    ) -> tuple[FamilyVersion | None, bool]:
        await self._progress.put(
            told.task_uuid, progress, told.space_uuid, client=client, finished=finished
        )
        return None, False

    async def announce(self, told: Sequence[Told]) -> None:
        listened = self.feed.listened
        for each in told:  # most writes are of spaces no one here watches: told no one
            if each.space_uuid in listened:
                tell(self.feed, told)
                return

    async def close(self) -> None:
        await self.feed.close()
