"""Progress in this process's memory: the embedded default."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from ..clock import Clock
from ..domain import Progress


class MemoryProgressStore:
    """Progress in an ordered dict, oldest write first.

    Every entry lives for the same `ttl`, so the oldest write is always the first to
    expire: each write drops expired entries from the front, and the store never holds
    more than what was written within one `ttl`.
    """

    name = "memory"

    def __init__(self, ttl_seconds: int, clock: Clock) -> None:
        self._ttl_us = ttl_seconds * 1_000_000
        self._clock = clock
        self._entries: OrderedDict[str, Progress] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, task_uuid: str) -> Progress | None:
        entry = self._entries.get(task_uuid)
        if entry is None or entry.updated_at_us + self._ttl_us <= self._clock.now_us():
            return None
        return entry

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        oldest_live = self._clock.now_us() - self._ttl_us
        found = []
        for uuid in task_uuids:
            entry = self._entries.get(uuid)
            found.append(entry if entry is not None and entry.updated_at_us > oldest_live else None)
        return found

    async def put(self, task_uuid: str, progress: Progress) -> None:
        entries = self._entries
        entries[task_uuid] = progress
        entries.move_to_end(task_uuid)
        self._drop_expired()

    def _drop_expired(self) -> None:
        oldest_live = self._clock.now_us() - self._ttl_us
        entries = self._entries
        while entries:
            first = next(iter(entries.values()))
            if first.updated_at_us > oldest_live:
                return
            entries.popitem(last=False)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._entries.clear()
