"""Safe retries: a create sent with an `Idempotency-Key` is made once. The same key with
the same request, from the same space (or, for `POST /spaces`, the same client address),
within a day, answers the first answer again and creates nothing; the same key with
another request is refused (422).

The key, a fingerprint of the request and the first answer are written in the create's
own transaction (as Stripe's keys and the IETF draft
`draft-ietf-httpapi-idempotency-key-header` describe), so that an answer is recorded
exactly when its create is. Of two
concurrent creates with one key, one commits; the other answers its answer once it has
committed (on SQLite the second transaction begins after the first; on PostgreSQL the
second's insert of the key waits for the first's commit, fails on the unique key, and is
tried again, finding it). No create waits for, or is refused because of, a create with
another key.

Only creates that were made are recorded: a refused one (unknown space, a cap reached)
writes nothing, and its retry is decided afresh.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from sqlalchemy.exc import IntegrityError

from ..domain.errors import BadRequest, Conflict, NotFound, Unprocessable
from ..storage import idempotency, queries
from ..storage.database import Statements
from ..storage.idempotency import KeyRow
from .context import NO_SPACE, Stores

# How long a key is remembered.
KEEP_S = 24 * 3600
KEEP_US = KEEP_S * 1_000_000
MAX_KEY = 255
# A concurrent create with the same key committed first: tried again (finding its answer)
# at most this many times.
TRIES = 3
# What a failed insert of a key taken meanwhile by a concurrent create raises.
KEY_TAKEN = (IntegrityError, sqlite3.IntegrityError)
# Keys forgotten per transaction, and transactions per sweep.
FORGET_BATCH = 500
FORGET_BATCHES = 40

IN_PROGRESS = "A request with this Idempotency-Key is in progress; retry shortly."
REUSED = (
    "This Idempotency-Key was used with a different request (another body or endpoint) "
    "in the last 24 hours; send a new key for a new request."
)
_encode = msgspec.json.Encoder().encode
T = TypeVar("T")


@dataclass(slots=True)
class Idempotency:
    """A create's `Idempotency-Key`: the key, a fingerprint of the request it came with,
    and the client address (the scope of `POST /spaces`). `replayed` is set when the
    answer is the first answer again."""

    key: str
    fingerprint: str
    client: str
    replayed: bool = field(default=False)

    @classmethod
    def of(cls, key: str, operation: str, body: bytes, client: str) -> Idempotency:
        """The key as sent with `body` to `operation` (e.g. "tasks"); BadRequest if it is
        not 1 to MAX_KEY printable ASCII characters."""
        if not 0 < len(key) <= MAX_KEY or not key.isascii() or not key.isprintable():
            raise BadRequest(
                f"Idempotency-Key must be 1 to {MAX_KEY} printable ASCII characters; "
                f"this one has {len(key)} characters"
                + ("." if key.isascii() and key.isprintable() else ", not all printable.")
            )
        digest = hashlib.sha256(operation.encode() + b"\n" + body).hexdigest()
        return cls(key, digest, client)

    def row(self, scope: str, space_uuid: str, answer: Any, status: int = 201) -> KeyRow:
        """The row recording `answer` as the first answer under this key."""
        return KeyRow(
            scope, self.key, self.fingerprint, space_uuid, status, _encode(answer).decode()
        )

    def answer_of(self, row: KeyRow) -> dict[str, Any]:
        """The first answer again, if `row` was recorded for the same request; else 422."""
        if row.fingerprint != self.fingerprint:
            raise Unprocessable(REUSED)
        self.replayed = True
        answer: dict[str, Any] = msgspec.json.decode(row.answer)
        return answer


class Again:
    """What a batch answers a create whose key an earlier create of the batch holds."""


AGAIN = Again()
# A create not to be made: the first answer under its key, its refusal, or AGAIN.
Settled = dict[str, Any] | Unprocessable | Again


async def submitted(
    submit: Callable[[T], Awaitable[Any]], item: T, idem: Idempotency | None
) -> Any:
    """The outcome of `submit(item)` (a group commit's create). With a key, a create whose
    key was taken by one ahead of it (AGAIN: in its batch; KEY_TAKEN: committed meanwhile
    by another instance's) is submitted again, and decided on what is now stored."""
    if idem is None:
        return await submit(item)
    for _ in range(TRIES):
        try:
            outcome = await submit(item)
        except KEY_TAKEN:
            continue
        if not isinstance(outcome, Again):
            return outcome
    raise Conflict(IN_PROGRESS)


def client_scope(client: str) -> str:
    """The scope of keys of `POST /spaces`: the client address."""
    return f"client {client}"


class Keys:
    """Keys' first answers, read and written in the transactions of the creates."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores

    def since_us(self) -> int:
        """Keys recorded before this instant are forgotten."""
        return self._stores.clock.now_us() - KEEP_US

    async def settle(
        self, st: Statements, claims: Sequence[tuple[int, str, Idempotency]]
    ) -> dict[int, Settled]:
        """Of a batch of creates, each (index, scope, key), within its transaction: by
        index, those not to be made, with the first answer under their key, its refusal
        (422: the key went with another request), or AGAIN (a create before it in the
        batch holds the same key: it is to be submitted again, and then finds that one's
        answer, or is made if that one was refused)."""
        found = await idempotency.find(
            st.rows, [(scope, idem.key) for _, scope, idem in claims], self.since_us()
        )
        rows = {(row.scope, row.key): row for row in found}
        settled: dict[int, Settled] = {}
        leading: set[tuple[str, str]] = set()
        for index, scope, idem in claims:
            row = rows.get((scope, idem.key))
            if row is not None:
                try:
                    settled[index] = idem.answer_of(row)
                except Unprocessable as refused:
                    settled[index] = refused
            elif (scope, idem.key) in leading:
                settled[index] = AGAIN
            else:
                leading.add((scope, idem.key))
        return settled

    async def record(self, st: Statements, rows: Sequence[KeyRow]) -> None:
        """Record first answers, in the transaction of their creates."""
        await idempotency.record(st, rows, self._stores.clock.now_us(), self.since_us())

    async def first_answer(self, scope: str, idem: Idempotency | None) -> dict[str, Any] | None:
        """The first answer under the key, read outside any transaction (before a create's
        costly checks); None if there is none yet (or no key). 422 if it went with another
        request."""
        if idem is None:
            return None
        found = await idempotency.find(self._stores.db.fetch, [(scope, idem.key)], self.since_us())
        return idem.answer_of(found[0]) if found else None

    async def once(
        self,
        scope: str,
        space_uuid: str,
        idem: Idempotency | None,
        write: Callable[[Statements], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """`write(st)` in a unit of work of its own, its answer recorded under the key in
        the same transaction; or, if the key holds an answer, that answer (nothing
        written). Without a key, just the write."""
        writes = self._stores.writes
        if idem is None:
            async with writes.transaction() as unit:
                return await write(unit.st)
        for _ in range(TRIES):
            try:
                async with writes.transaction() as unit:
                    st = unit.st
                    settled = (await self.settle(st, [(0, scope, idem)])).get(0)
                    if isinstance(settled, Unprocessable):
                        raise settled
                    if isinstance(settled, dict):
                        return settled
                    answer = await write(st)
                    await self.record(st, [idem.row(scope, space_uuid, answer)])
                return answer
            except KEY_TAKEN:
                continue
        raise Conflict(IN_PROGRESS)

    async def added_to_space(
        self,
        space_uuid: str,
        idem: Idempotency | None,
        write: Callable[[Statements], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """`once`, for a `write` that adds a row to the space (a webhook, a share link, a
        channel), its key scoped to the space; NotFound if the space was deleted since it
        was found."""
        try:
            return await self.once(space_uuid, space_uuid, idem, write)
        except queries.SpaceGone:
            raise NotFound(NO_SPACE) from None

    async def forget_expired(self) -> int:
        """Delete keys older than a day, a bounded number of short transactions (the
        sweeper's step); how many went. Reads ignore them already."""
        return await idempotency.forget(
            self._stores.db, self.since_us(), FORGET_BATCH, FORGET_BATCHES
        )
