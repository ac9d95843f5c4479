"""What every instance must agree on, behind one protocol chosen once at start
(`app.make_coherence`): the versions of what caches hold, whether a cached family may decide a
write, and the publishing of what changed to every instance's live streams.

- `OneProcess` (`coherence.local`): progress in this process's memory, so this process
  is the only one serving and sees every write: what its caches hold is current by
  construction (each write tells them before it answers), a version is a constant, a
  write checks nothing, and the change feed is this process's (`feed.LocalFeed`).
- `SeveralInstances` (`coherence.shared`): progress in Redis, shared by instances that
  do not see each other's writes: versions live in Redis and move after each commit,
  a report's write checks the version of the family it was decided on in the same round
  trip, cached entries are trusted for a bounded time, and the change feed crosses
  instances over Redis (`coherence.redis_feed`).

The service asks neither which one it runs on: a report reads a family's version, writes
with it, and learns whether the family changed meanwhile (never, in one process).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..caches.families import FamilyCache
from ..caches.spaces import ShownTasks
from ..domain.tasks import FamilyVersion, Progress
from .feed import ChangeFeed, Told


class FamilyVersions(Protocol):
    """Where the versions of what several instances cache live, and the write that
    checks them: the progress store they share (the Redis store; see
    `coherence.shared`)."""

    async def family_version(self, task_uuid: str) -> FamilyVersion:
        """The version of the task's family now."""

    async def bump_families(self, *task_uuids: str | None) -> None:
        """Mark these families changed, so that versions read before no longer match.
        Call after the change is committed, before the request that made it answers."""

    async def drop_space(self, space_uuid: str) -> None:
        """Mark the space deleted, so that no family of it read before passes
        `put_if_family` again (for longer than any such family is trusted). Call after
        the delete is committed, before it answers."""

    async def put_if_family(
        self,
        task_uuid: str,
        progress: Progress,
        space_uuid: str,
        version: FamilyVersion,
        announce: tuple[str, str] | None = None,
        *,
        client: str = "unknown",
        finished: bool = False,
    ) -> FamilyVersion | None:
        """`put`, atomically only if the task's family is still at `version` and its space
        was not dropped: returns None once written, or the family's version now (or one
        that matches nothing, the space dropped), having written nothing.
        `announce`: a (channel, message) published once written, in the same call.
        Counted for `client` as `put` counts a write (raising as it does)."""


class Coherence(Protocol):
    """How this instance's caches and streams stay true to every instance's writes."""

    feed: ChangeFeed

    def family_cache(self) -> FamilyCache:
        """A new cache of families, trusted as this coherence allows (a finish is decided
        as it says: `FamilyCache.decides_finish`)."""

    def shown_tasks(self) -> ShownTasks | None:
        """A new cache of tasks' answers, reused while a task's progress reads back as
        the very object last written: only where progress is in this process's memory
        (read from Redis, it is a new object each time: None)."""

    def head_shows_space(self, rows_held: bool) -> bool:
        """Whether a space's head cached here shows the space still exists (else the
        database is asked): always for a process alone, which sees every delete; among
        several instances, only while its rows are held here at their version now
        (`rows_held`)."""

    async def version(self, key: str) -> FamilyVersion:
        """The version now of a family (by its task's uuid) or of a space's rows
        (`caches.spaces.space_version_key`): read it before reading what it
        versions."""

    async def put(
        self, told: Told, progress: Progress, version: FamilyVersion, client: str, finished: bool
    ) -> tuple[FamilyVersion | None, bool]:
        """Write the progress of `told`'s task (a report of it, by `client`; `finished`:
        the task is) if its family is still at `version`: (None, whether `told` was
        announced to the other instances with the write) once written, or (the family's
        version now, False) having written nothing."""

    async def announce(self, told: Sequence[Told]) -> None:
        """Tell every instance what a unit changed, after its commit: the versions of
        what it touched move on, and the change feed wakes the streams. Never raises."""

    async def close(self) -> None:
        """Stop its feed."""
