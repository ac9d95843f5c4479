"""SQL for share links: read-only links to a space, each a row until it is revoked; and
the server secret their task ids are keyed by, made once and shared by every instance."""

from __future__ import annotations

import base64
import secrets
from typing import Literal

from .database import Database, Fetch, Statements, chunks, marks
from .queries import delete_held, insert_held, list_held


async def insert_share(
    st: Statements, uuid: str, space_uuid: str, now_us: int, *, cap: int
) -> bool:
    """Record a share link unless the space already has `cap` (see `queries.insert_held`)."""
    row = (uuid, space_uuid, now_us)
    return await insert_held(st, "shares", space_uuid, cap, "uuid, space_uuid, created_at_us", row)


async def list_shares(fetch: Fetch, space_uuid: str) -> list[tuple[str, int]]:
    """The space's share links as (uuid, created_at_us), oldest first."""
    found = await list_held(fetch, "shares", "uuid, created_at_us", space_uuid)
    return [(uuid, created) for uuid, created in found]


async def delete_share(st: Statements, space_uuid: str, uuid: str) -> bool:
    """Revoke a share link of the space; False if it has no such link."""
    return await delete_held(st, "shares", space_uuid, uuid)


async def space_of_share(fetch: Fetch, uuid: str) -> str | None:
    """The space a share link shows, or None if there is no such link."""
    found = await fetch("SELECT space_uuid FROM shares WHERE uuid = ?", (uuid,))
    return found[0][0] if found else None


# Uuids named in one statement.
AT_ONCE = 500


async def existing(fetch: Fetch, table: Literal["spaces", "shares"], uuids: list[str]) -> set[str]:
    """Which of `uuids` are still rows of `table` (spaces not deleted, or share links)."""
    found: set[str] = set()
    live = " AND deleted_at_us IS NULL" if table == "spaces" else ""
    for chunk in chunks(uuids, AT_ONCE):
        rows = await fetch(f"SELECT uuid FROM {table} WHERE uuid IN ({marks(chunk)}){live}", chunk)
        found.update(row[0] for row in rows)
    return found


SHARE_SECRET = "share_task_ids"


async def share_secret(db: Database, now_us: int) -> bytes:
    """The secret share links' task ids are keyed by: made by the first start (of
    whichever instance gets there first), then the same for every instance and every
    restart."""
    select = "SELECT value FROM secrets WHERE name = ?"
    found = await db.fetch(select, (SHARE_SECRET,))
    if not found:
        made = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
        async with db.write() as st:
            await st.rows(
                "INSERT INTO secrets (name, value, created_at_us) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (SHARE_SECRET, made, now_us),
            )
            found = await st.rows(select, (SHARE_SECRET,))
    return base64.urlsafe_b64decode(found[0][0])


async def tasks_since(fetch: Fetch, space_uuid: str, after_us: int) -> list[tuple[str, int]]:
    """The space's tasks (steps too) created after `after_us`, as (uuid, created_at_us),
    oldest first: what a share link's ids may name that was not seen before."""
    found = await fetch(
        "SELECT uuid, created_at_us FROM tasks WHERE space_uuid = ? AND created_at_us > ? "
        "ORDER BY created_at_us",
        (space_uuid, after_us),
    )
    return [(uuid, created) for uuid, created in found]
