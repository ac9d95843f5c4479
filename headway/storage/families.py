"""An in-process cache of task families (a task and its children) for the embedded default.

A report needs its task's row and children on every call, and a family changes only when
a child is added or a member finishes. When this process is the only one serving (progress
in process memory), it sees every such change and can keep families in memory, so that a
report that does not finish its task touches no database at all.
"""

from __future__ import annotations

from collections import OrderedDict

from ..domain import TaskRow

Family = tuple[TaskRow, list[TaskRow]]


class FamilyCache:
    """Least-recently-used families, at most `max_entries` of them.

    `generation` guards against a race: a reader that fetched a family from the database
    before a concurrent change was committed and forgotten must not store its stale copy.
    Readers note the generation before the query and `put` only stores if it is unchanged.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self._entries: OrderedDict[str, Family] = OrderedDict()
        self._max = max_entries
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, task_uuid: str) -> Family | None:
        family = self._entries.get(task_uuid)
        if family is not None:
            self._entries.move_to_end(task_uuid)
        return family

    def put(self, task_uuid: str, family: Family, generation: int) -> None:
        if generation != self.generation:
            return
        self._entries[task_uuid] = family
        self._entries.move_to_end(task_uuid)
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget(self, *task_uuids: str | None) -> None:
        """Drop these families after a change to them was committed."""
        self.generation += 1
        for uuid in task_uuids:
            if uuid is not None:
                self._entries.pop(uuid, None)
