"""An in-process cache of task families (a task and its children).

A report needs its task's row and children on every call, and a family changes only when
a child is added or a member finishes. When this process is the only one serving (progress
in process memory), it sees every such change and can keep families in memory, so that a
report that does not finish its task touches no database at all.

When several instances serve (progress in Redis), none sees the others' changes, so the
cache is *versioned*: every change to a family bumps a version in Redis after its commit
(see `RedisProgressStore.bump_families`), each entry keeps the version it was read at
(read before the SQL, so a change racing the read can only make the entry look older),
and a report writes its progress only if the version is unchanged, in the same round trip
(`RedisProgressStore.put_if_family`); otherwise it reloads the family and tries again.
A version carries the epoch of the Redis that counted it, a random id made afresh once
Redis has lost it (a restart, a flush): a counter that starts again from 0 after such a
loss never matches an entry read before it. An entry is also trusted for at most
`VERSIONED_MAX_AGE_US`: that bounds how long a change whose bump was lost (Redis down
just after the commit) can go unseen, and lets version keys expire
(`FAMILY_VERSION_TTL_S`, far longer) without a stale entry ever matching a key that
expired and reads 0 again.

A parent's entry also keeps the JSON of each child's answer, made when the family is
read and reused while that child's progress is the same object (the memory store hands
out the object a write stored until the next write replaces it): reading a parent of a
thousand children then encodes only the children that reported since the last read, and
while none did, reuses the last answer's children whole.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import ClassVar, NamedTuple

import msgspec

from ..domain.tasks import Changed, FamilyVersion, Progress, TaskRow, view_json
from .bounded import Bounded, Cache

Family = tuple[TaskRow, Sequence[TaskRow]]

# How long a versioned entry is trusted before it is read again (see the module docstring).
VERSIONED_MAX_AGE_US = 3600 * 1_000_000
# The version of every entry of a cache that is not versioned (one process serving alone,
# which sees every change: see `coherence.local`).
ALONE = FamilyVersion("alone")
# Answers are kept as JSON for reuse only for tasks whose values take at most this
# much, and a parent's children joined (`ChildrenJSON.joined`) only up to
# KEPT_JOINED_BYTES: no cache holds copies of large values (up to 64 KiB a task) outside
# the live-progress budget. Others are answered as structs, encoded as they are sent
# (`api.streaming`), so that a client that does not read holds a piece, not a copy.
KEPT_JSON_BYTES = 2048
KEPT_JOINED_BYTES = 1024 * 1024
# What the family cache holds at most, in bytes as the process's memory holds them: a
# row costs ROW_BYTES plus its title's, source's and kept error's characters (measured
# with tracemalloc over 100,000 rows as the database hands them), a child's answer kept as JSON
# SHOWN_BYTES plus its length. Past it, the families held longest go.
FAMILY_BYTES = 32 * 1024**2
ROW_BYTES = 330
SHOWN_BYTES = 150


def row_bytes(row: TaskRow) -> int:
    """What a cached row costs, as the family cache and the space reads count it."""
    return ROW_BYTES + len(row.title or "") + len(row.source or "") + len(row.error or "")


def family_bytes(row: TaskRow, children: Sequence[TaskRow]) -> int:
    """What a cached family's rows cost (a child also has its place in two lists)."""
    return row_bytes(row) + sum(row_bytes(child) + 16 for child in children)


class ChildrenJSON(list[msgspec.Raw]):
    """Each child's JSON, in order, and `joined`: all of them joined by commas, so that
    an answer is sent without a loop over its children (see `api.streaming`)."""

    __slots__ = ("joined",)

    def __init__(self, shown: list[msgspec.Raw]) -> None:
        super().__init__(shown)
        self.joined = b",".join(shown)


class ChildrenAnswer(NamedTuple):
    """What a parent's answer shows of its children: each child's JSON, how many have
    finished, and the newest of their progress's `updated_at_us` (None: none reported)."""

    shown: ChildrenJSON
    done: int
    latest_us: int | None


class _Parent:
    """A cached family with children, and the JSON shown for each child (with the
    progress it was made from), filled in as the family is read; `answer` is the last
    `ChildrenAnswer` made, with the progress it was made from. `large`: its children's
    answers together passed KEPT_JOINED_BYTES, so none is kept (until the family
    changes). `size`: what it costs, as the cache counts it."""

    __slots__ = ("answer", "children", "large", "row", "shown", "size", "uuids")

    def __init__(self, row: TaskRow, children: tuple[TaskRow, ...]) -> None:
        self.row = row
        self.children = children
        self.uuids = [row.uuid, *(child.uuid for child in children)]
        self.shown: list[tuple[Progress | None, msgspec.Raw] | None] | None = None
        self.answer: tuple[list[Progress | None], ChildrenAnswer] | None = None
        self.large = False
        self.size = family_bytes(row, children)


class FamilyCache(Cache):
    """Families, holding at most `max_bytes` (FAMILY_BYTES: rows, and children's answers
    kept as JSON, as `row_bytes` and SHOWN_BYTES count them): past that, those held
    longest are dropped until an eighth is free (a plain dict in insertion order costs
    about 60 bytes less per entry than keeping recency in an OrderedDict). A reader notes
    `generation` before its query, and `put` stores nothing if a change moved it since.

    Kept lean, since every reporting task has an entry: a childless task is stored as its
    bare row, and the space uuid it shares with its space's other tasks is stored once.
    """

    # A family changes when a child is added to it, one of its members finishes or is
    # deleted, or its space is.
    hears: ClassVar[frozenset[Changed]] = frozenset(
        {Changed.CREATE, Changed.FINISH, Changed.DELETE, Changed.PRUNE, Changed.DROP}
    )
    # A finish may be decided on a family held here: this process sees every change, so
    # what it holds is current (a versioned cache's entry may not be: see below).
    decides_finish: ClassVar[bool] = True

    def __init__(self, max_bytes: int = FAMILY_BYTES) -> None:
        self._entries: Bounded[str, TaskRow | _Parent] = Bounded(
            max_bytes=max_bytes, size=_size, keep=7 / 8, on_drop=self._dropped
        )

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, task_uuid: str) -> Family | None:
        entry = self._entries.get(task_uuid)
        if entry is None:
            return None
        return (entry, ()) if isinstance(entry, TaskRow) else (entry.row, entry.children)

    def get_versioned(
        self, task_uuid: str, now_us: Callable[[], int]
    ) -> tuple[TaskRow, Sequence[TaskRow], FamilyVersion] | None:
        """The family with the version it was read at, unless absent or too old as of
        `now_us()`: here, where this process sees every change, at ALONE, never too old,
        and the clock is not read."""
        family = self.get(task_uuid)
        return None if family is None else (*family, ALONE)

    def put_versioned(
        self, family: Family, version: FamilyVersion, now_us: int, generation: int
    ) -> None:
        """Hold `family`, read from the database after its version was read as `version`
        and the cache's generation was `generation` (see `put`)."""
        self.put(family, generation)

    def held_for_read(self, task_uuid: str) -> Family | None:
        """The family as a read may show it without checking a version: here, as held."""
        return self.get(task_uuid)

    def keep_read(self, family: Family, generation: int) -> None:
        """Hold a family a read found in the database."""
        self.put(family, generation)

    def uuids(self, row: TaskRow, children: Sequence[TaskRow]) -> list[str]:
        """The family's uuids, the parent's first (kept with a cached family: not to be
        changed)."""
        entry = self._entries.get(row.uuid)
        if isinstance(entry, _Parent) and entry.children is children:
            return entry.uuids
        return [row.uuid, *(child.uuid for child in children)]

    def children_answer(
        self, parent_uuid: str, children: Sequence[TaskRow], found: Sequence[Progress | None]
    ) -> ChildrenAnswer | None:
        """What the parent's answer shows of its children, given the progress `found` for
        each; None unless `children` is the cached family of `parent_uuid` (as `get`
        returned it). While no child's progress changed, the last answer is reused
        whole: a parent of a thousand children is then read without a loop over them."""
        entry = self._entries.get(parent_uuid)
        if not isinstance(entry, _Parent) or entry.children is not children or entry.large:
            return None
        found = list(found)
        if entry.answer is not None and entry.answer[0] == found:  # identity first: C speed
            return entry.answer[1]
        if any(p is not None and len(p.values) > KEPT_JSON_BYTES for p in found):
            return None  # large values: see KEPT_JSON_BYTES
        before = entry.size
        shown = entry.shown
        if shown is None:
            shown = entry.shown = [None] * len(children)
            entry.size += 8 * len(children)
        answers = []
        for index, progress in enumerate(found):
            made = shown[index]
            if made is None or made[0] is not progress:
                old = made
                made = shown[index] = (progress, view_json(children[index], progress))
                entry.size += len(made[1]) - (len(old[1]) if old else -SHOWN_BYTES)
            answers.append(made[1])
        size = sum(map(len, answers)) + len(answers)
        latest = max((p.updated_at_us for p in found if p is not None), default=None)
        if entry.answer is not None:
            entry.size -= len(entry.answer[1].shown.joined) + 16 * len(children)
        if size > KEPT_JOINED_BYTES:
            # Too large to keep: answered from structs, encoded as sent, from now on.
            entry.answer = entry.shown = None
            entry.large = True
            entry.size = family_bytes(entry.row, children)
            self._entries.grew(entry.size - before)
            return None
        done = sum(1 for child in children if child.finished_at_us is not None)
        answer = ChildrenAnswer(ChildrenJSON(answers), done, latest)
        entry.answer = (found, answer)
        entry.size += len(answer.shown.joined) + 16 * len(children)
        self._entries.grew(entry.size - before)
        return answer

    def put(self, family: Family, generation: int) -> None:
        row, children = family
        shared_space = sys.intern(row.space_uuid)
        if shared_space is not row.space_uuid:
            row = msgspec.structs.replace(row, space_uuid=shared_space)
        entry = _Parent(row, tuple(children)) if children else row
        self._entries.put(row.uuid, entry, generation)

    def _dropped(self, task_uuid: str, _entry: TaskRow | _Parent) -> None:
        """An entry went to make room (see `VersionedFamilyCache`)."""

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """After a create or a finish committed (or may have): a new task's parent's
        family changed; a finished task's, and its parent's (its children and maybe its
        own finish). After a delete (or a removal to make room): the task's and its
        parent's; after a space's, every family of the space."""
        if kind is Changed.FINISH or kind is Changed.DELETE or kind is Changed.PRUNE:
            self.forget(task_uuid, parent_uuid)
        elif kind is Changed.DROP:
            self.forget_space(space_uuid)
        elif parent_uuid is not None:
            self.forget(parent_uuid)

    def forget(self, *task_uuids: str | None) -> None:
        """Drop these families after a change to them was committed."""
        self._entries.forget(*task_uuids)

    def forget_space(self, space_uuid: str) -> None:
        """Drop every family of the space (deleted): one pass over what is held, which
        the cache's bound keeps to about a hundred thousand entries (a few milliseconds)."""
        self.forget(
            *[uuid for uuid, entry in self._entries.items() if _space_of(entry) == space_uuid]
        )


class VersionedFamilyCache(FamilyCache):
    """The family cache of an instance among several (see the module docstring): each
    entry is held with the family version it was read at, trusted for at most
    VERSIONED_MAX_AGE_US; a read, which checks no version, is never answered from it."""

    # A finish is decided on the database's rows, read afresh.
    decides_finish: ClassVar[bool] = False

    def __init__(self, max_bytes: int = FAMILY_BYTES) -> None:
        super().__init__(max_bytes)
        self._stamps: dict[str, tuple[FamilyVersion, int]] = {}  # (version, read at µs)

    def get_versioned(
        self, task_uuid: str, now_us: Callable[[], int]
    ) -> tuple[TaskRow, Sequence[TaskRow], FamilyVersion] | None:
        stamp = self._stamps.get(task_uuid)
        if stamp is None or now_us() - stamp[1] >= VERSIONED_MAX_AGE_US:
            return None
        row, children = self.get(task_uuid)  # type: ignore[misc]  # stamped means held
        return row, children, stamp[0]

    def put_versioned(
        self, family: Family, version: FamilyVersion, now_us: int, generation: int
    ) -> None:
        if generation == self.generation:
            self.put(family, generation)
            self._stamps[family[0].uuid] = (version, now_us)

    def held_for_read(self, task_uuid: str) -> Family | None:
        return None

    def keep_read(self, family: Family, generation: int) -> None:
        """Held only when read at a known version (see `put_versioned`)."""

    def _dropped(self, task_uuid: str, _entry: TaskRow | _Parent) -> None:
        self._stamps.pop(task_uuid, None)

    def forget(self, *task_uuids: str | None) -> None:
        super().forget(*task_uuids)
        for uuid in task_uuids:
            if uuid is not None:
                self._stamps.pop(uuid, None)


def _space_of(entry: TaskRow | _Parent) -> str:
    return entry.space_uuid if isinstance(entry, TaskRow) else entry.row.space_uuid


def _size(entry: TaskRow | _Parent) -> int:
    return entry.size if isinstance(entry, _Parent) else row_bytes(entry)
