"""SQL of the outbox: every message Headway sends out (a webhook's delivery of an event,
a channel's message) is a row of an endpoint's queue, kept the same way whatever sends
it. An endpoint's row counts what it holds (no scan of its queue); a message beyond its
cap pushes out the oldest, given up; each outcome (delivered, failed, given up) is one
line of the endpoint's log, of which the last `LOG_KEPT` stay; and worker heartbeats.

What differs is how rows are taken, in the two queues' own modules: a webhook's
deliveries are claimed one by one, taking turns across spaces and receivers
(`storage.deliveries`; queued by `storage.webhooks`); a channel is taken whole, so that
what it has due goes as one message (`storage.channel_queue`). Retries and giving up
follow one policy (`delivery.policy`).

Every cost here is bounded whatever the backlog (Svix's outbox): a push-out, a log line
and a count each touch an index range of one endpoint, never a scan. On PostgreSQL, a
transaction that waits for locks takes the rows of endpoints before the rows of their
messages, and several endpoints in uuid order (`lock`); a claim waits for none (it skips
locked rows): so fan-outs, claims, outcomes and deletes, which all change both, cannot
deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .database import Fetch, Statements, marks

# Outcomes kept in each endpoint's log (`GET /spaces/{s}/webhooks`, `.../channels`).
LOG_KEPT = 20


@dataclass(frozen=True, slots=True)
class Queue:
    """The tables of one kind of endpoint's queue, and the words its log lines use."""

    endpoints: str  # the endpoints' table: each row counts what it holds in `count`
    rows: str  # the messages' table: a row per message, keyed by `key`, of `owner`
    owner: str
    key: str
    count: str
    log: str  # the log's table
    kind: str  # the SQL of a message's event, for the log: a column, or NULL
    several: str  # the event a log line names for several messages, or one of NULL kind
    held: str  # what the cap counts, as a push-out's log line says it


WEBHOOKS = Queue(
    "webhooks",
    "deliveries",
    "webhook_uuid",
    "event_id",
    "undelivered",
    "webhook_log",
    "NULL",
    "task.completed",
    "events undelivered",
)
CHANNELS = Queue(
    "channels",
    "channel_deliveries",
    "channel_uuid",
    "id",
    "queued",
    "channel_log",
    "kind",
    "digest",
    "messages queued",
)


async def lock(st: Statements, queue: Queue, uuids: Sequence[str]) -> None:
    """On PostgreSQL, take these endpoints' rows, in uuid order, before their messages'
    (see the module's docstring); SQLite runs one write transaction at a time."""
    if st.is_sqlite or not uuids:
        return
    ordered = sorted(set(uuids))
    await st.rows(
        f"SELECT uuid FROM {queue.endpoints} WHERE uuid IN ({marks(ordered)}) "
        "ORDER BY uuid FOR UPDATE",
        ordered,
    )


async def count_in(
    st: Statements, queue: Queue, which: str, params: Sequence[object], *, also: str = ""
) -> list[tuple[str, int]]:
    """Count one more message in each endpoint `which` selects (SQL on its table, with
    `params`), setting `also` too; (uuid, count now) of each. On PostgreSQL the rows are
    taken in uuid order, as every transaction that takes several does."""
    if not st.is_sqlite:
        which = (
            f"uuid IN (SELECT uuid FROM {queue.endpoints} WHERE {which} ORDER BY uuid FOR UPDATE)"
        )
    found = await st.rows(
        f"UPDATE {queue.endpoints} SET {queue.count} = {queue.count} + 1{also} WHERE {which} "
        f"RETURNING uuid, {queue.count}",
        tuple(params),
    )
    return [(uuid, int(count)) for uuid, count in found]


async def count_out(st: Statements, queue: Queue, per_endpoint: dict[str, int]) -> None:
    """Count messages that left their endpoints' queues (settled or given up)."""
    counts = [(count, uuid) for uuid, count in sorted(per_endpoint.items()) if count]
    if counts:
        await st.many(
            f"UPDATE {queue.endpoints} SET {queue.count} = {queue.count} - ? WHERE uuid = ?",
            counts,
        )


async def push_out(
    st: Statements, queue: Queue, uuid: str, count: int, newest: str, now_us: int, cap: int
) -> list[str]:
    """Give up the `count` oldest messages of a full endpoint (not `newest`), by the index
    on its messages' creation, with a line in its log; the keys of those given up. Rows
    another transaction holds (an attempt's outcome being recorded) are skipped: the next
    oldest go instead."""
    skip = "" if st.is_sqlite else " FOR UPDATE SKIP LOCKED"
    # Chosen once (MATERIALIZED): PostgreSQL may run a subquery in IN again for each row,
    # and a locking one then skips the rows it deleted and yields the next ones.
    gone = await st.rows(
        f"WITH doomed AS MATERIALIZED (SELECT {queue.key} FROM {queue.rows} WHERE "
        f"{queue.owner} = ? AND {queue.key} <> ? ORDER BY created_at_us LIMIT ?{skip}) "
        f"DELETE FROM {queue.rows} WHERE {queue.owner} = ? AND {queue.key} IN "
        f"(SELECT {queue.key} FROM doomed) RETURNING {queue.key}, {queue.kind}",
        (uuid, newest, count, uuid),
    )
    if not gone:
        return []
    await count_out(st, queue, {uuid: len(gone)})
    oldest = "the oldest" if len(gone) == 1 else f"the {len(gone)} oldest"
    event = gone[0][1] if len(gone) == 1 and gone[0][1] else queue.several
    detail = f"more than {cap:,} {queue.held}: {oldest} given up"
    await log_outcomes(st, queue, [(uuid, now_us, event, "given_up", detail)])
    return [row[0] for row in gone]


# A log line: (endpoint, at, event, outcome, detail).
Line = tuple[str, int, str, str, str | None]
Logs = dict[str, list[tuple[int, str, str, str | None]]]


async def log_outcomes(
    st: Statements,
    queue: Queue,
    lines: Sequence[Line],
    *,
    if_held: tuple[str, Sequence[object]] | None = None,
) -> None:
    """Keep outcomes in their endpoints' logs, the last `LOG_KEPT` of each; not those of
    an endpoint deleted meanwhile (with its space: its messages stay a while, and an
    attempt under way may end after it). `if_held`: (SQL on the messages' table, its
    parameters), only while such a row exists (the claim that made the attempt)."""
    rows = [(uuid, at, ev, out, None if d is None else d[:500]) for uuid, at, ev, out, d in lines]
    if not rows:
        return
    insert = (
        f"INSERT INTO {queue.log} ({queue.owner}, at_us, event, outcome, detail) "
        "SELECT CAST(? AS VARCHAR(36)), CAST(? AS BIGINT), CAST(? AS VARCHAR(64)), "
        f"CAST(? AS VARCHAR(16)), CAST(? AS TEXT) WHERE EXISTS (SELECT 1 FROM "
        f"{queue.endpoints} WHERE uuid = ?)"
    )
    if if_held is None:
        await st.many(insert, [(*row, row[0]) for row in rows])
    else:
        held, params = if_held
        await st.many(
            f"{insert} AND EXISTS (SELECT 1 FROM {queue.rows} WHERE {held})",
            [(*row, row[0], *params) for row in rows],
        )
    # The log's newest LOG_KEPT entries stay: an index range per endpoint, never a scan.
    await st.many(
        f"DELETE FROM {queue.log} WHERE {queue.owner} = ? AND id < (SELECT min(id) FROM "
        f"(SELECT id FROM {queue.log} WHERE {queue.owner} = ? ORDER BY id DESC LIMIT ?) "
        "AS kept)",
        [(uuid, uuid, LOG_KEPT) for uuid in sorted({row[0] for row in rows})],
    )


async def logs(fetch: Fetch, queue: Queue, uuids: Sequence[str]) -> Logs:
    """The last `LOG_KEPT` outcomes of each of these endpoints, newest first: (at, event,
    outcome, detail)."""
    found: Logs = {uuid: [] for uuid in uuids}
    if not uuids:
        return found
    lines = await fetch(
        f"SELECT {queue.owner}, at_us, event, outcome, detail FROM {queue.log} "
        f"WHERE {queue.owner} IN ({marks(uuids)}) ORDER BY id DESC",
        tuple(uuids),
    )
    for uuid, at_us, event, outcome, detail in lines:
        kept = found[uuid]
        if len(kept) < LOG_KEPT:
            kept.append((int(at_us), event, outcome, detail))
    return found


# --- Worker heartbeats ---------------------------------------------------------------------


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
