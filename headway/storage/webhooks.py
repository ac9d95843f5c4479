"""SQL of webhooks and their queue (see `storage.outbox`): registrations, fan-out within
each webhook's cap, giving up by age, settling events. Claims and their outcomes are
`storage.deliveries`'. Reads take a `Fetch`, writes `Statements` (see
`storage.database`).

An event is stored once (the `outbox` table) and queued as one delivery per webhook;
it leaves once its last delivery settles. An event is given up by age through the index
on its deliveries' creation, and beyond a webhook's cap through its count
(`webhooks.undelivered`); a claim reads a window of webhooks by due time (see
`storage.deliveries`). Nothing scans the backlog.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from .database import Fetch, Statements, marks
from .outbox import WEBHOOKS, count_in, count_out, lock, log_outcomes, push_out
from .queries import delete_held, insert_held, list_held

# The type of the events webhooks hear (the outbox's `type`).
EVENT = WEBHOOKS.several
# A delivery row while its claim holds it: (event id, webhook uuid, lease); see
# `storage.deliveries`.
OWNED = "event_id = ? AND webhook_uuid = ? AND next_attempt_at_us = ?"

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
    """Register a webhook unless the space already has `cap` (see `queries.insert_held`)."""
    columns = "uuid, space_uuid, url, secret, created_at_us, receiver"
    row = (uuid, space_uuid, url, secret, now_us, receiver_of(url))
    return await insert_held(st, "webhooks", space_uuid, cap, columns, row)


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
    return [
        (uuid, url) for uuid, url in await list_held(fetch, "webhooks", "uuid, url", space_uuid)
    ]


async def delete_webhook(st: Statements, space_uuid: str, uuid: str) -> bool:
    """Delete a webhook, what it still had to deliver and its log. False: no such
    webhook here."""
    if not await delete_held(st, "webhooks", space_uuid, uuid):
        return False
    gone = await st.rows(
        "DELETE FROM deliveries WHERE webhook_uuid = ? RETURNING event_id", (uuid,)
    )
    await st.many("DELETE FROM webhook_log WHERE webhook_uuid = ?", [(uuid,)])
    await delete_settled_events(st, [row[0] for row in gone])
    return True


# --- Fan-out ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FanOut:
    """What queuing an event did: how many webhooks it was queued for, and how many older
    events it pushed out of full webhooks (each given up)."""

    webhooks: int
    given_up: int = 0


async def space_endpoints(fetch: Fetch, space_uuid: str) -> tuple[bool, bool]:
    """Whether the space has webhooks, and whether it has channels."""
    found = await fetch(
        "SELECT EXISTS (SELECT 1 FROM webhooks WHERE space_uuid = ?), "
        "EXISTS (SELECT 1 FROM channels WHERE space_uuid = ?)",
        (space_uuid, space_uuid),
    )
    return bool(found[0][0]), bool(found[0][1])


async def fan_out(
    st: Statements, event_id: str, space_uuid: str, now_us: int, *, cap: int
) -> FanOut:
    """Queue the event for every webhook the space has now, due at once, and give up the
    oldest undelivered events of a webhook that holds more than `cap` (each noted in its
    log). Call before inserting the event (it stores the count, see `queries.insert_event`).

    One statement counts the event in each webhook and makes it due; the cap is checked on
    those counts, so a full webhook costs one more statement, never a count of its backlog.
    """
    lowered = (
        ", next_due_at_us = CASE WHEN next_due_at_us IS NULL OR next_due_at_us > "
        "CAST(? AS BIGINT) THEN CAST(? AS BIGINT) ELSE next_due_at_us END"
    )
    counted = await count_in(
        st, WEBHOOKS, "space_uuid = ?", (now_us, now_us, space_uuid), also=lowered
    )
    if not counted:
        return FanOut(0)
    await st.many(
        "INSERT INTO deliveries (event_id, webhook_uuid, attempts, next_attempt_at_us, "
        "created_at_us) VALUES (?, ?, 0, ?, ?)",
        [(event_id, webhook_uuid, now_us, now_us) for webhook_uuid, _ in counted],
    )
    given_up = 0
    for webhook_uuid, undelivered in sorted(counted):
        if undelivered > cap:
            gone = await push_out(
                st, WEBHOOKS, webhook_uuid, undelivered - cap, event_id, now_us, cap
            )
            await delete_settled_events(st, gone)
            given_up += len(gone)
    return FanOut(len(counted), given_up)


# --- Giving up by age, settling events -------------------------------------------------


async def recompute_due(st: Statements, webhook_uuids: Sequence[str]) -> None:
    """Set each webhook's `next_due_at_us` to its earliest delivery's (an index lookup)."""
    if not webhook_uuids:
        return
    await st.many(
        "UPDATE webhooks SET next_due_at_us = (SELECT min(next_attempt_at_us) FROM deliveries "
        "WHERE deliveries.webhook_uuid = webhooks.uuid) WHERE uuid = ?",
        [(webhook_uuid,) for webhook_uuid in sorted(set(webhook_uuids))],
    )


async def give_up_old(st: Statements, created_before_us: int, now_us: int, limit: int) -> int:
    """Give up the events created at `created_before_us` or before that are undelivered,
    oldest first, at most about `limit` deliveries: an index range on their creation,
    never a scan. Each webhook notes them in its log. How many deliveries were given up."""
    found = await st.rows(
        "SELECT DISTINCT event_id FROM (SELECT event_id FROM deliveries WHERE created_at_us <= ? "
        "ORDER BY created_at_us LIMIT ?) AS old",
        (created_before_us, limit),
    )
    if not found:
        return 0
    events = sorted(row[0] for row in found)
    hooks = await st.rows(
        f"SELECT DISTINCT webhook_uuid FROM deliveries WHERE event_id IN ({marks(events)})",
        events,
    )
    await lock(st, WEBHOOKS, [row[0] for row in hooks])
    gone = await st.rows(
        f"DELETE FROM deliveries WHERE event_id IN ({marks(events)}) AND created_at_us <= ? "
        "RETURNING webhook_uuid",
        (*events, created_before_us),
    )
    per_webhook = Counter(row[0] for row in gone)
    if not per_webhook:
        return 0
    await count_out(st, WEBHOOKS, per_webhook)
    await recompute_due(st, list(per_webhook))
    hours = (now_us - created_before_us) / 3_600_000_000
    age = f"{hours:g} h" if hours >= 1 else f"{hours * 60:g} min"
    await log_outcomes(
        st,
        WEBHOOKS,
        [
            (webhook_uuid, now_us, EVENT, "given_up", _aged(count, age))
            for webhook_uuid, count in sorted(per_webhook.items())
        ],
    )
    await delete_settled_events(st, events)
    return len(gone)


def _aged(count: int, age: str) -> str:
    if count == 1:
        return f"undelivered {age} after it was created: given up"
    return f"{count} events undelivered {age} after they were created: given up"


async def delete_settled_events(st: Statements, event_ids: Sequence[str]) -> None:
    """Delete those of these events that have no delivery left to make."""
    for start in range(0, len(event_ids), 500):
        chunk = sorted(set(event_ids[start : start + 500]))
        await st.many(
            f"DELETE FROM outbox WHERE id IN ({marks(chunk)}) AND NOT EXISTS "
            "(SELECT 1 FROM deliveries WHERE deliveries.event_id = outbox.id)",
            [chunk],
        )


async def sweep_unwatched(st: Statements, limit: int) -> int:
    """Delete up to `limit` events that were queued for no webhook (the oldest first, an
    index range); how many. Events queued for webhooks leave as their last delivery
    settles."""
    gone = await st.rows(
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE webhooks = 0 "
        "ORDER BY created_at_us LIMIT ?) RETURNING id",
        (limit,),
    )
    return len(gone)


async def next_due_at(fetch: Fetch) -> int | None:
    """When the earliest webhook's turn comes (None: nothing queued); an index lookup."""
    found = await fetch("SELECT min(next_due_at_us) FROM webhooks", ())
    return found[0][0]


# Pending deliveries (due, leased or waiting to retry), from the webhooks' counts, and
# events still in the outbox.
_BACKLOG = (
    "SELECT (SELECT coalesce(sum(undelivered), 0) FROM webhooks), (SELECT count(*) FROM outbox)"
)


async def backlog(fetch: Fetch) -> tuple[int, int]:
    """How many deliveries are pending (due, leased or waiting to retry), and how many
    events are still in the outbox."""
    found = await fetch(_BACKLOG, ())
    return int(found[0][0]), int(found[0][1])
