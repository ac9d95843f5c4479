"""When each space was last used, noted coarsely: a create, a report or a read marks its
space active, and what was marked is written at most once per space per hour
(`ACTIVITY_GRAIN_US`), by `flush`, so that reads and reports cost no write. Retention
(`sweeper`) deletes spaces idle for longer than `HEADWAY_SPACE_RETENTION`."""

from __future__ import annotations

from ..domain.clock import Clock
from ..storage import queries
from ..storage.database import Database, chunks

# Activity is known to within this much: a space is written active at most this often.
ACTIVITY_GRAIN_US = 3600 * 1_000_000
# Spaces whose last noted hour is remembered; past that, the older half is forgotten (the
# only cost: one more write for those spaces).
NOTED = 100_000
AT_ONCE = 500


class Activity:
    """Spaces used since the last `flush`, each noted once per hour."""

    def __init__(self, clock: Clock, db: Database) -> None:
        self._clock = clock
        self._db = db
        self._noted: dict[str, int] = {}  # space -> the hour it was last noted in
        self._pending: dict[str, int] = {}  # space -> when it was used, to write

    def note(self, space_uuid: str) -> None:
        """The space was used now (cheap: a lookup, most of the time)."""
        now_us = self._clock.now_us()
        hour = now_us // ACTIVITY_GRAIN_US
        if self._noted.get(space_uuid) == hour:
            return
        noted = self._noted
        if len(noted) >= NOTED:
            for old in list(noted)[: NOTED // 2]:
                del noted[old]
        noted[space_uuid] = hour
        self._pending[space_uuid] = now_us

    async def flush(self) -> int:
        """Write what was noted; how many spaces. (A space deleted meanwhile has its
        activity written all the same, harmlessly: it stays deleted.)"""
        pending, self._pending = self._pending, {}
        if not pending:
            return 0
        items = sorted(pending.items())
        try:
            async with self._db.write() as st:
                for chunk in chunks(items, AT_ONCE):
                    await queries.note_active(st, chunk)
        except BaseException:
            for uuid, at_us in items:  # written next time
                self._pending.setdefault(uuid, at_us)
            raise
        return len(items)
