"""SQL of webhooks and of delivering the outbox: registrations, fan-out, claims,
retries and worker heartbeats."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, exists, func, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from .tables import deliveries, outbox, webhooks, worker_heartbeats

# --- Webhooks ---------------------------------------------------------------------------


async def insert_webhook(
    conn: AsyncConnection, uuid: str, space_uuid: str, url: str, secret: str, now_us: int
) -> None:
    await conn.execute(
        insert(webhooks).values(
            uuid=uuid, space_uuid=space_uuid, url=url, secret=secret, created_at_us=now_us
        )
    )


async def list_webhooks(conn: AsyncConnection, space_uuid: str) -> list[tuple[str, str]]:
    """(uuid, url) of the space's webhooks, oldest first."""
    query = (
        select(webhooks.c.uuid, webhooks.c.url)
        .where(webhooks.c.space_uuid == space_uuid)
        .order_by(webhooks.c.created_at_us, webhooks.c.uuid)
    )
    return [(row.uuid, row.url) for row in await conn.execute(query)]


async def delete_webhook(conn: AsyncConnection, space_uuid: str, uuid: str) -> bool:
    """Delete a webhook and what it still had to deliver. False: no such webhook here."""
    result = await conn.execute(
        delete(webhooks).where(webhooks.c.uuid == uuid, webhooks.c.space_uuid == space_uuid)
    )
    if result.rowcount != 1:
        return False
    await conn.execute(delete(deliveries).where(deliveries.c.webhook_uuid == uuid))
    return True


async def fan_out(conn: AsyncConnection, event_id: str, space_uuid: str, now_us: int) -> None:
    """Queue the event for every webhook the space has now, due at once."""
    await conn.execute(
        insert(deliveries).from_select(
            ["event_id", "webhook_uuid", "attempts", "next_attempt_at_us"],
            select(literal(event_id), webhooks.c.uuid, literal(0), literal(now_us)).where(
                webhooks.c.space_uuid == space_uuid
            ),
        )
    )


# --- Deliveries -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """One delivery attempt a worker has won. `lease_us` is the claim's token: the
    attempt's outcome is recorded only while the row still carries it."""

    event_id: str
    webhook_uuid: str
    attempt: int
    lease_us: int
    url: str
    secret: str
    payload: str


async def claim_due(
    conn: AsyncConnection, now_us: int, lease_until_us: int, limit: int
) -> list[Claim]:
    """Claim up to `limit` due deliveries for one worker.

    Each claim is a conditional update on the row's due time, so of several workers
    racing for a row exactly one wins it; PostgreSQL also skips rows another worker has
    locked. A claimed row is due again when the lease lapses: a worker that dies mid-
    delivery leaves its attempt to be retried, with the same event id.
    """
    due = (
        select(
            deliveries.c.event_id,
            deliveries.c.webhook_uuid,
            deliveries.c.attempts,
            deliveries.c.next_attempt_at_us,
        )
        .where(deliveries.c.next_attempt_at_us <= now_us)
        .order_by(deliveries.c.next_attempt_at_us)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    claimed = []
    for row in (await conn.execute(due)).all():
        won = await conn.execute(
            update(deliveries)
            .where(
                deliveries.c.event_id == row.event_id,
                deliveries.c.webhook_uuid == row.webhook_uuid,
                deliveries.c.next_attempt_at_us == row.next_attempt_at_us,
            )
            .values(next_attempt_at_us=lease_until_us, attempts=row.attempts + 1)
        )
        if won.rowcount == 1:
            claimed.append((row.event_id, row.webhook_uuid, row.attempts + 1))
    if not claimed:
        return []
    details = await conn.execute(
        select(outbox.c.id, webhooks.c.uuid, webhooks.c.url, webhooks.c.secret, outbox.c.payload)
        .select_from(outbox.join(deliveries, deliveries.c.event_id == outbox.c.id))
        .join(webhooks, webhooks.c.uuid == deliveries.c.webhook_uuid)
        .where(outbox.c.id.in_({event_id for event_id, _, _ in claimed}))
    )
    found = {(r.id, r.uuid): r for r in details}
    for event_id, hook, _ in claimed:
        if (event_id, hook) not in found:
            # Its webhook was deleted while the event was being fanned out: nothing to
            # deliver to, so settle it rather than claim it forever.
            await conn.execute(
                delete(deliveries).where(
                    deliveries.c.event_id == event_id, deliveries.c.webhook_uuid == hook
                )
            )
            await delete_settled_events(conn, event_id)
    return [
        Claim(event_id, hook, attempt, lease_until_us, *found[event_id, hook][2:])
        for event_id, hook, attempt in claimed
        if (event_id, hook) in found
    ]


async def finish_delivery(conn: AsyncConnection, claim: Claim) -> bool:
    """Remove a delivered (or given-up) delivery, and its event once nothing is left.
    False: the claim had lapsed and another worker owns the row now."""
    result = await conn.execute(delete(deliveries).where(*_owned(claim)))
    await delete_settled_events(conn, claim.event_id)
    return result.rowcount == 1


async def retry_delivery(
    conn: AsyncConnection, claim: Claim, next_attempt_at_us: int, error: str
) -> bool:
    """Schedule the next attempt. False: the claim had lapsed."""
    result = await conn.execute(
        update(deliveries)
        .where(*_owned(claim))
        .values(next_attempt_at_us=next_attempt_at_us, last_error=error[:1000])
    )
    return result.rowcount == 1


def _owned(claim: Claim) -> tuple[object, ...]:
    return (
        deliveries.c.event_id == claim.event_id,
        deliveries.c.webhook_uuid == claim.webhook_uuid,
        deliveries.c.next_attempt_at_us == claim.lease_us,
    )


async def delete_settled_events(conn: AsyncConnection, event_id: str | None = None) -> int:
    """Delete events with no delivery left to make (one event, or all of them)."""
    pending = exists().where(deliveries.c.event_id == outbox.c.id)
    query = delete(outbox).where(~pending)
    if event_id is not None:
        query = query.where(outbox.c.id == event_id)
    return (await conn.execute(query)).rowcount


async def next_due_at(conn: AsyncConnection) -> int | None:
    """When the earliest delivery is due (None: nothing queued)."""
    return (await conn.execute(select(func.min(deliveries.c.next_attempt_at_us)))).scalar()


# --- Heartbeats -------------------------------------------------------------------------


async def beat(conn: AsyncConnection, worker_id: str, now_us: int) -> None:
    updated = await conn.execute(
        update(worker_heartbeats)
        .where(worker_heartbeats.c.worker_id == worker_id)
        .values(beat_at_us=now_us)
    )
    if updated.rowcount == 0:
        await conn.execute(insert(worker_heartbeats).values(worker_id=worker_id, beat_at_us=now_us))


async def forget_worker(conn: AsyncConnection, worker_id: str) -> None:
    await conn.execute(delete(worker_heartbeats).where(worker_heartbeats.c.worker_id == worker_id))


async def latest_beat(conn: AsyncConnection) -> int | None:
    return (await conn.execute(select(func.max(worker_heartbeats.c.beat_at_us)))).scalar()
