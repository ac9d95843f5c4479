"""Share links: read-only links to a space, made and revoked by its owner; the space a
link shows, and the task an id under a link names."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import ClassVar

from .. import domain
from ..domain import Changed, canonical_uuid
from ..errors import NotFound, Unprocessable
from ..shares import ShareView
from ..storage import shares
from .context import NO_SHARE, Stores
from .spaces import Spaces

NO_SHARED_TASK = "No such task under this link: check its id."
# Links whose space is kept (one instance only: see `SharedSpaces`).
SHARES_KEPT = 10_000
# Task ids kept, over every link, to find a task by its id without a scan (see `TaskIds`).
IDS_KEPT = 200_000


class SharedSpaces:
    """The space of each link last used, at most SHARES_KEPT of them, so that a badge
    costs no query. A revoke or the space's delete drops it. Kept only where this
    process hears every revoke (no other instance writes); a read that raced a revoke
    (it began before the revoke was heard) keeps nothing."""

    hears: ClassVar[frozenset[Changed]] = frozenset({Changed.REVOKE, Changed.DROP})

    def __init__(self, held: int = SHARES_KEPT) -> None:
        self._held = held
        self._spaces: dict[str, str] = {}
        self.generation = 0  # moves on each revoke or delete heard

    def get(self, share_uuid: str) -> str | None:
        return self._spaces.get(share_uuid)

    def keep(self, share_uuid: str, space_uuid: str, generation: int) -> None:
        """Keep the link's space, read when `generation` was current."""
        if generation != self.generation:
            return
        if len(self._spaces) >= self._held:
            del self._spaces[next(iter(self._spaces))]  # the longest held
        self._spaces[share_uuid] = space_uuid

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        self.generation += 1
        if kind is Changed.REVOKE:
            self._spaces.pop(task_uuid or "", None)  # a revoke names its link
        else:
            for share in [s for s, space in self._spaces.items() if space == space_uuid]:
                del self._spaces[share]


class _Ids:
    """The ids of one link: id -> task uuid, for every task created up to `through_us`."""

    __slots__ = ("ids", "through_us", "view")

    def __init__(self, view: ShareView) -> None:
        self.view = view
        self.ids: dict[str, str] = {}
        self.through_us = -1


class TaskIds:
    """Which task an id under a link names. An id cannot be turned back into its uuid:
    the first look at a link computes the id of each task of its space (one query, one
    HMAC per task), later looks only those of tasks created since. A task's id never
    changes, and a deleted task is not found when it is read, so nothing here goes stale.
    At most IDS_KEPT ids are kept over every link (the link used longest ago goes first);
    a link whose space alone holds more pays a look at every task each time."""

    def __init__(self, stores: Stores, held: int = IDS_KEPT) -> None:
        self._stores = stores
        self._held = held
        self._count = 0
        self._links: OrderedDict[str, _Ids] = OrderedDict()

    async def task_of(self, share_uuid: str, space_uuid: str, task_id: str) -> str:
        """The uuid of the task `task_id` names under the link; NotFound if none."""
        links = self._links
        held = links.get(share_uuid)
        if held is None:
            held = links[share_uuid] = _Ids(ShareView(share_uuid))
        else:
            links.move_to_end(share_uuid)
            found = held.ids.get(task_id)
            if found is not None:
                return found
        new = await shares.tasks_since(self._stores.db.fetch, space_uuid, held.through_us)
        ids, task_id_of, before = held.ids, held.view.task_id, len(held.ids)
        for task_uuid, created_us in new:
            ids[task_id_of(task_uuid)] = task_uuid
            held.through_us = max(held.through_us, created_us)
        if links.get(share_uuid) is held:  # not let go while the query ran
            self._count += len(ids) - before
            self._trim()
        found = ids.get(task_id)
        if found is None:
            raise NotFound(NO_SHARED_TASK)
        return found

    def _trim(self) -> None:
        """Let go of the links used longest ago until at most `held` ids are kept; a link
        whose space alone holds more is not kept either."""
        links = self._links
        while self._count > self._held and len(links) > 1:
            _, oldest = links.popitem(last=False)
            self._count -= len(oldest.ids)
        if self._count > self._held:
            links.clear()
            self._count = 0


class Shares:
    """Makes, lists and revokes a space's share links (at most `per_space` each), and
    finds the space a link shows."""

    def __init__(
        self, stores: Stores, spaces: Spaces, *, per_space: int, keep_spaces: bool = True
    ) -> None:
        self._stores = stores
        self._spaces = spaces
        self.per_space = per_space
        # Other instances revoke links too (progress in Redis): ask the database each time.
        self.spaces: SharedSpaces | None = SharedSpaces() if keep_spaces else None
        if self.spaces is not None:
            stores.changes.register(self.spaces)
        self.ids = TaskIds(stores)

    async def create(self, space_uuid: str) -> dict[str, str]:
        """A new read-only link to the space."""
        space_key = await self._spaces.existing(space_uuid)
        share_uuid = str(uuid.uuid4())
        cap = self.per_space
        now_us = self._stores.clock.now_us()
        async with self._stores.db.write() as st:
            if not await shares.insert_share(st, share_uuid, space_key, now_us, cap=cap):
                raise Unprocessable(f"A space holds at most {cap} share links; revoke one first.")
        return {
            "uuid": share_uuid,
            "url": f"/shared/{share_uuid}",
            "created_at": domain.format_ts(now_us),
        }

    async def list(self, space_uuid: str) -> list[dict[str, str]]:
        space_key = await self._spaces.existing(space_uuid)
        found = await shares.list_shares(self._stores.db.fetch, space_key)
        return [
            {"uuid": share, "url": f"/shared/{share}", "created_at": domain.format_ts(created)}
            for share, created in found
        ]

    async def delete(self, space_uuid: str, share_uuid: str) -> None:
        """Revoke a share link; its open streams end (see progress.feed `REVOKED`)."""
        space_key = await self._spaces.existing(space_uuid)
        share_key = canonical_uuid(share_uuid)
        async with self._stores.db.write() as st:
            if share_key is None or not await shares.delete_share(st, space_key, share_key):
                raise NotFound("No such share link in this space.")
        await self._stores.changes.changed(Changed.REVOKE, space_key, share_key)

    async def space_of(self, share_uuid: str) -> str:
        """The uuid of the space a share link shows; NotFound if it was revoked or never
        existed."""
        key = canonical_uuid(share_uuid)
        if key is not None:
            kept = self.spaces
            if kept is not None and (space := kept.get(key)) is not None:
                return space
            generation = 0 if kept is None else kept.generation
            space = await shares.space_of_share(self._stores.db.fetch, key)
            if space is not None:
                if kept is not None:
                    kept.keep(key, space, generation)
                return space
        raise NotFound(NO_SHARE)

    async def task_of(self, share_uuid: str, task_id: str) -> tuple[str, str]:
        """The link's canonical uuid and the uuid of the task `task_id` names under it;
        NotFound if the link or the task is unknown."""
        space = await self.space_of(share_uuid)
        key = canonical_uuid(share_uuid)
        assert key is not None  # the link was found
        return key, await self.ids.task_of(key, space, task_id)
