"""SQL of webhooks and of queuing the outbox: registrations, fan-out within each webhook's
cap, giving up (by the cap, by age), each webhook's last deliveries, settling events, and
worker heartbeats. Claims and their outcomes are `storage.deliveries`'. Reads take a
`Fetch`, writes `Statements` (see `storage.database`).

Every cost here is bounded whatever the backlog (Svix's outbox): an event is given up by
age through the index on its creation, and beyond a webhook's cap through its count
(`webhooks.undelivered`) and the index on each webhook's deliveries by creation; a claim
reads a window of webhooks by due time (see `storage.deliveries`). Nothing scans the
backlog.

On PostgreSQL, a transaction that waits for locks takes the rows of webhooks before the
rows of their deliveries, and several webhooks in uuid order; a claim waits for none (it
skips locked rows): so fan-outs, claims, outcomes and deletes, which all change both,
cannot deadlock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from .database import Fetch, Statements
from .queries import space_holds_fewer

# Deliveries kept in each webhook's log (`GET /spaces/{s}/webhooks`).
LOG_KEPT = 20
# The type of the events webhooks hear (the outbox's `type`).
EVENT = "task.completed"

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
    """Delete a webhook, what it still had to deliver and its log. False: no such
    webhook here."""
    deleted = await st.rows(
        "DELETE FROM webhooks WHERE uuid = ? AND space_uuid = ? RETURNING uuid",
        (uuid, space_uuid),
    )
    if len(deleted) != 1:
        return False
    gone = await st.rows(
        "DELETE FROM deliveries WHERE webhook_uuid = ? RETURNING event_id", (uuid,)
    )
    await st.many("DELETE FROM webhook_log WHERE webhook_uuid = ?", [(uuid,)])
    await delete_settled_events(st, [row[0] for row in gone])
    return True


async def lock_webhooks(st: Statements, uuids: Sequence[str]) -> None:
    """On PostgreSQL, take these webhooks' rows, in uuid order, before their deliveries'
    (see the module's docstring); SQLite runs one write transaction at a time."""
    if st.is_sqlite or not uuids:
        return
    ordered = sorted(set(uuids))
    await st.rows(
        f"SELECT uuid FROM webhooks WHERE uuid IN ({marks(ordered)}) ORDER BY uuid FOR UPDATE",
        ordered,
    )


def marks(values: Sequence[object]) -> str:
    """One `?` for each value, for an IN list."""
    return ", ".join("?" * len(values))


# --- Each webhook's last deliveries -------------------------------------------------------


Logs = dict[str, list[tuple[int, str, str, str | None]]]


async def webhook_logs(fetch: Fetch, webhook_uuids: Sequence[str]) -> Logs:
    """Each webhook's last deliveries, newest first: (at, event, outcome, detail)."""
    return await delivery_logs(fetch, "webhook_log", "webhook_uuid", webhook_uuids, LOG_KEPT)


async def delivery_logs(
    fetch: Fetch, table: str, column: str, uuids: Sequence[str], most: int
) -> Logs:
    """The last `most` deliveries of each of `uuids` in the log `table` (keyed by `column`),
    newest first: (at, event, outcome, detail)."""
    logs: Logs = {uuid: [] for uuid in uuids}
    if not uuids:
        return logs
    found = await fetch(
        f"SELECT {column}, at_us, event, outcome, detail FROM {table} "
        f"WHERE {column} IN ({marks(uuids)}) ORDER BY id DESC",
        tuple(uuids),
    )
    for uuid, at_us, event, outcome, detail in found:
        kept = logs[uuid]
        if len(kept) < most:
            kept.append((int(at_us), event, outcome, detail))
    return logs


# A delivery row while its claim holds it: (event id, webhook uuid, lease); see
# `storage.deliveries`.
OWNED = "event_id = ? AND webhook_uuid = ? AND next_attempt_at_us = ?"


async def log_deliveries(
    st: Statements,
    entries: Sequence[tuple[str, int, str, str, str | None]],
    *,
    if_owned: tuple[str, str, int] | None = None,
) -> None:
    """Keep deliveries in their webhooks' logs: (webhook, at, event, outcome, detail),
    the last `LOG_KEPT` of each; not those of a webhook deleted meanwhile (with its space:
    its deliveries stay a while, and an attempt under way may end after it). `if_owned`:
    only while that claimed row still exists."""
    rows = [(w, at, ev, out, None if d is None else d[:500]) for w, at, ev, out, d in entries]
    if not rows:
        return
    insert = (
        "INSERT INTO webhook_log (webhook_uuid, at_us, event, outcome, detail) "
        "SELECT CAST(? AS VARCHAR(36)), CAST(? AS BIGINT), CAST(? AS VARCHAR(64)), "
        "CAST(? AS VARCHAR(16)), CAST(? AS TEXT) WHERE EXISTS (SELECT 1 FROM webhooks "
        "WHERE uuid = ?)"
    )
    if if_owned is None:
        await st.many(insert, [(*row, row[0]) for row in rows])
    else:
        await st.many(
            f"{insert} AND EXISTS (SELECT 1 FROM deliveries WHERE {OWNED})",
            [(*row, row[0], *if_owned) for row in rows],
        )
    # The log's newest LOG_KEPT entries stay: an index range per webhook, never a scan.
    await st.many(
        "DELETE FROM webhook_log WHERE webhook_uuid = ? AND id < (SELECT min(id) FROM "
        "(SELECT id FROM webhook_log WHERE webhook_uuid = ? ORDER BY id DESC LIMIT ?) AS kept)",
        [(w, w, LOG_KEPT) for w in sorted({row[0] for row in rows})],
    )


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
        "undelivered = undelivered + 1, next_due_at_us = CASE WHEN next_due_at_us IS NULL "
        "OR next_due_at_us > CAST(? AS BIGINT) THEN CAST(? AS BIGINT) ELSE next_due_at_us END"
    )
    if st.is_sqlite:
        which = "space_uuid = ?"
    else:  # the rows in uuid order, as every transaction that takes several does
        which = "uuid IN (SELECT uuid FROM webhooks WHERE space_uuid = ? ORDER BY uuid FOR UPDATE)"
    counted = await st.rows(
        f"UPDATE webhooks SET {lowered} WHERE {which} RETURNING uuid, undelivered",
        (now_us, now_us, space_uuid),
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
            given_up += await _push_out(st, webhook_uuid, undelivered - cap, event_id, now_us, cap)
    return FanOut(len(counted), given_up)


async def _push_out(
    st: Statements, webhook_uuid: str, count: int, newest: str, now_us: int, cap: int
) -> int:
    """Give up the `count` oldest undelivered events of a full webhook (not `newest`);
    how many were. Rows another transaction holds (an attempt's outcome being recorded)
    are skipped: the next oldest go instead."""
    skip = "" if st.is_sqlite else " FOR UPDATE SKIP LOCKED"
    # Chosen once (MATERIALIZED): PostgreSQL may run a subquery in IN again for each row,
    # and a locking one then skips the rows it deleted and yields the next ones.
    gone = await st.rows(
        "WITH doomed AS MATERIALIZED (SELECT event_id FROM deliveries WHERE webhook_uuid = ? "
        f"AND event_id <> ? ORDER BY created_at_us LIMIT ?{skip}) DELETE FROM deliveries "
        "WHERE webhook_uuid = ? AND event_id IN (SELECT event_id FROM doomed) RETURNING event_id",
        (webhook_uuid, newest, count, webhook_uuid),
    )
    if not gone:
        return 0
    await st.many(
        "UPDATE webhooks SET undelivered = undelivered - ? WHERE uuid = ?",
        [(len(gone), webhook_uuid)],
    )
    detail = f"more than {cap:,} events undelivered: the oldest given up"
    if len(gone) > 1:
        detail = f"more than {cap:,} events undelivered: the {len(gone)} oldest given up"
    await log_deliveries(st, [(webhook_uuid, now_us, EVENT, "given_up", detail)])
    await delete_settled_events(st, [row[0] for row in gone])
    return len(gone)


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
    await lock_webhooks(st, [row[0] for row in hooks])
    gone = await st.rows(
        f"DELETE FROM deliveries WHERE event_id IN ({marks(events)}) AND created_at_us <= ? "
        "RETURNING webhook_uuid",
        (*events, created_before_us),
    )
    per_webhook = Counter(row[0] for row in gone)
    if not per_webhook:
        return 0
    await st.many(
        "UPDATE webhooks SET undelivered = undelivered - ? WHERE uuid = ?",
        [(count, webhook_uuid) for webhook_uuid, count in sorted(per_webhook.items())],
    )
    await recompute_due(st, list(per_webhook))
    hours = (now_us - created_before_us) / 3_600_000_000
    age = f"{hours:g} h" if hours >= 1 else f"{hours * 60:g} min"
    await log_deliveries(
        st,
        [
            (webhook_uuid, now_us, EVENT, "given_up", _aged(count, age))
            for webhook_uuid, count in sorted(per_webhook.items())
        ],
    )
    await st.many(
        f"DELETE FROM outbox WHERE id IN ({marks(events)}) AND NOT EXISTS "
        "(SELECT 1 FROM deliveries WHERE deliveries.event_id = outbox.id)",
        [events],
    )
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
