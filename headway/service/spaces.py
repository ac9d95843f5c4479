"""Spaces: creating one, and knowing one exists with its title and icon."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .. import domain
from ..domain import Changed, canonical_uuid
from ..errors import Conflict, NotFound, Unprocessable
from ..schemas import MAX_ICON, CreateSpace
from ..storage import queries
from ..storage.batch import GroupCommit
from ..storage.database import Statements
from .context import NO_SPACE, Stores
from .idempotency import IN_PROGRESS, KEY_TAKEN, TRIES, Idempotency, Keys, Settled, client_scope

# Spaces whose `{"title", "icon"}` are kept: a space never changes them, so a read of a
# space seen before needs no query for them.
SPACE_HEADS = 10_000

T = TypeVar("T")

Head = dict[str, str | None]


class SpaceHeads:
    """The `{"title", "icon"}` of the spaces last read, at most SPACE_HEADS of them (past
    that, the one held longest goes). Nothing changes them; the space's delete drops them."""

    hears: ClassVar[frozenset[Changed]] = frozenset({Changed.DROP})

    def __init__(self, held: int = SPACE_HEADS) -> None:
        self._held = held
        self._heads: dict[str, Head] = {}

    def get(self, space_uuid: str) -> Head | None:
        return self._heads.get(space_uuid)

    def keep(self, space_uuid: str, title: str | None, icon: str | None) -> Head:
        heads = self._heads
        if len(heads) >= self._held:
            del heads[next(iter(heads))]  # the longest held
        head = heads[space_uuid] = {"title": title, "icon": icon}
        return head

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """After the space's delete (no change of tasks changes its title or icon)."""
        self._heads.pop(space_uuid, None)


class Spaces:
    """Creates spaces (concurrent creates share one commit) and finds them."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores
        self.heads = SpaceHeads()
        stores.changes.register(self.heads)
        self.keys = Keys(stores)
        self.creates = GroupCommit(stores.db, self._insert)

    async def create(
        self, body: CreateSpace, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        """Create a space. With an `idempotency` key (scoped to its client's address), the
        first answer under it again, if there is one (see `service.idempotency`)."""
        if body.icon is not None and (
            len(body.icon) > MAX_ICON or domain.grapheme_count(body.icon) != 1
        ):
            raise Unprocessable("icon must be exactly one character (one emoji or letter).")
        new = _NewSpace(queries.NewSpace(str(uuid.uuid4()), body.title, body.icon), idempotency)
        if idempotency is None:
            await self.creates.submit(new)
        else:
            for _ in range(TRIES):
                try:
                    outcome = await self.creates.submit(new)
                except KEY_TAKEN:
                    continue  # committed by another instance meanwhile: its answer
                if isinstance(outcome, dict):
                    return outcome  # the first answer under the key again
                if outcome is None:
                    break
            else:
                raise Conflict(IN_PROGRESS)
        return _answer(new.space)

    async def _insert(self, st: Statements, batch: Sequence[_NewSpace]) -> list[_SpaceOutcome]:
        """Write a batch of creates in one transaction; with keys, as `Tasks._insert`."""
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
        key = canonical_uuid(space_uuid)
        if key is None:
            raise NotFound(NO_SPACE)
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


async def added_to_space(write: Awaitable[T]) -> T:
    """The answer of `write`, which adds a row to a space (a webhook, a share link, a
    channel); NotFound if the space was deleted since it was found."""
    try:
        return await write
    except queries.SpaceGone:
        raise NotFound(NO_SPACE) from None


@dataclass(frozen=True, slots=True)
class _NewSpace:
    """A create waiting for its batch, with its key if it has one."""

    space: queries.NewSpace
    idempotency: Idempotency | None


# What a batch answers a create: None (made), or what its key settled.
_SpaceOutcome = Settled | None


def _answer(space: queries.NewSpace) -> dict[str, Any]:
    return {"uuid": space.uuid, "title": space.title, "icon": space.icon}
