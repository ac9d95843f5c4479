"""Share links' caches: the space of each link a badge used last, and which task an id
under a link names (an id cannot be turned back into its uuid)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar

from ..domain.errors import NotFound
from ..domain.share_ids import ShareView
from ..domain.tasks import Changed
from ..storage import shares
from ..storage.database import Database
from .bounded import Bounded, Cache

NO_SHARED_TASK = "No such task under this link: check its id."
# Links whose space is kept for badges, and for how long at most, in µs (see `SharedSpaces`).
SHARES_KEPT = 10_000
SPACE_KEPT_US = 1_000_000
# Task ids kept, over every link, to find a task by its id without a scan (see `TaskIds`).
IDS_KEPT = 200_000


class SharedSpaces(Cache):
    """The space of each link a badge used last, at most SHARES_KEPT of them and each for
    at most SPACE_KEPT_US, so that a badge asked for again and again costs no query. A
    revoke or the space's delete heard here drops it at once; one made where this process
    does not hear it (another instance, with or without Redis) shows within
    SPACE_KEPT_US, as it does in the badge itself (`caches.badges.KEPT_US`). A read that
    raced a revoke (it began before the revoke was heard) keeps nothing."""

    hears: ClassVar[frozenset[Changed]] = frozenset({Changed.REVOKE, Changed.DROP})

    def __init__(self, held: int = SHARES_KEPT) -> None:
        # link -> (space, kept until, µs)
        self._entries: Bounded[str, tuple[str, int]] = Bounded(count=held)

    def get(self, share_uuid: str, now_us: int) -> str | None:
        found = self._entries.get(share_uuid)
        return None if found is None or found[1] <= now_us else found[0]

    def keep(self, share_uuid: str, space_uuid: str, now_us: int, generation: int) -> None:
        """Keep the link's space, read at `now_us` when `generation` was current."""
        self._entries.put(share_uuid, (space_uuid, now_us + SPACE_KEPT_US), generation)

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        if kind is Changed.REVOKE:
            self._entries.forget(task_uuid)  # a revoke names its link
        else:
            self._entries.forget_where(lambda _, held: held[0] == space_uuid)


@dataclass(slots=True, eq=False)
class _Ids:
    """The ids of one link: id -> task uuid, for every task created up to `through_us`."""

    view: ShareView
    space: str
    ids: dict[str, str] = field(default_factory=dict)
    through_us: int = -1


class TaskIds:
    """Which task an id under a link names. An id cannot be turned back into its uuid:
    the first look at a link computes the id of each task of its space (one query, one
    HMAC per task), later looks only those of tasks created since. A task's id never
    changes, and a deleted task is not found when it is read, so nothing here goes stale.
    At most IDS_KEPT ids are kept over every link (the link used longest ago goes first);
    a link whose space alone holds more pays a look at every task each time. A revoke or
    the space's delete heard here lets go of the link's ids at once."""

    hears: ClassVar[frozenset[Changed]] = frozenset({Changed.REVOKE, Changed.DROP})

    def __init__(
        self,
        db: Database,
        view: Callable[[str], Awaitable[ShareView]],
        held: int = IDS_KEPT,
    ) -> None:
        self._db = db
        self._view = view  # a link's view, its ids keyed by the server's secret
        # Links by their ids counted (a link's count grows as its space's tasks are seen).
        self._links: Bounded[str, _Ids] = Bounded(max_bytes=held, size=lambda held: len(held.ids))

    async def task_of(self, share_uuid: str, space_uuid: str, task_id: str) -> str:
        """The uuid of the task `task_id` names under the link (canonical, of a link
        found); NotFound if none."""
        links = self._links
        held = links.touch(share_uuid)
        if held is None:
            view = await self._view(share_uuid)  # waits only for the secret's first read
            held = links.get(share_uuid)
            if held is None:
                held = _Ids(view, space_uuid)
                links.put(share_uuid, held)
        else:
            found = held.ids.get(task_id)
            if found is not None:
                return found
        new = await shares.tasks_since(self._db.fetch, space_uuid, held.through_us)
        ids, task_id_of, before = held.ids, held.view.task_id, len(held.ids)
        for task_uuid, created_us in new:
            ids[task_id_of(task_uuid)] = task_uuid
            held.through_us = max(held.through_us, created_us)
        if links.get(share_uuid) is held:  # not let go while the query ran
            links.grew(len(ids) - before)  # a link whose space alone is over goes too
        found = ids.get(task_id)
        if found is None:
            raise NotFound(NO_SHARED_TASK)
        return found

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        if kind is Changed.REVOKE:
            self._links.forget(task_uuid)  # its link
        else:
            self._links.forget_where(lambda _, held: held.space == space_uuid)
