"""Jobs' usual durations (see `headway.domain.jobs`), kept until a task of their space finishes
or goes: an estimate of every task a live stream shows reads its job's usual duration,
which changes only with a finish."""

from __future__ import annotations

from typing import ClassVar

from ..domain.jobs import Usual
from ..domain.tasks import Changed
from .bounded import Bounded, Cache

# Jobs whose usual durations are kept.
JOBS_KEPT = 10_000
# How long one is trusted, in µs: a finish on another instance is not heard here.
KEPT_US = 60 * 1_000_000


class UsualDurations(Cache):
    """The usual duration of each job read last (None: it has none yet), by job id, for at
    most KEPT_US; a finish, delete or removal of a task of its space, or the space's
    delete, drops every job of that space. A read that such a change overtook keeps
    nothing (`generation`)."""

    hears: ClassVar[frozenset[Changed]] = frozenset(
        {Changed.FINISH, Changed.DELETE, Changed.PRUNE, Changed.DROP}
    )

    def __init__(self, held: int = JOBS_KEPT) -> None:
        # usual, space, kept until (µs)
        self._entries: Bounded[str, tuple[Usual | None, str, int]] = Bounded(
            count=held, on_drop=self._dropped
        )
        self._of_space: dict[str, set[str]] = {}

    def get(self, job: str, now_us: int) -> tuple[Usual | None] | None:
        """(the job's usual duration,) if kept and still trusted, else None."""
        found = self._entries.get(job)
        return None if found is None or found[2] <= now_us else (found[0],)

    def keep(
        self, job: str, space_uuid: str, usual: Usual | None, now_us: int, generation: int
    ) -> None:
        if self._entries.put(job, (usual, space_uuid, now_us + KEPT_US), generation):
            self._of_space.setdefault(space_uuid, set()).add(job)

    def _dropped(self, job: str, held: tuple[Usual | None, str, int]) -> None:
        jobs = self._of_space.get(held[1])
        if jobs is not None:
            jobs.discard(job)
            if not jobs:
                del self._of_space[held[1]]

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        self._entries.forget(*self._of_space.pop(space_uuid, ()))
