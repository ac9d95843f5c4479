"""SQL of webhooks and of delivering the outbox: registrations, fan-out within each
webhook's cap, bounded claims, retries, giving up (after the last attempt, by age, by
the cap), each webhook's last deliveries, and worker heartbeats. Reads take a `Fetch`,
writes `Statements` (see `storage.database`).

Every cost here is bounded whatever the backlog (Svix's outbox): a claim reads a window
of webhooks by due time (`webhooks.next_due_at_us`, indexed) and claims a few deliveries
of each by index; an event is given up by age through the index on its creation, and
beyond a webhook's cap through its count (`webhooks.undelivered`) and the index on each
webhook's deliveries by creation. Nothing scans the backlog.

On PostgreSQL, a transaction that waits for locks takes the rows of webhooks before the
rows of their deliveries, and several webhooks in uuid order; a claim waits for none (it
skips locked rows): so fan-outs, claims, outcomes and deletes, which all change both,
cannot deadlock.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .database import Fetch, Statements
from .queries import space_holds_fewer

if TYPE_CHECKING:
    from .database import Database

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
        f"SELECT uuid FROM webhooks WHERE uuid IN ({_marks(ordered)}) ORDER BY uuid FOR UPDATE",
        ordered,
    )


# --- Each webhook's last deliveries -------------------------------------------------------


async def webhook_logs(
    fetch: Fetch, webhook_uuids: Sequence[str]
) -> dict[str, list[tuple[int, str, str, str | None]]]:
    """Each webhook's last deliveries, newest first: (at, event, outcome, detail)."""
    logs: dict[str, list[tuple[int, str, str, str | None]]] = {u: [] for u in webhook_uuids}
    if not webhook_uuids:
        return logs
    found = await fetch(
        "SELECT webhook_uuid, at_us, event, outcome, detail FROM webhook_log "
        f"WHERE webhook_uuid IN ({_marks(webhook_uuids)}) ORDER BY id DESC",
        tuple(webhook_uuids),
    )
    for webhook_uuid, at_us, event, outcome, detail in found:
        kept = logs[webhook_uuid]
        if len(kept) < LOG_KEPT:
            kept.append((int(at_us), event, outcome, detail))
    return logs


async def _log(
    st: Statements,
    entries: Sequence[tuple[str, int, str, str, str | None]],
    *,
    if_owned: tuple[str, str, int] | None = None,
) -> None:
    """Keep deliveries in their webhooks' logs: (webhook, at, event, outcome, detail),
    the last `LOG_KEPT` of each. `if_owned`: only while that claimed row still exists."""
    rows = [(w, at, ev, out, None if d is None else d[:500]) for w, at, ev, out, d in entries]
    if not rows:
        return
    if if_owned is None:
        await st.many(
            "INSERT INTO webhook_log (webhook_uuid, at_us, event, outcome, detail) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
    else:
        await st.many(
            "INSERT INTO webhook_log (webhook_uuid, at_us, event, outcome, detail) "
            "SELECT CAST(? AS VARCHAR(36)), CAST(? AS BIGINT), CAST(? AS VARCHAR(64)), "
            "CAST(? AS VARCHAR(16)), CAST(? AS TEXT) "
            f"WHERE EXISTS (SELECT 1 FROM deliveries WHERE {_OWNED})",
            [(*row, *if_owned) for row in rows],
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
    await _log(st, [(webhook_uuid, now_us, EVENT, "given_up", detail)])
    await delete_settled_events(st, [row[0] for row in gone])
    return len(gone)


# --- Claims -------------------------------------------------------------------------------


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
    event: str = EVENT


@dataclass(frozen=True, slots=True)
class DueWebhook:
    """A webhook with something due (as far as `next_due_at_us` tells), and its count of
    undelivered events when it was read."""

    uuid: str
    space_uuid: str
    receiver: str
    url: str
    secret: str
    undelivered: int = 0


@dataclass(frozen=True, slots=True)
class Turns:
    """How a claim shares its room: deliveries to claim per webhook, and the webhooks
    passed over because their space or receiver has all the attempts it may have."""

    quotas: dict[str, int]
    held: list[str] = field(default_factory=list)


def take_turns(
    due: Sequence[DueWebhook],
    room: int,
    *,
    per_space: int,
    per_receiver: int,
    space_load: Mapping[str, int],
    receiver_load: Mapping[str, int],
) -> Turns:
    """Share `room` attempts among `due` (earliest due first): each space's first turn
    before any space's second, and within a space each receiver's before any receiver's
    second; no space above `per_space` attempts in flight, no receiver above
    `per_receiver` (counting `space_load` and `receiver_load`, those already in flight).
    A webhook's turn is one delivery; it may have several turns in one claim."""
    spaces: dict[str, deque[DueWebhook]] = {}
    for hook in due:
        spaces.setdefault(hook.space_uuid, deque())
    for space_uuid in spaces:
        # Within a space, receivers alternate: r1, r2, r1, r2... (each earliest due first).
        by_receiver: dict[str, list[DueWebhook]] = {}
        for hook in due:
            if hook.space_uuid == space_uuid:
                by_receiver.setdefault(hook.receiver, []).append(hook)
        groups = list(by_receiver.values())
        for rank in range(max(len(group) for group in groups)):
            spaces[space_uuid].extend(group[rank] for group in groups if rank < len(group))
    in_space, at_receiver = Counter(space_load), Counter(receiver_load)
    quotas: Counter[str] = Counter()
    held: dict[str, None] = {}
    left = room
    while left > 0:
        turned = False
        for space_uuid, hooks in spaces.items():
            if left == 0:
                break
            if in_space[space_uuid] >= per_space:
                held.update((hook.uuid, None) for hook in hooks if not quotas[hook.uuid])
                continue
            for _ in range(len(hooks)):
                hook = hooks[0]
                hooks.rotate(-1)
                if at_receiver[hook.receiver] >= per_receiver:
                    if not quotas[hook.uuid]:
                        held[hook.uuid] = None
                    continue
                quotas[hook.uuid] += 1
                in_space[space_uuid] += 1
                at_receiver[hook.receiver] += 1
                left -= 1
                turned = True
                break
        if not turned:
            break
    return Turns(dict(quotas), [uuid for uuid in held if not quotas[uuid]])


@dataclass(frozen=True, slots=True)
class Round:
    """One claim's outcome: what was won, and whether more may be due now (a full window,
    or turns that found nothing due): the caller may claim again at once."""

    claims: list[Claim]
    again: bool


async def claim_due(
    db: Database,
    now_us: int,
    lease_until_us: int,
    limit: int,
    *,
    per_space: int,
    per_receiver: int,
    space_load: Mapping[str, int] | None = None,
    receiver_load: Mapping[str, int] | None = None,
    window: int | None = None,
) -> Round:
    """Claim up to `limit` due deliveries for one worker, taking turns across spaces and
    receivers (see `take_turns`), at a cost that does not grow with the backlog.

    It reads at most `window` webhooks (default 4 x `limit`, at least 64) in the order of
    `next_due_at_us` (an index range, outside any transaction), shares the turns among
    them, and claims each one's earliest due deliveries (an index range per webhook) in
    one conditional update on their due time: of several workers racing for a row exactly
    one wins it, and on PostgreSQL a worker skips the rows another is claiming (FOR
    UPDATE SKIP LOCKED) and takes the next. On SQLite the write lock is held for that one
    statement and the commit: about a millisecond, whatever the backlog.

    A claimed row is due again when the lease lapses: a worker that dies mid-delivery
    leaves its attempt to be retried, with the same event id.

    A webhook that had turns goes behind those that waited (its `next_due_at_us` becomes
    now, or when its next delivery is due); those passed over for a full space or
    receiver keep their place, unless the window was full, when they go behind too, so
    that the next claim reaches past them.
    """
    window = window or max(4 * limit, 64)
    found = await db.fetch(_WINDOW, (now_us, window))
    due = [DueWebhook(*row[:5], undelivered=int(row[5])) for row in found]
    turns = take_turns(
        due,
        limit,
        per_space=per_space,
        per_receiver=per_receiver,
        space_load=space_load or {},
        receiver_load=receiver_load or {},
    )
    full = len(found) == window
    if not turns.quotas and not (full and turns.held):
        return Round([], False)
    hooks = {hook.uuid: hook for hook in due}
    async with db.write() as st:
        won = await _claim(st, turns, hooks, now_us, lease_until_us, full)
    again = full or len(won) < sum(turns.quotas.values())
    if not won:
        return Round([], again and bool(turns.quotas))
    events = sorted({row[0] for row in won})
    stored = {
        row[0]: (row[1], row[2])
        for row in await db.fetch(
            f"SELECT id, type, payload FROM outbox WHERE id IN ({_marks(events)})", events
        )
    }
    claims = []
    for event_id, webhook_uuid, attempt in won:
        if event_id not in stored:
            continue  # deleted with its task since: the delivery went with it
        hook = hooks[webhook_uuid]
        event, payload = stored[event_id]
        claims.append(
            Claim(
                event_id=event_id,
                webhook_uuid=webhook_uuid,
                attempt=attempt,
                lease_us=lease_until_us,
                url=hook.url,
                secret=hook.secret,
                payload=payload,
                space_uuid=hook.space_uuid,
                receiver=hook.receiver,
                event=event,
            )
        )
    return Round(claims, again)


# The due webhooks, earliest first: a range of the index on `next_due_at_us`.
_WINDOW = (
    "SELECT uuid, space_uuid, receiver, url, secret, undelivered FROM webhooks "
    "WHERE next_due_at_us <= ? ORDER BY next_due_at_us LIMIT ?"
)


async def _claim(
    st: Statements,
    turns: Turns,
    hooks: Mapping[str, DueWebhook],
    now_us: int,
    lease_until_us: int,
    window_full: bool,
) -> list[tuple[str, str, int]]:
    """Claim each webhook's quota of earliest due deliveries in one statement, then move
    the webhooks' turns; (event, webhook, attempt) won.

    Moving a turn is skipped where a fan-out counted an event in the webhook since the
    window was read (its count changed): the fan-out made it due, which must stand. On
    PostgreSQL a claim waits for no lock: it skips rows other transactions hold, so it
    cannot deadlock with them (see the module's docstring)."""
    skip = "" if st.is_sqlite else " FOR UPDATE SKIP LOCKED"
    won: list[tuple[str, str, int]] = []
    if turns.quotas:
        ranges = " UNION ALL ".join(
            "SELECT event_id, webhook_uuid FROM (SELECT event_id, webhook_uuid FROM deliveries "
            "WHERE webhook_uuid = ? AND next_attempt_at_us <= ? ORDER BY next_attempt_at_us "
            f"LIMIT ?{skip}) AS turn{n}"
            for n in range(len(turns.quotas))
        )
        params: list[object] = []
        for webhook_uuid, quota in turns.quotas.items():
            params.extend((webhook_uuid, now_us, quota))
        # The turns are chosen once (MATERIALIZED; see `_push_out`).
        found = await st.rows(
            f"WITH turns AS MATERIALIZED ({ranges}) UPDATE deliveries SET next_attempt_at_us = ?, "
            "attempts = attempts + 1 WHERE next_attempt_at_us <= ? AND (event_id, webhook_uuid) "
            "IN (SELECT event_id, webhook_uuid FROM turns) "
            "RETURNING event_id, webhook_uuid, attempts",
            (*params, lease_until_us, now_us),
        )
        won = [(row[0], row[1], int(row[2])) for row in found]
    # Behind those that waited: now while it has more due, else its next due time.
    unchanged = "uuid = ? AND undelivered = ?"
    if not st.is_sqlite:
        unchanged += (
            " AND uuid IN (SELECT uuid FROM webhooks WHERE uuid = ? FOR UPDATE SKIP LOCKED)"
        )
    await st.many(
        "UPDATE webhooks SET next_due_at_us = (SELECT CASE WHEN min(d.next_attempt_at_us) "
        "<= CAST(? AS BIGINT) THEN CAST(? AS BIGINT) ELSE min(d.next_attempt_at_us) END "
        f"FROM deliveries d WHERE d.webhook_uuid = webhooks.uuid) WHERE {unchanged}",
        [(now_us, now_us, *_unchanged(hooks[uuid], st)) for uuid in sorted(turns.quotas)],
    )
    if window_full:
        await st.many(
            f"UPDATE webhooks SET next_due_at_us = ? WHERE next_due_at_us < ? AND {unchanged}",
            [(now_us, now_us, *_unchanged(hooks[uuid], st)) for uuid in sorted(turns.held)],
        )
    return won


def _unchanged(hook: DueWebhook, st: Statements) -> tuple[object, ...]:
    found: tuple[object, ...] = (hook.uuid, hook.undelivered)
    return found if st.is_sqlite else (*found, hook.uuid)


def _marks(values: Sequence[object]) -> str:
    """One `?` for each value, for an IN list."""
    return ", ".join("?" * len(values))


# --- Outcomes -----------------------------------------------------------------------------

# A delivery row while its claim holds it: (event id, webhook uuid, lease).
_OWNED = "event_id = ? AND webhook_uuid = ? AND next_attempt_at_us = ?"


def _owned(claim: Claim) -> tuple[str, str, int]:
    return (claim.event_id, claim.webhook_uuid, claim.lease_us)


async def finish_delivery(
    st: Statements, claim: Claim, now_us: int, outcome: str, detail: str | None = None
) -> None:
    """Settle a claimed delivery (`delivered`, or `given_up` after its last attempt):
    remove it, count it out of its webhook, note it in the log, and remove its event once
    nothing is left of it. Nothing happens if the claim had lapsed (another worker owns
    the row now).

    Every statement is conditional on the claim, so SQLite sends them all with the commit.
    """
    await lock_webhooks(st, [claim.webhook_uuid])
    owned = _owned(claim)
    await _log(st, [(claim.webhook_uuid, now_us, claim.event, outcome, detail)], if_owned=owned)
    await st.many(
        "UPDATE webhooks SET undelivered = undelivered - 1 WHERE uuid = ? "
        f"AND EXISTS (SELECT 1 FROM deliveries WHERE {_OWNED})",
        [(claim.webhook_uuid, *owned)],
    )
    await st.many(f"DELETE FROM deliveries WHERE {_OWNED}", [owned])
    await _recompute_due(st, [claim.webhook_uuid])
    await st.many(
        "DELETE FROM outbox WHERE id = ? AND NOT EXISTS "
        "(SELECT 1 FROM deliveries WHERE deliveries.event_id = ?)",
        [(claim.event_id, claim.event_id)],
    )


async def retry_delivery(
    st: Statements, claim: Claim, next_attempt_at_us: int, now_us: int, error: str
) -> None:
    """Schedule the next attempt, and note the failed one in the log. Nothing happens if
    the claim had lapsed."""
    await lock_webhooks(st, [claim.webhook_uuid])
    owned = _owned(claim)
    await _log(st, [(claim.webhook_uuid, now_us, claim.event, "failed", error)], if_owned=owned)
    await st.many(
        f"UPDATE deliveries SET next_attempt_at_us = ?, last_error = ? WHERE {_OWNED}",
        [(next_attempt_at_us, error[:1000], *owned)],
    )
    await _recompute_due(st, [claim.webhook_uuid])


async def _recompute_due(st: Statements, webhook_uuids: Sequence[str]) -> None:
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
        f"SELECT DISTINCT webhook_uuid FROM deliveries WHERE event_id IN ({_marks(events)})",
        events,
    )
    await lock_webhooks(st, [row[0] for row in hooks])
    gone = await st.rows(
        f"DELETE FROM deliveries WHERE event_id IN ({_marks(events)}) AND created_at_us <= ? "
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
    await _recompute_due(st, list(per_webhook))
    hours = (now_us - created_before_us) / 3_600_000_000
    age = f"{hours:g} h" if hours >= 1 else f"{hours * 60:g} min"
    await _log(
        st,
        [
            (webhook_uuid, now_us, EVENT, "given_up", _aged(count, age))
            for webhook_uuid, count in sorted(per_webhook.items())
        ],
    )
    await st.many(
        f"DELETE FROM outbox WHERE id IN ({_marks(events)}) AND NOT EXISTS "
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
            f"DELETE FROM outbox WHERE id IN ({_marks(chunk)}) AND NOT EXISTS "
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
