"""An in-process cache of task families (a task and its children) for the embedded default.

A report needs its task's row and children on every call, and a family changes only when
a child is added or a member finishes. When this process is the only one serving (progress
in process memory), it sees every such change and can keep families in memory, so that a
report that does not finish its task touches no database at all.

A parent's entry also keeps the JSON of each child's answer, made when the family is
read and reused while that child's progress is the same object (the memory store hands
out the object a write stored until the next write replaces it): reading a parent of a
thousand children then encodes only the children that reported since the last read.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from ..domain import Progress, TaskRow, view_json

Family = tuple[TaskRow, Sequence[TaskRow]]


class _Parent:
    """A cached family with children, and the JSON shown for each child (with the
    progress it was made from), filled in as the family is read."""

    __slots__ = ("children", "row", "shown")

    def __init__(self, row: TaskRow, children: tuple[TaskRow, ...]) -> None:
        self.row = row
        self.children = children
        self.shown: list[tuple[Progress | None, msgspec.Raw] | None] | None = None


class FamilyCache:
    """Least-recently-used families, at most `max_entries` of them.

    `generation` guards against a race: a reader that fetched a family from the database
    before a concurrent change was committed and forgotten must not store its stale copy.
    Readers note the generation before the query and `put` only stores if it is unchanged.

    Kept lean, since every reporting task has an entry: a childless task is stored as its
    bare row, and the space uuid it shares with its space's other tasks is stored once.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self._entries: OrderedDict[str, TaskRow | _Parent] = OrderedDict()
        self._max = max_entries
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, task_uuid: str) -> Family | None:
        entry = self._entries.get(task_uuid)
        if entry is None:
            return None
        self._entries.move_to_end(task_uuid)
        return (entry, ()) if isinstance(entry, TaskRow) else (entry.row, entry.children)

    def children_json(
        self, parent_uuid: str, children: Sequence[TaskRow], found: Sequence[Progress | None]
    ) -> list[msgspec.Raw] | None:
        """The JSON of each child's answer, given the progress `found` for each; None
        unless `children` is the cached family of `parent_uuid` (as `get` returned it)."""
        entry = self._entries.get(parent_uuid)
        if not isinstance(entry, _Parent) or entry.children is not children:
            return None
        shown = entry.shown
        if shown is None:
            shown = entry.shown = [None] * len(children)
        answers = []
        for index, progress in enumerate(found):
            made = shown[index]
            if made is None or made[0] is not progress:
                made = shown[index] = (progress, view_json(children[index], progress))
            answers.append(made[1])
        return answers

    def put(self, family: Family, generation: int) -> None:
        if generation != self.generation:
            return
        row, children = family
        shared_space = sys.intern(row.space_uuid)
        if shared_space is not row.space_uuid:
            row = msgspec.structs.replace(row, space_uuid=shared_space)
        self._entries[row.uuid] = _Parent(row, tuple(children)) if children else row
        self._entries.move_to_end(row.uuid)
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget(self, *task_uuids: str | None) -> None:
        """Drop these families after a change to them was committed."""
        self.generation += 1
        for uuid in task_uuids:
            if uuid is not None:
                self._entries.pop(uuid, None)
