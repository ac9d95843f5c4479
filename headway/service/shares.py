"""Share links: read-only links to a space, made and revoked by its owner; the space a
link shows, and the task an id under a link names."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from ..caches.links import SharedSpaces, TaskIds
from ..domain import tasks as domain
from ..domain.errors import NotFound, Unprocessable
from ..domain.schemas import CreateShare
from ..domain.share_ids import ShareView
from ..domain.tasks import Changed
from ..storage import shares
from ..storage.database import Statements
from .context import NO_SHARE, Stores, canonical
from .idempotency import Idempotency, Keys
from .spaces import Spaces


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
        stores.writes.register(self.spaces)
        self.ids = TaskIds(stores.db, self.view)
        stores.writes.register(self.ids)

    async def create(
        self, space_uuid: str, body: CreateShare, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        """A new read-only link to the space (`body`: `{}`, a link has nothing to set).
        With an `idempotency` key, the first answer under it again, if there is one."""
        self._stores.disk.admit()
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

        return await self.keys.added_to_space(space_key, idempotency, write)

    async def list(self, space_uuid: str) -> list[dict[str, str]]:
        space_key = await self._spaces.existing(space_uuid)
        found = await shares.list_shares(self._stores.db.fetch, space_key)
        return [
            {"uuid": share, "url": f"/shared/{share}", "created_at": domain.format_ts(created)}
            for share, created in found
        ]

    async def delete(self, space_uuid: str, share_uuid: str) -> None:
        """Revoke a share link; its open streams end (see coherence.feed `REVOKED`)."""
        missing = "No such share link in this space."
        await self._spaces.remove_held(
            space_uuid, share_uuid, shares.delete_share, missing, Changed.REVOKE
        )

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
            found_spaces = await shares.existing(fetch, "spaces", list(spaces))
            return found_spaces, await shares.existing(fetch, "shares", list(links))

    async def space_of(self, share_uuid: str) -> str:
        """The uuid of the space a share link shows; NotFound if it was revoked or never
        existed."""
        key = canonical(share_uuid, NO_SHARE)
        space = await shares.space_of_share(self._stores.db.fetch, key)
        if space is None:
            raise NotFound(NO_SHARE)
        return space

    async def kept_space_of(self, share_uuid: str) -> tuple[str, str]:
        """The link's canonical uuid and the space it shows, as `space_of` says, but kept a
        moment (`SharedSpaces`): for badges, asked for again and again."""
        key, kept = canonical(share_uuid, NO_SHARE), self.spaces
        now_us = self._stores.clock.now_us()
        space = kept.get(key, now_us)
        if space is not None:
            return key, space
        generation = kept.generation
        space = await shares.space_of_share(self._stores.db.fetch, key)
        if space is None:
            raise NotFound(NO_SHARE)
        kept.keep(key, space, now_us, generation)
        return key, space
