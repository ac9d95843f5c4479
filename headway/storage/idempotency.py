"""SQL of idempotency keys: the first answer of each create made with an
`Idempotency-Key`, written in the create's own transaction, found again by (scope, key),
and forgotten a batch at a time once it is older than a day."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .database import Database, Fetch, Statements, chunks
from .queries import LIVE

# Keys named in one statement (two parameters each; SQLite allows 32,766).
AT_ONCE = 500


@dataclass(frozen=True, slots=True)
class KeyRow:
    """A create's key, and what its first answer was."""

    scope: str  # the space of a space's create, or "client <address>" for POST /spaces
    key: str
    fingerprint: str  # of the operation and its body
    space_uuid: str  # the space the answer is about: deleted with it
    status: int
    answer: str  # JSON


async def find(fetch: Fetch, keys: Sequence[tuple[str, str]], since_us: int) -> list[KeyRow]:
    """The rows of these (scope, key) pairs recorded at or after `since_us`, in no order;
    none whose answer names a deleted space (its keys go with it: a retry is decided
    afresh, as if they had gone already)."""
    found: list[KeyRow] = []
    for chunk in chunks(keys, AT_ONCE):
        pairs = " OR ".join("(scope = ? AND key = ?)" for _ in chunk)
        rows = await fetch(
            "SELECT scope, key, fingerprint, space_uuid, status, answer FROM idempotency_keys "
            f"WHERE ({pairs}) AND created_at_us >= ? AND {LIVE}",
            (*(value for pair in chunk for value in pair), since_us),
        )
        found.extend(KeyRow(*row) for row in rows)
    return found


async def record(st: Statements, rows: Sequence[KeyRow], now_us: int, since_us: int) -> None:
    """Record the first answers of `rows`, in the transaction of the writes they answer.
    A row of the same key older than `since_us` (forgotten, not yet swept) or of a deleted
    space (not yet removed) is replaced; a newer one (a concurrent create with the key,
    on PostgreSQL) fails the transaction with the unique constraint's IntegrityError, so
    that only one of them commits."""
    if not rows:
        return
    ordered = sorted(rows, key=lambda row: (row.scope, row.key))  # no deadlock between two
    await st.many(
        "DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND (created_at_us < ? "
        "OR space_uuid IN (SELECT uuid FROM spaces WHERE deleted_at_us IS NOT NULL))",
        [(row.scope, row.key, since_us) for row in ordered],
    )
    await st.many(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, space_uuid, status, answer, "
        "created_at_us) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (row.scope, row.key, row.fingerprint, row.space_uuid, row.status, row.answer, now_us)
            for row in ordered
        ],
    )


async def forget(db: Database, before_us: int, batch: int, batches: int) -> int:
    """Delete keys recorded before `before_us`, `batch` at a time (one short transaction
    each), at most `batches` times; how many went."""
    due = await db.fetch(
        "SELECT 1 FROM idempotency_keys WHERE created_at_us < ? LIMIT 1", (before_us,)
    )
    if not due:
        return 0  # nothing written: no write lock taken for nothing
    gone = 0
    for _ in range(batches):
        async with db.write() as st:
            deleted = await st.rows(
                "DELETE FROM idempotency_keys WHERE (scope, key) IN (SELECT scope, key FROM "
                "idempotency_keys WHERE created_at_us < ? ORDER BY created_at_us LIMIT ?) "
                "RETURNING 1",
                (before_us, batch),
            )
        gone += len(deleted)
        if len(deleted) < batch:
            break
    return gone
