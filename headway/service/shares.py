"""Share links: read-only links to a space, made and revoked by its owner; the space a
link shows, and the task an id under a link names."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from typing import Any, ClassVar

from .. import domain
from ..domain import Changed, canonical_uuid
from ..errors import NotFound, Unprocessable
from ..shares import ShareView
from ..storage import shares
from ..storage.database import Statements
from .context import NO_SHARE, Stores
from .idempotency import Idempotency, Keys
from .spaces import Spaces, added_to_space

NO_SHARED_TASK = "No such task under this link: check its id."
# Links whose space is kept for badges, and for how long at most, in µs (see `SharedSpaces`).
SHARES_KEPT = 10_000
SPACE_KEPT_US = 1_000_000
# Task ids kept, over every link, to find a task by its id without a scan (see `TaskIds`).
IDS_KEPT = 200_000


class SharedSpaces:
    """The space of each link a badge used last, at most SHARES_KEPT of them and each for
    at most SPACE_KEPT_US, so that a badge asked for again and again costs no query. A
    revoke or the space's delete heard here drops it at once; one made where this process
    does not hear it (another instance, with or without Redis) shows within
    SPACE_KEPT_US, as it does in the badge itself (`service.badges.KEPT_US`). A read that
    raced a revoke (it began before the revoke was heard) keeps nothing."""

    hears: ClassVar[frozenset[Changed]] = frozenset({Changed.REVOKE, Changed.DROP})

    def __init__(self, held: int = SHARES_KEPT) -> None:
        self._held = held
        self._spaces: dict[str, tuple[str, int]] = {}  # link -> (space, kept until, µs)
        self.generation = 0  # moves on each revoke or delete heard

    def get(self, share_uuid: str, now_us: int) -> str | None:
        found = self._spaces.get(share_uuid)
        if found is None or found[1] <= now_us:
            return None
        return found[0]

    def keep(self, share_uuid: str, space_uuid: str, now_us: int, generation: int) -> None:
        """Keep the link's space, read at `now_us` when `generation` was current."""
        if generation != self.generation:
            return
        spaces = self._spaces
        if share_uuid not in spaces and len(spaces) >= self._held:
            del spaces[next(iter(spaces))]  # the longest held
        spaces[share_uuid] = (space_uuid, now_us + SPACE_KEPT_US)

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        self.generation += 1
        if kind is Changed.REVOKE:
            self._spaces.pop(task_uuid or "", None)  # a revoke names its link
        else:
            gone = [s for s, (space, _) in self._spaces.items() if space == space_uuid]
            for share in gone:
                del self._spaces[share]


class _Ids:
    """The ids of one link: id -> task uuid, for every task created up to `through_us`."""

    __slots__ = ("ids", "space", "through_us", "view")

    def __init__(self, view: ShareView, space: str) -> None:
        self.view = view
        self.space = space
        self.ids: dict[str, str] = {}
        self.through_us = -1


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
        stores: Stores,
        view: Callable[[str], Awaitable[ShareView]],
        held: int = IDS_KEPT,
    ) -> None:
        self._stores = stores
        self._view = view  # a link's view, its ids keyed by the server's secret
        self._held = held
        self._count = 0
        self._links: OrderedDict[str, _Ids] = OrderedDict()

    async def task_of(self, share_uuid: str, space_uuid: str, task_id: str) -> str:
        """The uuid of the task `task_id` names under the link (canonical, of a link
        found); NotFound if none."""
        links = self._links
        held = links.get(share_uuid)
        if held is None:
            view = await self._view(share_uuid)  # waits only for the secret's first read
            held = links.setdefault(share_uuid, _Ids(view, space_uuid))
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

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        links = self._links
        if kind is Changed.REVOKE:
            gone = [task_uuid] if task_uuid is not None and task_uuid in links else []  # its link
        else:
            gone = [share for share, held in links.items() if held.space == space_uuid]
        for share in gone:
            self._count -= len(links.pop(share).ids)

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

    def __init__(self, stores: Stores, spaces: Spaces, *, per_space: int) -> None:
        self._stores = stores
        self._spaces = spaces
        self.per_space = per_space
        self.keys = Keys(stores)
        self._secret: bytes | None = None
        self.spaces = SharedSpaces()
        stores.changes.register(self.spaces)
        self.ids = TaskIds(stores, self.view)
        stores.changes.register(self.ids)

    async def create(
        self, space_uuid: str, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        """A new read-only link to the space. With an `idempotency` key, the first answer
        under it again, if there is one."""
        space_key = await self._spaces.existing(space_uuid)
        share_uuid = str(uuid.uuid4())
        cap = self.per_space
        now_us = self._stores.clock.now_us()

        async def write(st: Statements) -> dict[str, Any]:
            if not await shares.insert_share(st, share_uuid, space_key, now_us, cap=cap):
                raise Unprocessable(f"A space holds at most {cap} share links; revoke one first.")
            return {
                "uuid": share_uuid,
                "url": f"/shared/{share_uuid}",
                "created_at": domain.format_ts(now_us),
            }

        return await added_to_space(self.keys.once(space_key, space_key, idempotency, write))

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

    async def load_secret(self) -> bytes:
        """The server secret share links' task ids are keyed by, made at the first start
        and the same on every instance (read once, then held)."""
        if self._secret is None:
            self._secret = await shares.share_secret(self._stores.db, self._stores.clock.now_us())
        return self._secret

    async def view(self, share_uuid: str) -> ShareView:
        """How a link shows its space's tasks (`share_uuid`: canonical, of a link found)."""
        return ShareView(share_uuid, await self.load_secret())

    async def still_shown(
        self, spaces: Collection[str], links: Collection[str]
    ) -> tuple[set[str], set[str]]:
        """Of these spaces and share links (canonical uuids), those that still exist."""
        async with self._stores.db.read() as fetch:
            found_spaces = await shares.existing(fetch, "spaces", list(spaces)) if spaces else set()
            found_links = await shares.existing(fetch, "shares", list(links)) if links else set()
        return found_spaces, found_links

    async def space_of(self, share_uuid: str) -> str:
        """The uuid of the space a share link shows; NotFound if it was revoked or never
        existed."""
        key = canonical_uuid(share_uuid)
        if key is not None:
            space = await shares.space_of_share(self._stores.db.fetch, key)
            if space is not None:
                return space
        raise NotFound(NO_SHARE)

    async def kept_space_of(self, share_uuid: str) -> tuple[str, str]:
        """The link's canonical uuid and the space it shows, as `space_of` says, but kept a
        moment (`SharedSpaces`): for badges, asked for again and again."""
        key = canonical_uuid(share_uuid)
        if key is not None:
            kept = self.spaces
            now_us = self._stores.clock.now_us()
            space = kept.get(key, now_us)
            if space is not None:
                return key, space
            generation = kept.generation
            space = await shares.space_of_share(self._stores.db.fetch, key)
            if space is not None:
                kept.keep(key, space, now_us, generation)
                return key, space
        raise NotFound(NO_SHARE)
