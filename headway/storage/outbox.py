"""SQL of webhooks and of delivering the outbox: registrations, fan-out, claims,
retries and worker heartbeats. Reads take a `Fetch`, writes `Statements` (see
`storage.database`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .database import Fetch, Statements
from .queries import space_holds_fewer

# --- Webhooks ---------------------------------------------------------------------------


async def insert_webhook(
    st: Statements,
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
    if not await space_holds_fewer(st, "webhooks", space_uuid, cap):
        return False
    await st.many(
        "INSERT INTO webhooks (uuid, space_uuid, url, secret, created_at_us, receiver) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(uuid, space_uuid, url, secret, now_us, receiver_of(url))],
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


async def list_webhooks(fetch: Fetch, space_uuid: str) -> list[tuple[str, str]]:
    """(uuid, url) of the space's webhooks, oldest first."""
    found = await fetch(
        "SELECT uuid, url FROM webhooks WHERE space_uuid = ? ORDER BY created_at_us, uuid",
        (space_uuid,),
    )
    return [(uuid, url) for uuid, url in found]


async def delete_webhook(st: Statements, space_uuid: str, uuid: str) -> bool:
    """Delete a webhook and what it still had to deliver. False: no such webhook here."""
    deleted = await st.rows(
        "DELETE FROM webhooks WHERE uuid = ? AND space_uuid = ? RETURNING uuid",
        (uuid, space_uuid),
    )
    if len(deleted) != 1:
        return False
    await st.many("DELETE FROM deliveries WHERE webhook_uuid = ?", [(uuid,)])
    return True


async def fan_out(st: Statements, event_id: str, space_uuid: str, now_us: int) -> None:
    """Queue the event for every webhook the space has now, due at once."""
    # Typed parameters: PostgreSQL cannot tell the type of a parameter that is only selected.
    await st.many(
        "INSERT INTO deliveries (event_id, webhook_uuid, attempts, next_attempt_at_us) "
        "SELECT CAST(? AS VARCHAR(64)), uuid, 0, CAST(? AS BIGINT) "
        "FROM webhooks WHERE space_uuid = ?",
        [(event_id, now_us, space_uuid)],
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
    st: Statements,
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
        "SELECT deliveries.event_id, deliveries.webhook_uuid, deliveries.next_attempt_at_us, "
        "outbox.space_uuid, webhooks.receiver, webhooks.url, webhooks.secret, "
        "row_number() OVER (PARTITION BY webhooks.receiver "
        "ORDER BY deliveries.next_attempt_at_us, deliveries.event_id) AS receiver_turn "
        "FROM deliveries JOIN outbox ON outbox.id = deliveries.event_id "
        # A delivery whose webhook is gone has no receiver (NULL): it is settled below.
        "LEFT OUTER JOIN webhooks ON webhooks.uuid = deliveries.webhook_uuid "
        "WHERE deliveries.next_attempt_at_us <= ?"
    )
    params: list[Any] = [now_us]
    full_spaces = [space for space, n in space_load.items() if n >= per_space]
    if full_spaces:
        due += f" AND outbox.space_uuid NOT IN ({_marks(full_spaces)})"
        params.extend(full_spaces)
    full_receivers = [receiver for receiver, n in receiver_load.items() if n >= per_receiver]
    if full_receivers:
        due += (
            " AND (webhooks.receiver IS NULL"
            f" OR webhooks.receiver NOT IN ({_marks(full_receivers)}))"
        )
        params.extend(full_receivers)
    candidates = (
        f"SELECT {_CANDIDATE} FROM (SELECT {_CANDIDATE}, receiver_turn, "
        "row_number() OVER (PARTITION BY space_uuid "
        "ORDER BY receiver_turn, next_attempt_at_us, event_id) AS space_turn "
        f"FROM ({due}) AS by_receiver WHERE receiver_turn <= ?) AS by_space "
        "WHERE space_turn <= ? ORDER BY space_turn, next_attempt_at_us LIMIT ?"
    )
    # Some candidates may be passed over below: busy spaces and receivers, and rows
    # another worker claims first.
    params.extend((per_receiver, per_space, limit * 4))
    # The claim's lock: PostgreSQL's; SQLite runs one write transaction at a time.
    skip_locked = "" if st.is_sqlite else " FOR UPDATE SKIP LOCKED"
    spaces_taken: dict[str, int] = {}
    receivers_taken: dict[str, int] = {}
    won: list[tuple[Sequence[Any], int]] = []
    for row in await st.rows(candidates, params):
        if len(won) == limit:
            break
        event_id, webhook_uuid, due_us, space_uuid, receiver = row[:5]
        if receiver is not None:
            in_space = space_load.get(space_uuid, 0) + spaces_taken.get(space_uuid, 0)
            at_receiver = receiver_load.get(receiver, 0) + receivers_taken.get(receiver, 0)
            if in_space >= per_space or at_receiver >= per_receiver:
                continue
        still_due = (event_id, webhook_uuid, due_us)
        if receiver is None:
            # Its webhook was deleted while the event was being fanned out: nothing to
            # deliver to, so settle it rather than claim it forever.
            if await st.rows(
                f"DELETE FROM deliveries WHERE {_STILL_DUE} RETURNING event_id", still_due
            ):
                await delete_settled_events(st, event_id)
            continue
        claimed = await st.rows(
            "UPDATE deliveries SET next_attempt_at_us = ?, attempts = attempts + 1 "
            f"WHERE {_STILL_DUE} AND event_id IN "
            f"(SELECT event_id FROM deliveries WHERE {_STILL_DUE}{skip_locked}) "
            "RETURNING attempts",
            (lease_until_us, *still_due, *still_due),
        )
        if not claimed:
            continue  # another worker claimed it first
        spaces_taken[space_uuid] = spaces_taken.get(space_uuid, 0) + 1
        receivers_taken[receiver] = receivers_taken.get(receiver, 0) + 1
        won.append((row, claimed[0][0]))
    if not won:
        return []
    # Each event's payload is read once, however many of its deliveries were claimed.
    events = list(dict.fromkeys(row[0] for row, _ in won))
    payloads = dict(
        await st.rows(f"SELECT id, payload FROM outbox WHERE id IN ({_marks(events)})", events)
    )
    return [
        Claim(
            event_id=event_id,
            webhook_uuid=webhook_uuid,
            attempt=attempt,
            lease_us=lease_until_us,
            url=url,
            secret=secret,
            payload=payloads[event_id],
            space_uuid=space_uuid,
            receiver=receiver,
        )
        for (event_id, webhook_uuid, _, space_uuid, receiver, url, secret), attempt in won
    ]


# The columns of a candidate delivery, in `claim_due`'s order.
_CANDIDATE = "event_id, webhook_uuid, next_attempt_at_us, space_uuid, receiver, url, secret"
# A delivery row still as a candidate showed it: (event id, webhook uuid, due time).
_STILL_DUE = "event_id = ? AND webhook_uuid = ? AND next_attempt_at_us = ?"


def _marks(values: Sequence[object]) -> str:
    """One `?` for each value, for an IN list."""
    return ", ".join("?" * len(values))


async def finish_delivery(st: Statements, claim: Claim) -> bool:
    """Remove a delivered (or given-up) delivery, and its event once nothing is left.
    False: the claim had lapsed and another worker owns the row now."""
    deleted = await st.rows(
        f"DELETE FROM deliveries WHERE {_STILL_DUE} RETURNING event_id", _owned(claim)
    )
    await delete_settled_events(st, claim.event_id)
    return len(deleted) == 1


async def retry_delivery(st: Statements, claim: Claim, next_attempt_at_us: int, error: str) -> bool:
    """Schedule the next attempt. False: the claim had lapsed."""
    updated = await st.rows(
        f"UPDATE deliveries SET next_attempt_at_us = ?, last_error = ? WHERE {_STILL_DUE} "
        "RETURNING event_id",
        (next_attempt_at_us, error[:1000], *_owned(claim)),
    )
    return len(updated) == 1


def _owned(claim: Claim) -> tuple[str, str, int]:
    """The claimed row while the claim holds it (see `_STILL_DUE`)."""
    return (claim.event_id, claim.webhook_uuid, claim.lease_us)


async def delete_settled_events(st: Statements, event_id: str | None = None) -> int:
    """Delete events with no delivery left to make (one event, or all of them); how many."""
    sql = (
        "DELETE FROM outbox WHERE NOT EXISTS "
        "(SELECT 1 FROM deliveries WHERE deliveries.event_id = outbox.id)"
    )
    if event_id is None:
        return len(await st.rows(f"{sql} RETURNING id", ()))
    return len(await st.rows(f"{sql} AND outbox.id = ? RETURNING id", (event_id,)))


async def next_due_at(fetch: Fetch) -> int | None:
    """When the earliest delivery is due (None: nothing queued)."""
    found = await fetch("SELECT min(next_attempt_at_us) FROM deliveries", ())
    return found[0][0]


# Pending deliveries (due, leased or waiting to retry) and events still in the outbox.
_BACKLOG = "SELECT (SELECT count(*) FROM deliveries), (SELECT count(*) FROM outbox)"


async def backlog(fetch: Fetch) -> tuple[int, int]:
    """How many deliveries are pending (due, leased or waiting to retry), and how many
    events are still in the outbox."""
    found = await fetch(_BACKLOG, ())
    return found[0][0], found[0][1]


# --- Heartbeats -------------------------------------------------------------------------


async def beat(st: Statements, worker_id: str, now_us: int) -> None:
    await st.many(
        "INSERT INTO worker_heartbeats (worker_id, beat_at_us) VALUES (?, ?) "
        "ON CONFLICT (worker_id) DO UPDATE SET beat_at_us = excluded.beat_at_us",
        [(worker_id, now_us)],
    )


async def forget_worker(st: Statements, worker_id: str) -> None:
    await st.many("DELETE FROM worker_heartbeats WHERE worker_id = ?", [(worker_id,)])


async def latest_beat(fetch: Fetch) -> int | None:
    found = await fetch("SELECT max(beat_at_us) FROM worker_heartbeats", ())
    return found[0][0]
