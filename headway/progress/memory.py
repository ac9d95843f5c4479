"""Progress in this process's memory: the embedded default, within a byte budget."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Sequence

from .. import metrics
from ..clock import Clock
from ..domain import Progress
from . import Measurement, ProgressBudgetFull
from .feed import LocalFeed

# What one entry costs beyond its values' JSON text: the dict slots, the uuid key, the
# Progress struct and its numbers (measured with tracemalloc: about 280 bytes).
ENTRY_BYTES = 300
# New entries are admitted only while the store (or the space) is below this share of
# its budget; the rest is headroom for tasks that already report, so they keep working.
ADMIT_NEW_BELOW = 0.9


def entry_bytes(progress: Progress) -> int:
    """What an entry is charged against the budget."""
    return ENTRY_BYTES + len(progress.values)


class Held(Progress, frozen=True, gc=False, array_like=True):
    """Progress as the store holds it: with its space, whose share of the budget it uses
    (interned: one string per space, however many tasks)."""

    space_uuid: str


class MemoryProgressStore:
    """Progress in an ordered dict, oldest write first, within a byte budget.

    Every entry lives for the same `ttl`, so the oldest write is always the first to
    expire: each write drops expired entries from the front, and the store never holds
    more than what was written within one `ttl`.

    The budget bounds what the store holds (`budget_bytes` in all, `space_bytes` per
    space). `admit` decides before a write: a new entry needs the store and its space
    below 90% of their budgets; a rewrite that grows an entry needs room for the growth
    under the full budget; a rewrite that does not grow always passes.
    """

    name = "memory"

    def __init__(
        self,
        ttl_seconds: int,
        clock: Clock,
        *,
        budget_bytes: int = 512 * 1024**2,
        space_bytes: int | None = None,
    ) -> None:
        self._ttl_us = ttl_seconds * 1_000_000
        self._clock = clock
        self._entries: OrderedDict[str, Held] = OrderedDict()
        self._space_used: dict[str, int] = {}
        self.budget_bytes = budget_bytes
        self.space_bytes = budget_bytes if space_bytes is None else space_bytes
        self.bytes_used = 0

    async def get(self, task_uuid: str) -> Progress | None:
        entry = self._entries.get(task_uuid)
        if entry is None or entry.updated_at_us + self._ttl_us <= self._clock.now_us():
            return None
        return entry

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        oldest_live = self._clock.now_us() - self._ttl_us
        entries = self._entries
        if not entries or next(iter(entries.values())).updated_at_us > oldest_live:
            # The oldest write is live, so every entry is: no entry to check one by one.
            return list(map(entries.get, task_uuids))
        found: list[Progress | None] = []
        for uuid in task_uuids:
            entry = self._entries.get(uuid)
            found.append(entry if entry is not None and entry.updated_at_us > oldest_live else None)
        return found

    def admit(self, task_uuid: str, space_uuid: str, progress: Progress) -> None:
        """Raise ProgressBudgetFull if writing `progress` would take the store or its
        space over budget."""
        old = self._entries.get(task_uuid)
        growth = len(progress.values) - (len(old.values) if old is not None else -ENTRY_BYTES)
        if growth <= 0 or self._fits(space_uuid, growth, old is not None):
            return
        self._drop_expired()  # expired progress frees its room: look again
        old = self._entries.get(task_uuid)
        growth = len(progress.values) - (len(old.values) if old is not None else -ENTRY_BYTES)
        if growth <= 0:
            return
        share = 1.0 if old is not None else ADMIT_NEW_BELOW
        if self._space_used.get(space_uuid, 0) + growth > self.space_bytes * share:
            metrics.refused("space_budget")
            raise ProgressBudgetFull("space")
        if self.bytes_used + growth > self.budget_bytes * share:
            metrics.refused("progress_budget")
            raise ProgressBudgetFull("store")

    def _fits(self, space_uuid: str, growth: int, rewrite: bool) -> bool:
        share = 1.0 if rewrite else ADMIT_NEW_BELOW
        return (
            self.bytes_used + growth <= self.budget_bytes * share
            and self._space_used.get(space_uuid, 0) + growth <= self.space_bytes * share
        )

    async def put(self, task_uuid: str, progress: Progress, space_uuid: str) -> None:
        entries = self._entries
        old = entries.pop(task_uuid, None)
        if old is None:
            space_uuid = sys.intern(space_uuid)
            delta = ENTRY_BYTES + len(progress.values)
        else:
            space_uuid = old.space_uuid
            delta = len(progress.values) - len(old.values)
        entries[task_uuid] = Held(
            progress.current, progress.end, progress.values, progress.updated_at_us, space_uuid
        )
        self.bytes_used += delta
        self._space_used[space_uuid] = self._space_used.get(space_uuid, 0) + delta
        first = next(iter(entries.values()))
        if first.updated_at_us + self._ttl_us <= self._clock.now_us():
            self._drop_expired()

    async def delete(self, task_uuids: Sequence[str]) -> None:
        entries, used = self._entries, self._space_used
        for uuid in task_uuids:
            entry = entries.pop(uuid, None)
            if entry is None:
                continue
            size = entry_bytes(entry)
            self.bytes_used -= size
            left = used[entry.space_uuid] - size
            if left:
                used[entry.space_uuid] = left
            else:
                del used[entry.space_uuid]

    def _drop_expired(self) -> None:
        oldest_live = self._clock.now_us() - self._ttl_us
        entries = self._entries
        used = self._space_used
        while entries:
            first = next(iter(entries.values()))
            if first.updated_at_us > oldest_live:
                return
            entries.popitem(last=False)
            size = entry_bytes(first)
            self.bytes_used -= size
            left = used[first.space_uuid] - size
            if left:
                used[first.space_uuid] = left
            else:
                del used[first.space_uuid]

    def change_feed(self) -> LocalFeed:
        """A feed within this process: progress in its memory serves no other."""
        return LocalFeed()

    async def gauges(self) -> list[Measurement]:
        """Entries (expired ones not yet dropped included) and bytes held, and the budget:
        plain reads of counts the store keeps."""
        return [
            Measurement(
                "headway_live_tasks", "Tasks with progress held in memory.", len(self._entries)
            ),
            Measurement("headway_progress_bytes", "Bytes of live progress held.", self.bytes_used),
            Measurement(
                "headway_progress_budget_bytes",
                "Bytes of live progress allowed.",
                self.budget_bytes,
            ),
        ]

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._entries.clear()
        self._space_used.clear()
        self.bytes_used = 0
