"""Spaces: creating one, and knowing one exists with its title and icon."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..caches.heads import Head, SpaceHeads
from ..domain import tasks as domain
from ..domain.errors import NotFound, Unprocessable
from ..domain.schemas import MAX_ICON, CreateSpace
from ..domain.tasks import Changed, canonical_uuid
from ..storage import queries
from ..storage.database import Statements
from .context import NO_SPACE, Stores, canonical
from .group_commit import GroupCommit
from .idempotency import Idempotency, Keys, Settled, client_scope, submitted
from .unit import Unit


class Spaces:
    """Creates spaces (concurrent creates share one commit) and finds them."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores
        self.heads = SpaceHeads()
        stores.writes.register(self.heads)
        self.keys = Keys(stores)
        self.creates = GroupCommit(stores.writes.transaction, self._insert)

    async def create(
        self, body: CreateSpace, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        """Create a space. With an `idempotency` key (scoped to its client's address), the
        first answer under it again, if there is one (see `service.idempotency`)."""
        self._stores.disk.admit()
        if body.icon is not None and (
            len(body.icon) > MAX_ICON or domain.grapheme_count(body.icon) != 1
        ):
            raise Unprocessable("icon must be exactly one character (one emoji or letter).")
        new = _NewSpace(queries.NewSpace(str(uuid.uuid4()), body.title, body.icon), idempotency)
        outcome = await submitted(self.creates.submit, new, idempotency)
        if isinstance(outcome, dict):
            return outcome  # the first answer under the key again
        return _answer(new.space)

    async def _insert(self, unit: Unit, batch: Sequence[_NewSpace]) -> list[_SpaceOutcome]:
        """Write a batch of creates in one transaction; with keys, as `Tasks._insert`."""
        st = unit.st
        claims = [
            (index, client_scope(new.idempotency.client), new.idempotency)
            for index, new in enumerate(batch)
            if new.idempotency is not None
        ]
        now_us = self._stores.clock.now_us()
        if not claims:
            await queries.insert_spaces(st, [new.space for new in batch], now_us)
            return [None] * len(batch)
        settled = await self.keys.settle(st, claims)
        made = [new.space for index, new in enumerate(batch) if index not in settled]
        if made:
            await queries.insert_spaces(st, made, now_us)
        rows = [
            idem.row(scope, batch[index].space.uuid, _answer(batch[index].space))
            for index, scope, idem in claims
            if index not in settled
        ]
        await self.keys.record(st, rows)
        return [settled.get(index) for index in range(len(batch))]

    async def head(self, space_uuid: str) -> Head:
        """A space's `{"title", "icon"}`; NotFound if there is no such space."""
        key = canonical(space_uuid, NO_SPACE)
        head = self.heads.get(key)
        if head is None:
            space = await queries.space_head(self._stores.db.fetch, key)
            if space is None:
                raise NotFound(NO_SPACE)
            head = self.heads.keep(key, *space)
        return head

    async def existing(self, space_uuid: str) -> str:
        """The space's canonical uuid; NotFound if there is no such space."""
        key = canonical_uuid(space_uuid)
        if key is not None and await queries.space_head(self._stores.db.fetch, key) is not None:
            return key
        raise NotFound(NO_SPACE)

    async def remove_held(
        self,
        space_uuid: str,
        held_uuid: str,
        delete: Callable[[Statements, str, str], Awaitable[bool]],
        missing: str,
        change: Changed | None = None,
    ) -> None:
        """Delete what the space holds by `held_uuid` (a webhook, a channel, a share link):
        `delete(st, space_key, key)`, False if the space holds no such thing, which is
        then NotFound(`missing`). `change`, if any, is told of it once committed."""
        space_key = await self.existing(space_uuid)
        key = canonical_uuid(held_uuid)
        async with self._stores.writes.transaction() as unit:
            if key is None or not await delete(unit.st, space_key, key):
                raise NotFound(missing)
            if change is not None:
                unit.changed(change, space_key, key)


@dataclass(frozen=True, slots=True)
class _NewSpace:
    """A create waiting for its batch, with its key if it has one."""

    space: queries.NewSpace
    idempotency: Idempotency | None


# What a batch answers a create: None (made), or what its key settled.
_SpaceOutcome = Settled | None


def _answer(space: queries.NewSpace) -> dict[str, Any]:
    return {"uuid": space.uuid, "title": space.title, "icon": space.icon}
