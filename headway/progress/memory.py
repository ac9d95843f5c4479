"""Progress in this process's memory: the embedded default, within a byte budget that
spaces and client addresses share fairly."""

from __future__ import annotations

import heapq
import sys
from collections import OrderedDict
from collections.abc import Sequence
from operator import itemgetter

from msgspec.structs import astuple, replace

from ..domain.clock import Clock
from ..domain.estimates import Track, followed, unpack
from ..domain.tasks import Progress
from . import (
    ADMIT_NEW_BELOW,
    NO_CLIENT,
    ROOM_SLACK,
    Measurement,
    ProgressStore,
    refuse,
)

# What one entry costs beyond its values' JSON text, as the process's memory holds it:
# the uuid key, the ordered dict's slot and link, the struct, its numbers and the
# values' bytes object; a finished entry also its place in its writer's order. Python's
# allocator sees 405 and 497 bytes with 11 bytes of values (tracemalloc, 100,000
# entries); the process's RSS grows by about 460 per live entry at 100,000 and at
# 1,000,000 tasks (size classes, dict tables: the bench's `memory_budget`), which is
# what is counted.
# A live entry also keeps its task's track of reports (`estimates.pack`): at most 183
# bytes of MessagePack (eight anchors of fractional counts), a bytes object of 216 that
# Python's allocator gives 224 (a finished entry keeps none). Counted for every live
# entry, whether it has one yet or not, so that a report never changes what its entry
# is charged for a track.
TRACK_BYTES = 230
ENTRY_BYTES = 460 + TRACK_BYTES
KEPT_ENTRY_BYTES = 550


def entry_bytes(progress: Progress, finished: bool = False) -> int:
    """What an entry is charged against the budget."""
    return (KEPT_ENTRY_BYTES if finished else ENTRY_BYTES) + len(progress.values)


class Held(Progress, frozen=True, gc=False, array_like=True):
    """Progress as the store holds it: with its space and the client that wrote it
    (interned: one string per space or client, however many tasks), whether its task has
    finished, and its track of reports (`estimates.pack`; None: none, or finished)."""

    space_uuid: str
    client: str
    finished: bool
    track: bytes | None = None


class MemoryProgressStore(ProgressStore):
    """Progress in an ordered dict, oldest write first, within a byte budget.

    Every entry lives for the same `ttl`, so the oldest write is always the first to
    expire: each write drops expired entries from the front, and the store never holds
    more than what was written within one `ttl`.

    Live progress (of unfinished tasks) counts against the budget (`budget_bytes`), its
    space's allowance (`space_bytes`) and its writer's (`client_bytes`, however many spaces
    the client writes to). `admit` decides before a write: a new entry needs the store,
    its space and its client below 90% of their budgets; a rewrite that grows an entry
    needs room for the growth under the full budgets; a rewrite that does not grow
    always passes. A client over its allowance is refused 429 (`ClientAllowanceFull`), a space
    or the store 503 (`ProgressBudgetFull`).

    Finished progress (see `ProgressStore`) gives way from the client holding the most of
    it first, oldest first; beyond its allowance of finished progress, a client's own
    oldest gives way.
    """

    name = "memory"

    def __init__(
        self,
        ttl_seconds: int,
        clock: Clock,
        *,
        budget_bytes: int = 512 * 1024**2,
        space_bytes: int | None = None,
        client_bytes: int | None = None,
        tracks: bool = True,
    ) -> None:
        self._ttl_us = ttl_seconds * 1_000_000
        self._tracks = tracks  # keep each live task's track of reports (for estimates)
        self._clock = clock
        self.remembers_since_us: int | None = clock.now_us()
        self._entries: OrderedDict[str, Held] = OrderedDict()
        self.budget_bytes = budget_bytes
        self.space_bytes = budget_bytes if space_bytes is None else space_bytes
        self.client_bytes = budget_bytes if client_bytes is None else client_bytes
        self.bytes_used = 0  # every entry, live and finished
        self.live_bytes = 0
        self._space_live: dict[str, int] = {}
        self._client_live: dict[str, int] = {}
        # Finished entries by writer, oldest write first, and the bytes each writer keeps.
        self._kept: dict[str, OrderedDict[str, None]] = {}
        self._kept_bytes: dict[str, int] = {}

    def _live(self, task_uuid: str) -> Held | None:
        entry = self._entries.get(task_uuid)
        if entry is None or entry.updated_at_us + self._ttl_us <= self._clock.now_us():
            return None
        return entry

    async def get(self, task_uuid: str) -> Progress | None:
        return self._live(task_uuid)

    async def track(self, task_uuid: str) -> Track | None:
        entry = self._live(task_uuid)
        return None if entry is None else unpack(entry.track)

    def _followed(self, old: Held | None, progress: Progress) -> bytes | None:
        """The track after `progress` replaced `old` (None: estimates are off). What
        expired is not followed, as in Redis, where it is gone."""
        if not self._tracks:
            return None
        now_us = progress.updated_at_us
        if old is None or old.updated_at_us + self._ttl_us <= now_us:
            return followed(None, now_us, progress.current, progress.end)
        return followed(old.track, now_us, progress.current, progress.end)

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        oldest_live = self._clock.now_us() - self._ttl_us
        entries = self._entries
        found = list(map(entries.get, task_uuids))
        if not entries or next(iter(entries.values())).updated_at_us > oldest_live:
            # The oldest write is live, so every entry is: no entry to check one by one.
            return found
        return [e if e is not None and e.updated_at_us > oldest_live else None for e in found]

    def admit(
        self,
        task_uuid: str,
        space_uuid: str,
        progress: Progress,
        *,
        client: str = NO_CLIENT,
        finished: bool = False,
    ) -> None:
        if self._over(task_uuid, space_uuid, progress, client, finished) is None:
            return
        self._drop_expired()  # expired progress frees its room: look again
        over = self._over(task_uuid, space_uuid, progress, client, finished)
        if over is not None:
            refuse(over)

    def _over(
        self, task_uuid: str, space_uuid: str, progress: Progress, client: str, finished: bool
    ) -> str | None:
        """What the write would take over budget: "client", "space", "store" or None."""
        old = self._entries.get(task_uuid)
        if old is None:
            old_size = old_live = 0
        else:
            old_size = entry_bytes(old, old.finished)
            old_live = 0 if old.finished else old_size
            finished = finished or old.finished
        size = entry_bytes(progress, finished)
        if finished:
            # Finished progress needs only room beside live progress: the rest gives way.
            if size <= old_size or self.live_bytes - old_live + size <= self.budget_bytes:
                return None
            return "store"
        rewrite = old is not None and old.client == client
        mine = size - (old_live if rewrite else 0)
        if mine > 0 and self.client_bytes < self.budget_bytes:  # an allowance of 1: the budget's
            fraction = 1.0 if rewrite else ADMIT_NEW_BELOW
            if self._client_live.get(client, 0) + mine > self.client_bytes * fraction:
                return "client"
        growth = size - old_live
        if growth > 0:
            fraction = 1.0 if old is not None else ADMIT_NEW_BELOW
            if self._space_live.get(space_uuid, 0) + growth > self.space_bytes * fraction:
                return "space"
            if self.live_bytes + growth > self.budget_bytes * fraction:
                return "store"
        return None

    async def admit_client(self, client: str) -> None:
        limit = self.client_bytes * ADMIT_NEW_BELOW
        if self._client_live.get(client, 0) < limit or self.client_bytes >= self.budget_bytes:
            return
        self._drop_expired()
        if self._client_live.get(client, 0) >= limit:
            refuse("client")

    async def put(
        self,
        task_uuid: str,
        progress: Progress,
        space_uuid: str,
        *,
        client: str = NO_CLIENT,
        finished: bool = False,
    ) -> None:
        entries = self._entries
        old = entries.pop(task_uuid, None)
        if old is not None and not finished and not old.finished and old.client == client:
            # The hot path: a task reporting again, as it did before.
            track = self._followed(old, progress)
            entries[task_uuid] = Held(*astuple(progress), old.space_uuid, old.client, False, track)
            delta = len(progress.values) - len(old.values)
            if delta:
                self.bytes_used += delta
                self.live_bytes += delta
                self._space_live[old.space_uuid] += delta
                self._client_live[old.client] += delta
        else:
            if old is None:
                space_uuid = sys.intern(space_uuid)
            else:
                space_uuid = old.space_uuid
                finished = finished or old.finished  # a finished task stays finished
                self._uncount(task_uuid, old)
            track = None if finished else self._followed(old, progress)
            held = Held(*astuple(progress), space_uuid, sys.intern(client), finished, track)
            entries[task_uuid] = held
            self._count(task_uuid, held)
        if self.bytes_used > self.budget_bytes:
            self._free_room()
        first = next(iter(entries.values()))
        if first.updated_at_us + self._ttl_us <= self._clock.now_us():
            self._drop_expired()

    def _count(self, task_uuid: str, held: Held) -> None:
        """Count a new entry; a finished one beyond its client's allowance of finished
        progress lets that client's oldest give way (`_trim_kept`)."""
        size = entry_bytes(held, held.finished)
        self.bytes_used += size
        client = held.client
        if held.finished:
            self._kept.setdefault(client, OrderedDict())[task_uuid] = None
            self._kept_bytes[client] = self._kept_bytes.get(client, 0) + size
            if self._kept_bytes[client] > self.client_bytes:
                self._trim_kept(client)
        else:
            self.live_bytes += size
            self._space_live[held.space_uuid] = self._space_live.get(held.space_uuid, 0) + size
            self._client_live[client] = self._client_live.get(client, 0) + size

    def _uncount(self, task_uuid: str, held: Held) -> None:
        size = entry_bytes(held, held.finished)
        self.bytes_used -= size
        if held.finished:
            kept = self._kept[held.client]
            del kept[task_uuid]
            if kept:
                self._kept_bytes[held.client] -= size
            else:
                del self._kept[held.client], self._kept_bytes[held.client]
        else:
            self.live_bytes -= size
            _less(self._space_live, held.space_uuid, size)
            _less(self._client_live, held.client, size)

    def _give_way(self, task_uuid: str) -> None:
        """Drop a finished entry to make room (it reads as expired)."""
        self._uncount(task_uuid, self._entries.pop(task_uuid))

    def _trim_kept(self, client: str) -> None:
        """The client keeps more finished progress than its allowance: its oldest gives way,
        never the last it wrote."""
        kept, kept_bytes = self._kept[client], self._kept_bytes
        while len(kept) > 1 and kept_bytes[client] > self.client_bytes:
            self._give_way(next(iter(kept)))

    def _free_room(self) -> None:
        """Bring the store back within its budget: expired entries go, then finished
        ones, from the client keeping the most (its oldest first), until a little more
        than what was over is free."""
        self._drop_expired()
        target = self.budget_bytes - int(self.budget_bytes * ROOM_SLACK)
        kept_bytes = self._kept_bytes
        while self.bytes_used > target and kept_bytes:
            top = heapq.nlargest(2, kept_bytes.items(), key=itemgetter(1))
            client = top[0][0]
            floor = top[1][1] if len(top) > 1 else 0
            kept = self._kept[client]
            self._give_way(next(iter(kept)))
            while self.bytes_used > target and kept_bytes.get(client, 0) > floor:
                self._give_way(next(iter(kept)))

    async def release(self, task_uuids: Sequence[str]) -> None:
        entries = self._entries
        for uuid in task_uuids:
            old = entries.get(uuid)
            if old is None or old.finished:
                continue
            self._uncount(uuid, old)
            held = entries[uuid] = replace(old, finished=True, track=None)  # not a write
            self._count(uuid, held)
        if self.bytes_used > self.budget_bytes:
            self._free_room()

    async def delete(self, task_uuids: Sequence[str]) -> None:
        entries = self._entries
        for uuid in task_uuids:
            entry = entries.pop(uuid, None)
            if entry is not None:
                self._uncount(uuid, entry)

    def _drop_expired(self) -> None:
        oldest_live = self._clock.now_us() - self._ttl_us
        entries = self._entries
        while entries:
            uuid, first = next(iter(entries.items()))
            if first.updated_at_us > oldest_live:
                return
            del entries[uuid]
            self._uncount(uuid, first)

    def space_holds(self, space_uuid: str) -> int:
        """The bytes of live progress the space holds (for tests and the operator's questions)."""
        return self._space_live.get(space_uuid, 0)

    async def gauges(self) -> list[Measurement]:
        """Entries (expired ones not yet dropped included) and bytes held, and the budget:
        plain reads of counts the store keeps."""
        return [
            Measurement(
                "headway_live_tasks", "Tasks with progress held in memory.", len(self._entries)
            ),
            Measurement("headway_progress_bytes", "Bytes of live progress held.", self.bytes_used),
            Measurement(
                "headway_progress_finished_bytes",
                "Bytes of it held for finished tasks (they give way when room is needed).",
                self.bytes_used - self.live_bytes,
            ),
            Measurement(
                "headway_progress_budget_bytes",
                "Bytes of live progress allowed.",
                self.budget_bytes,
            ),
        ]

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        for held in (self._entries, self._space_live, self._client_live, self._kept):
            held.clear()
        self._kept_bytes.clear()
        self.bytes_used = self.live_bytes = 0


def _less(counts: dict[str, int], key: str, size: int) -> None:
    """Take `size` from `counts[key]`, dropping the key at 0."""
    left = counts[key] - size
    if left:
        counts[key] = left
    else:
        del counts[key]
