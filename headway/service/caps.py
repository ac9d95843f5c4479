"""The caps on what a space holds: steps per parent (422 beyond), and top-level tasks per
space, beyond which a new task takes the place of the oldest finished one (with its
steps), as a log keeps its last lines; 422 when every task is still active."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..domain.errors import Unprocessable
from ..domain.tasks import TaskRow
from ..ops import metrics
from ..storage import deletes, queries
from .unit import Unit

STEPS_PER_PARENT = 10_000
TASKS_PER_SPACE = 100_000


class Steps:
    """Steps each parent of a batch holds, as the batch adds them."""

    def __init__(self, held: dict[str, int], cap: int) -> None:
        self._held = held
        self._cap = cap
        self.added: dict[str, int] = {}

    def add(self, parent_uuid: str) -> Unprocessable | None:
        """Count one new step of the parent; the refusal if it holds its cap already."""
        if self._held.get(parent_uuid, 0) + self.added.get(parent_uuid, 0) >= self._cap:
            return Unprocessable(
                f"A task holds at most {self._cap:,} steps (HEADWAY_CHILDREN_PER_PARENT)."
            )
        self.added[parent_uuid] = self.added.get(parent_uuid, 0) + 1
        return None


class Caps:
    """Applies the caps within a batch of creates, and makes room when a space is full."""

    def __init__(self) -> None:
        self.steps_per_parent = STEPS_PER_PARENT  # as the settings say (see `app`)
        self.tasks_per_space = TASKS_PER_SPACE

    def steps_of(self, parents: Mapping[str, tuple[TaskRow, int]]) -> Steps:
        return Steps({uuid: count for uuid, (_, count) in parents.items()}, self.steps_per_parent)

    def full(self) -> Unprocessable:
        return Unprocessable(
            f"This space holds {self.tasks_per_space:,} top-level tasks, all still active "
            "(HEADWAY_TASKS_PER_SPACE): finish or delete one first."
        )

    async def prune(self, unit: Unit, space_uuid: str, held: int, new: Sequence[str]) -> int:
        """The space holds `held` top-level tasks with `new` ones being created (their
        uuids, in order): remove the oldest finished ones (with their steps) beyond the
        cap, in `unit`'s transaction, which tells of them; returns how many of the new
        ones find no room (the last ones: every other task is still active)."""
        st = unit.st
        excess = min(held - self.tasks_per_space, len(new))
        if excess <= 0:
            return 0
        oldest = await queries.oldest_finished_top_level(st, space_uuid, excess)
        refused = excess - len(oldest)
        if oldest:
            gone = [*await queries.children_uuids(st, oldest), *oldest]
            await deletes.delete_tasks(st, gone)
            # Each removed task is paired with a new one made (the last, if some found no room).
            made = new[: len(new) - refused][-len(oldest) :]
            unit.pruned(space_uuid, gone, list(zip(oldest, made, strict=True)))
            metrics.deleted("cap", len(gone))
        await queries.count_top_level(st, space_uuid, -excess)
        return refused
