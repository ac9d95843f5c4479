"""SQL for share links: read-only links to a space, each a row until it is revoked."""

from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from .queries import space_holds_fewer
from .tables import shares


async def insert_share(
    conn: AsyncConnection, uuid: str, space_uuid: str, now_us: int, *, cap: int
) -> bool:
    """Record a share link unless the space already has `cap`. False: it has, nothing
    stored. Exact under concurrent creates (see `queries.space_holds_fewer`)."""
    if not await space_holds_fewer(conn, shares, space_uuid, cap):
        return False
    await conn.execute(
        insert(shares).values(uuid=uuid, space_uuid=space_uuid, created_at_us=now_us)
    )
    return True


async def list_shares(conn: AsyncConnection, space_uuid: str) -> list[tuple[str, int]]:
    """The space's share links as (uuid, created_at_us), oldest first."""
    query = (
        select(shares.c.uuid, shares.c.created_at_us)
        .where(shares.c.space_uuid == space_uuid)
        .order_by(shares.c.created_at_us, shares.c.uuid)
    )
    return [(uuid, created) for uuid, created in (await conn.execute(query)).all()]


async def delete_share(conn: AsyncConnection, space_uuid: str, uuid: str) -> bool:
    """Revoke a share link of the space; False if it has no such link."""
    result = await conn.execute(
        delete(shares).where(shares.c.uuid == uuid, shares.c.space_uuid == space_uuid)
    )
    return result.rowcount > 0


async def space_of_share(conn: AsyncConnection, uuid: str) -> str | None:
    """The space a share link shows, or None if there is no such link."""
    query = select(shares.c.space_uuid).where(shares.c.uuid == uuid)
    return (await conn.execute(query)).scalar_one_or_none()
