"""SQL of a notification channel's queue (one row per message to make) and of its sends.

A channel's row is also its sending lease (see `storage.leases`): `hold_until_us` is when
it may send next. A worker takes a channel by moving that forward with a conditional
update (exactly one worker wins), sends one message for everything the channel has due
(a digest when there are several), then sets it to the end of the digest window, or to
when the hour's cap reopens. So a burst of finishes becomes one message, and one broken
channel holds only its own queue.

The queue is the outbox's (`storage.outbox`): a channel holds at most a cap of queued
messages (`channels.queued` counts them), a new one beyond pushes out the oldest, given
up; each outcome is a line of the channel's log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .database import Fetch, Statements, marks
from .outbox import CHANNELS, count_in, count_out, log_outcomes, push_out

# The most deliveries one message carries (a digest lists at most a few of them).
BATCH = 200


# --- Queuing -----------------------------------------------------------------------------


async def fan_out(
    st: Statements,
    event_id: str,
    space_uuid: str,
    task_uuid: str,
    payload: str,
    *,
    failed: bool,
    step: bool,
    now_us: int,
    cap: int,
) -> int:
    """Queue a finish for every channel of the space that wants it: `completed` hears
    every finish, `failed` only the failed ones; a step (a child task) only where the
    channel asked for steps. A channel that then holds more than `cap` gives up its
    oldest messages. How many messages were given up."""
    wants = "(on_completed OR on_failed)" if failed else "on_completed"
    which = f"space_uuid = ? AND {wants}" + (" AND steps" if step else "")
    counted = await count_in(st, CHANNELS, which, (space_uuid,))
    if not counted:
        return 0
    kind = "failed" if failed else "completed"
    await st.many(
        "INSERT INTO channel_deliveries (id, channel_uuid, task_uuid, kind, payload, "
        "created_at_us, next_attempt_at_us) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (f"{event_id}:{uuid}", uuid, task_uuid, kind, payload, now_us, now_us)
            for uuid, _ in counted
        ],
    )
    given_up = 0
    for uuid, queued in sorted(counted):
        if queued > cap:
            given_up += len(
                await push_out(st, CHANNELS, uuid, queued - cap, f"{event_id}:{uuid}", now_us, cap)
            )
    return given_up


async def queue(
    st: Statements,
    delivery_id: str,
    channel_uuid: str,
    task_uuid: str,
    kind: str,
    payload: str,
    now_us: int,
    *,
    cap: int,
) -> int:
    """Queue one message about a task for one channel (a stall, a recovery); beyond `cap`,
    the channel's oldest are given up (how many)."""
    counted = await count_in(st, CHANNELS, "uuid = ?", (channel_uuid,))
    if not counted:
        return 0  # the channel is gone
    await st.many(
        "INSERT INTO channel_deliveries (id, channel_uuid, task_uuid, kind, payload, "
        "created_at_us, next_attempt_at_us) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(delivery_id, channel_uuid, task_uuid, kind, payload, now_us, now_us)],
    )
    if counted[0][1] <= cap:
        return 0
    return len(
        await push_out(st, CHANNELS, channel_uuid, counted[0][1] - cap, delivery_id, now_us, cap)
    )


async def log(
    st: Statements, channel_uuid: str, at_us: int, event: str, outcome: str, detail: str | None
) -> None:
    """Keep one outcome in the channel's log (see `outbox.log_outcomes`)."""
    await log_outcomes(st, CHANNELS, [(channel_uuid, at_us, event, outcome, detail)])


# --- Sending -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Due:
    """A channel with something due: which space it is of, and where it sends."""

    channel_uuid: str
    space_uuid: str
    url: str


async def due_channels(fetch: Fetch, now_us: int, limit: int) -> list[Due]:
    """Channels with something due that may send now, longest waiting first."""
    found = await fetch(
        "SELECT c.uuid, c.space_uuid, c.url FROM channel_deliveries d JOIN channels c "
        "ON c.uuid = d.channel_uuid WHERE d.next_attempt_at_us <= ? AND c.hold_until_us <= ? "
        "GROUP BY c.uuid, c.space_uuid, c.url ORDER BY min(d.next_attempt_at_us) LIMIT ?",
        (now_us, now_us, limit),
    )
    return [Due(row[0], row[1], row[2]) for row in found]


async def defer(st: Statements, channel_uuids: Sequence[str], now_us: int, until_us: int) -> None:
    """Hold back channels that may not send now (their host or space has enough sends in
    flight) until `until_us`, so that the next look finds the others due; a channel some
    worker holds is left as it is. Nothing counts as an attempt."""
    await st.many(
        "UPDATE channels SET hold_until_us = ? WHERE uuid = ? AND hold_until_us <= ?",
        [(until_us, uuid, now_us) for uuid in sorted(channel_uuids)],  # rows in uuid order
    )


async def next_due_at(fetch: Fetch) -> int | None:
    """When the next channel may send something (None: nothing queued)."""
    found = await fetch(
        "SELECT min(CASE WHEN c.hold_until_us > d.next_attempt_at_us THEN c.hold_until_us "
        "ELSE d.next_attempt_at_us END) FROM channel_deliveries d JOIN channels c "
        "ON c.uuid = d.channel_uuid",
        (),
    )
    return None if not found or found[0][0] is None else int(found[0][0])


@dataclass(frozen=True, slots=True)
class Pending:
    id: str
    kind: str
    payload: str
    created_at_us: int
    attempts: int


@dataclass(frozen=True, slots=True)
class Taken:
    """A channel a worker has won, until `lease_us` (its token), and what it has due."""

    channel_uuid: str
    space_uuid: str
    url: str
    share_uuid: str | None
    space_title: str | None
    lease_us: int
    pending: list[Pending]


async def take(
    st: Statements, channel_uuid: str, now_us: int, lease_us: int, *, cap: int, hour_us: int
) -> Taken | None:
    """Win the channel for one send and read what it has due; None when another worker
    won it, nothing is due, or the hour's cap is reached (the channel is then held
    until it reopens, when everything waiting goes as one digest)."""
    won = await st.rows(
        "UPDATE channels SET hold_until_us = ?, window_start_us = CASE WHEN "
        "window_start_us + ? <= ? THEN ? ELSE window_start_us END, window_sent = CASE WHEN "
        "window_start_us + ? <= ? THEN 0 ELSE window_sent END WHERE uuid = ? AND "
        "hold_until_us <= ? RETURNING space_uuid, url, share_uuid, window_start_us, window_sent",
        (lease_us, hour_us, now_us, now_us, hour_us, now_us, channel_uuid, now_us),
    )
    if not won:
        return None
    space_uuid, url, share_uuid, window_start_us, window_sent = won[0]
    if window_sent >= cap:
        await st.many(
            "UPDATE channels SET hold_until_us = ? WHERE uuid = ?",
            [(int(window_start_us) + hour_us, channel_uuid)],
        )
        return None
    found = await st.rows(
        "SELECT id, kind, payload, created_at_us, attempts FROM channel_deliveries "
        "WHERE channel_uuid = ? AND next_attempt_at_us <= ? "
        "ORDER BY created_at_us, id LIMIT ?",
        (channel_uuid, now_us, BATCH),
    )
    title = await st.rows("SELECT title FROM spaces WHERE uuid = ?", (space_uuid,))
    pending = [Pending(row[0], row[1], row[2], int(row[3]), int(row[4])) for row in found]
    if not pending:
        await st.many(
            "UPDATE channels SET hold_until_us = ? WHERE uuid = ?", [(now_us, channel_uuid)]
        )
        return None
    return Taken(
        channel_uuid,
        space_uuid,
        url,
        share_uuid,
        title[0][0] if title else None,
        lease_us,
        pending,
    )


async def held(fetch: Fetch, taken: Taken) -> bool:
    """Whether the channel is still there and held by `taken`'s lease (a send about to
    start asks: a deleted channel, or one another worker took once the lease lapsed, is
    not sent to)."""
    found = await fetch(
        "SELECT 1 FROM channels WHERE uuid = ? AND hold_until_us = ?",
        (taken.channel_uuid, taken.lease_us),
    )
    return bool(found)


async def sent(
    st: Statements, taken: Taken, ids: Sequence[str], hold_until_us: int, *, counted: bool
) -> bool:
    """Settle a send: remove `ids` (delivered or given up), count one message in the
    hour's window (`counted`), hold the channel until `hold_until_us`. False: the lease
    had lapsed, and another worker owns the channel now (nothing changed)."""
    held = await st.rows(
        "UPDATE channels SET hold_until_us = ?, window_sent = window_sent + ? "
        "WHERE uuid = ? AND hold_until_us = ? RETURNING uuid",
        (hold_until_us, 1 if counted else 0, taken.channel_uuid, taken.lease_us),
    )
    if not held:
        return False
    await remove(st, taken.channel_uuid, ids)
    return True


async def give_back(st: Statements, taken: Sequence[Taken], now_us: int) -> None:
    """Hand back channels whose sends a stopping worker cut short: each may send again at
    once, for another worker to take without waiting for the lease to lapse. A lease that
    had lapsed already is left as it is."""
    await st.many(
        "UPDATE channels SET hold_until_us = ? WHERE uuid = ? AND hold_until_us = ?",
        [(now_us, one.channel_uuid, one.lease_us) for one in taken],
    )


async def remove(st: Statements, channel_uuid: str, ids: Sequence[str]) -> None:
    """Remove these messages of the channel (delivered or given up) from its queue. Call
    while holding the channel (`take`)."""
    if not ids:
        return
    gone = await st.rows(
        f"DELETE FROM channel_deliveries WHERE id IN ({marks(ids)}) RETURNING id", tuple(ids)
    )
    await count_out(st, CHANNELS, {channel_uuid: len(gone)})


async def retry(st: Statements, taken: Taken, ids: Sequence[str], due_us: int, error: str) -> bool:
    """Schedule the next attempt of `ids` at `due_us` (the channel waits for it).
    False: the lease had lapsed."""
    held = await st.rows(
        "UPDATE channels SET hold_until_us = ? WHERE uuid = ? AND hold_until_us = ? RETURNING uuid",
        (due_us, taken.channel_uuid, taken.lease_us),
    )
    if not held:
        return False
    await st.many(
        "UPDATE channel_deliveries SET attempts = attempts + 1, next_attempt_at_us = ?, "
        "last_error = ? WHERE id = ?",
        [(due_us, error[:1000], id_) for id_ in ids],
    )
    return True
