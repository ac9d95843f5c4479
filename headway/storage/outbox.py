"""SQL of webhooks and of delivering the outbox: registrations, fan-out, claims,
retries and worker heartbeats."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import delete, exists, func, insert, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from .queries import space_holds_fewer
from .tables import deliveries, outbox, webhooks, worker_heartbeats

# --- Webhooks ---------------------------------------------------------------------------


async def insert_webhook(
    conn: AsyncConnection,
    uuid: str,
    space_uuid: str,
    url: str,
    secret: str,
    now_us: int,
    *,
    cap: int,
) -> bool:
    """Register a webhook unless the space already has `cap`. False: it has, nothing stored.

    The count is exact under concurrent registrations (see `queries.space_holds_fewer`).
    """
    if not await space_holds_fewer(conn, webhooks, space_uuid, cap):
        return False
    await conn.execute(
        insert(webhooks).values(
            uuid=uuid,
            space_uuid=space_uuid,
            url=url,
            secret=secret,
            created_at_us=now_us,
            receiver=receiver_of(url),
        )
    )
    return True


def receiver_of(url: str) -> str:
    """Who receives a webhook's deliveries: `scheme://host:port` of its URL."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"


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
    space_uuid: str = ""
    receiver: str = ""


async def claim_due(
    conn: AsyncConnection,
    now_us: int,
    lease_until_us: int,
    limit: int,
    *,
    per_space: int,
    per_receiver: int,
    space_load: Mapping[str, int] | None = None,
    receiver_load: Mapping[str, int] | None = None,
) -> list[Claim]:
    """Claim up to `limit` due deliveries for one worker, taking turns across spaces.

    `space_load` and `receiver_load` count the attempts the worker already has in flight
    per space and per receiver; no space gets more than `per_space` in flight and no
    receiver more than `per_receiver`. Among what is due, each space's first delivery
    comes before any space's second, and within a space each receiver's first before
    any receiver's second (oldest first at each turn): one space's backlog, or one slow
    receiver, cannot take every turn.

    Each claim is a conditional update on the row's due time, so of several workers
    racing for a row exactly one wins it; on PostgreSQL a worker skips a row another is
    claiming (SKIP LOCKED) and goes on to the next. A claimed row is due again when the
    lease lapses: a worker that dies mid-delivery leaves its attempt to be retried, with
    the same event id.
    """
    space_load = space_load or {}
    receiver_load = receiver_load or {}
    # Turns are numbered by window functions, which PostgreSQL does not allow with FOR
    # UPDATE: candidates are read without locks, and each is locked as it is claimed.
    due = (
        select(
            deliveries.c.event_id,
            deliveries.c.webhook_uuid,
            deliveries.c.next_attempt_at_us,
            outbox.c.space_uuid,
            webhooks.c.receiver,
            webhooks.c.url,
            webhooks.c.secret,
            func.row_number()
            .over(
                partition_by=webhooks.c.receiver,
                order_by=(deliveries.c.next_attempt_at_us, deliveries.c.event_id),
            )
            .label("receiver_turn"),
        )
        .select_from(deliveries)
        .join(outbox, outbox.c.id == deliveries.c.event_id)
        # A delivery whose webhook is gone has no receiver (NULL): it is settled below.
        .outerjoin(webhooks, webhooks.c.uuid == deliveries.c.webhook_uuid)
        .where(deliveries.c.next_attempt_at_us <= now_us)
    )
    full_spaces = [space for space, n in space_load.items() if n >= per_space]
    if full_spaces:
        due = due.where(outbox.c.space_uuid.not_in(full_spaces))
    full_receivers = [receiver for receiver, n in receiver_load.items() if n >= per_receiver]
    if full_receivers:
        due = due.where(
            or_(webhooks.c.receiver.is_(None), webhooks.c.receiver.not_in(full_receivers))
        )
    by_receiver = due.subquery("by_receiver")
    by_space = (
        select(
            by_receiver,
            func.row_number()
            .over(
                partition_by=by_receiver.c.space_uuid,
                order_by=(
                    by_receiver.c.receiver_turn,
                    by_receiver.c.next_attempt_at_us,
                    by_receiver.c.event_id,
                ),
            )
            .label("space_turn"),
        )
        .where(by_receiver.c.receiver_turn <= per_receiver)
        .subquery("by_space")
    )
    candidates = (
        select(by_space)
        .where(by_space.c.space_turn <= per_space)
        .order_by(by_space.c.space_turn, by_space.c.next_attempt_at_us)
        # Some candidates may be passed over below: busy spaces and receivers, and rows
        # another worker claims first.
        .limit(limit * 4)
    )
    spaces_taken: dict[str, int] = {}
    receivers_taken: dict[str, int] = {}
    won = []
    for row in (await conn.execute(candidates)).all():
        if len(won) == limit:
            break
        if row.receiver is not None:
            in_space = space_load.get(row.space_uuid, 0) + spaces_taken.get(row.space_uuid, 0)
            at_receiver = receiver_load.get(row.receiver, 0) + receivers_taken.get(row.receiver, 0)
            if in_space >= per_space or at_receiver >= per_receiver:
                continue
        still_due = (
            deliveries.c.event_id == row.event_id,
            deliveries.c.webhook_uuid == row.webhook_uuid,
            deliveries.c.next_attempt_at_us == row.next_attempt_at_us,
        )
        if row.receiver is None:
            # Its webhook was deleted while the event was being fanned out: nothing to
            # deliver to, so settle it rather than claim it forever.
            if (await conn.execute(delete(deliveries).where(*still_due))).rowcount == 1:
                await delete_settled_events(conn, row.event_id)
            continue
        unlocked = select(deliveries.c.event_id).where(*still_due)
        claimed = await conn.execute(
            update(deliveries)
            .where(
                *still_due, deliveries.c.event_id.in_(unlocked.with_for_update(skip_locked=True))
            )
            .values(next_attempt_at_us=lease_until_us, attempts=deliveries.c.attempts + 1)
            .returning(deliveries.c.attempts)
        )
        attempt = claimed.scalar()
        if attempt is None:
            continue  # another worker claimed it first
        spaces_taken[row.space_uuid] = spaces_taken.get(row.space_uuid, 0) + 1
        receivers_taken[row.receiver] = receivers_taken.get(row.receiver, 0) + 1
        won.append((row, attempt))
    if not won:
        return []
    # Each event's payload is read once, however many of its deliveries were claimed.
    payloads = dict(
        (
            await conn.execute(
                select(outbox.c.id, outbox.c.payload).where(
                    outbox.c.id.in_({row.event_id for row, _ in won})
                )
            )
        ).all()
    )
    return [
        Claim(
            event_id=row.event_id,
            webhook_uuid=row.webhook_uuid,
            attempt=attempt,
            lease_us=lease_until_us,
            url=row.url,
            secret=row.secret,
            payload=payloads[row.event_id],
            space_uuid=row.space_uuid,
            receiver=row.receiver,
        )
        for row, attempt in won
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
