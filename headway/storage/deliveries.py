"""SQL of delivering webhooks' queue (see `storage.outbox`): claims that take turns
across spaces and receivers at a cost that does not grow with the backlog, and each
attempt's outcome (delivered, retried, given up after its last attempt), recorded only
while its claim holds the row.

A claim reads a window of webhooks by due time (`webhooks.next_due_at_us`, indexed) and
claims a few deliveries of each by index; on PostgreSQL it waits for no lock, and an
outcome takes its webhook's row before its delivery's, in the order `storage.outbox`
describes, so neither can deadlock with fan-outs or deletes.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .database import Statements, marks
from .outbox import WEBHOOKS, lock, log_outcomes
from .webhooks import EVENT, OWNED, recompute_due

if TYPE_CHECKING:
    from .database import Database


# --- Claims -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """One delivery attempt a worker has won. `lease_us` is the claim's token (see
    `storage.leases`): the attempt's outcome is recorded only while the row still
    carries it."""

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
            f"SELECT id, type, payload FROM outbox WHERE id IN ({marks(events)})", events
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
        # The turns are chosen once (MATERIALIZED; see `outbox.push_out`).
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


# --- Outcomes -----------------------------------------------------------------------------


def _owned(claim: Claim) -> tuple[str, str, int]:
    return (claim.event_id, claim.webhook_uuid, claim.lease_us)


async def _logged(
    st: Statements, claim: Claim, now_us: int, outcome: str, detail: str | None
) -> tuple[str, str, int]:
    """Take the claim's webhook's row, then note the attempt's outcome in its log, if the
    claim still holds its delivery; the claim's `OWNED` parameters."""
    await lock(st, WEBHOOKS, [claim.webhook_uuid])
    owned = _owned(claim)
    line = (claim.webhook_uuid, now_us, claim.event, outcome, detail)
    await log_outcomes(st, WEBHOOKS, [line], if_held=(OWNED, owned))
    return owned


async def finish_delivery(
    st: Statements, claim: Claim, now_us: int, outcome: str, detail: str | None = None
) -> None:
    """Settle a claimed delivery (`delivered`, or `given_up` after its last attempt):
    remove it, count it out of its webhook, note it in the log, and remove its event once
    nothing is left of it. Nothing happens if the claim had lapsed (another worker owns
    the row now).

    Every statement is conditional on the claim, so SQLite sends them all with the commit.
    """
    owned = await _logged(st, claim, now_us, outcome, detail)
    await st.many(
        "UPDATE webhooks SET undelivered = undelivered - 1 WHERE uuid = ? "
        f"AND EXISTS (SELECT 1 FROM deliveries WHERE {OWNED})",
        [(claim.webhook_uuid, *owned)],
    )
    await st.many(f"DELETE FROM deliveries WHERE {OWNED}", [owned])
    await recompute_due(st, [claim.webhook_uuid])
    await st.many(
        "DELETE FROM outbox WHERE id = ? AND NOT EXISTS "
        "(SELECT 1 FROM deliveries WHERE deliveries.event_id = ?)",
        [(claim.event_id, claim.event_id)],
    )


async def give_back(st: Statements, claims: Sequence[Claim], now_us: int) -> None:
    """Hand back claims whose attempts a stopping worker cut short: each is due again at
    once, the cut attempt not counted, for another worker to take without waiting for
    the lease to lapse. Nothing happens to a claim that had lapsed already."""
    if not claims:
        return
    hooks = sorted({claim.webhook_uuid for claim in claims})
    await lock(st, WEBHOOKS, hooks)
    await st.many(
        f"UPDATE deliveries SET next_attempt_at_us = ?, attempts = attempts - 1 WHERE {OWNED}",
        [(now_us, *_owned(claim)) for claim in claims],
    )
    await recompute_due(st, hooks)


async def retry_delivery(
    st: Statements, claim: Claim, next_attempt_at_us: int, now_us: int, error: str
) -> None:
    """Schedule the next attempt, and note the failed one in the log. Nothing happens if
    the claim had lapsed."""
    owned = await _logged(st, claim, now_us, "failed", error)
    await st.many(
        f"UPDATE deliveries SET next_attempt_at_us = ?, last_error = ? WHERE {OWNED}",
        [(next_attempt_at_us, error[:1000], *owned)],
    )
    await recompute_due(st, [claim.webhook_uuid])
