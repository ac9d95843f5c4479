"""SQL of notification channels: registrations, their last deliveries and stall
episodes. What each channel still has to send (its own queue) and how it is sent are in
`storage.channel_queue`; the lease that lets one instance at a time look for stalls, in
`storage.leases`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .database import Fetch, Statements, marks
from .queries import delete_held, insert_held, list_held

EVENTS = ("completed", "failed", "stalled", "late")

_COLUMNS = (
    "uuid, redacted, on_completed, on_failed, on_stalled, on_late, steps, stalled_after_s, "
    "share_uuid, created_at_us, live"
)


@dataclass(frozen=True, slots=True)
class ChannelRow:
    """A channel as answers show it (its URL only redacted)."""

    uuid: str
    redacted: str
    events: tuple[str, ...]
    steps: bool
    stalled_after_s: int
    share_uuid: str | None
    created_at_us: int
    live: bool = False  # keeps one message per task up to date (`notify.live`)


def _channel(row: Sequence[Any]) -> ChannelRow:
    wanted = (bool(row[2]), bool(row[3]), bool(row[4]), bool(row[5]))
    events = tuple(event for event, on in zip(EVENTS, wanted, strict=True) if on)
    return ChannelRow(
        row[0], row[1], events, bool(row[6]), int(row[7]), row[8], int(row[9]), bool(row[10])
    )


async def insert_channel(
    st: Statements,
    space_uuid: str,
    channel: ChannelRow,
    url: str,
    *,
    cap: int,
) -> bool:
    """Register a channel unless the space has `cap` already (see `queries.insert_held`)."""
    return await insert_held(
        st,
        "channels",
        space_uuid,
        cap,
        "uuid, space_uuid, url, redacted, on_completed, on_failed, on_stalled, on_late, steps, "
        "stalled_after_s, share_uuid, created_at_us, live",
        (
            channel.uuid,
            space_uuid,
            url,
            channel.redacted,
            *(event in channel.events for event in EVENTS),
            channel.steps,
            channel.stalled_after_s,
            channel.share_uuid,
            channel.created_at_us,
            channel.live,
        ),
    )


async def list_channels(fetch: Fetch, space_uuid: str) -> list[ChannelRow]:
    """The space's channels, oldest first."""
    return [_channel(row) for row in await list_held(fetch, "channels", _COLUMNS, space_uuid)]


async def delete_channel(st: Statements, space_uuid: str, channel_uuid: str) -> bool:
    """Delete a channel, what it still had to send, its log and its stall episodes.
    False: no such channel in this space."""
    if not await delete_held(st, "channels", space_uuid, channel_uuid):
        return False
    for table in ("channel_deliveries", "channel_log", "stalls", "late_runs", "live_messages"):
        await st.many(f"DELETE FROM {table} WHERE channel_uuid = ?", [(channel_uuid,)])
    return True


@dataclass(frozen=True, slots=True)
class Target:
    """What sending to a channel needs: its URL, the share link its messages may show,
    and its space's title."""

    url: str
    share_uuid: str | None
    space_title: str | None


async def target(fetch: Fetch, space_uuid: str, channel_uuid: str) -> Target | None:
    found = await fetch(
        "SELECT c.url, c.share_uuid, s.title FROM channels c JOIN spaces s ON s.uuid = "
        "c.space_uuid WHERE c.uuid = ? AND c.space_uuid = ?",
        (channel_uuid, space_uuid),
    )
    return Target(*found[0]) if found else None


async def backlog(fetch: Fetch) -> tuple[int, int]:
    """How many channel events are still to send (due, being sent or waiting to retry),
    from the channels' counts (no scan of the queue), and how many stall episodes are
    open (told `stalled`, not yet `recovered`)."""
    found = await fetch(
        "SELECT (SELECT coalesce(sum(queued), 0) FROM channels), (SELECT count(*) FROM stalls)",
        (),
    )
    return int(found[0][0]), int(found[0][1])


# --- Stalls ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Watcher:
    """A channel that wants to hear of stalls."""

    uuid: str
    space_uuid: str
    stalled_after_s: int
    steps: bool


async def stalls_watched(fetch: Fetch) -> bool:
    """Whether any channel wants to hear of stalls, or of late runs (one look finds both)."""
    return bool(await fetch("SELECT 1 FROM channels WHERE on_stalled OR on_late LIMIT 1", ()))


async def stall_watchers(fetch: Fetch) -> list[Watcher]:
    found = await fetch(
        "SELECT uuid, space_uuid, stalled_after_s, steps FROM channels WHERE on_stalled "
        "ORDER BY space_uuid",
        (),
    )
    return [Watcher(row[0], row[1], int(row[2]), bool(row[3])) for row in found]


async def active_tasks(fetch: Fetch, space_uuid: str, limit: int) -> list[tuple[Any, ...]]:
    """The space's unfinished tasks: (uuid, parent_uuid, created_at_us), at most `limit`
    of them, oldest first."""
    return list(
        await fetch(
            "SELECT uuid, parent_uuid, created_at_us FROM tasks WHERE space_uuid = ? "
            "AND finished_at_us IS NULL ORDER BY created_at_us LIMIT ?",
            (space_uuid, limit),
        )
    )


async def children_last_finished(fetch: Fetch, space_uuid: str) -> dict[str, int]:
    """For each unfinished parent of the space, when its last finished child finished."""
    found = await fetch(
        "SELECT c.parent_uuid, max(c.finished_at_us) FROM tasks c JOIN tasks p ON p.uuid = "
        "c.parent_uuid WHERE p.space_uuid = ? AND p.finished_at_us IS NULL AND "
        "c.finished_at_us IS NOT NULL GROUP BY c.parent_uuid",
        (space_uuid,),
    )
    return {row[0]: int(row[1]) for row in found}


async def episodes(fetch: Fetch, channel_uuids: Sequence[str]) -> list[tuple[Any, ...]]:
    """Open stall episodes of these channels: (channel, task, reason, current, since)."""
    if not channel_uuids:
        return []
    return list(
        await fetch(
            "SELECT channel_uuid, task_uuid, reason, current, since_us FROM stalls "
            f"WHERE channel_uuid IN ({marks(channel_uuids)})",
            tuple(channel_uuids),
        )
    )


async def open_episode(
    st: Statements, channel_uuid: str, task_uuid: str, reason: str, current: str, since_us: int
) -> bool:
    """Record a stall episode unless one is open (False: another instance has it)."""
    opened = await st.rows(
        "INSERT INTO stalls (channel_uuid, task_uuid, reason, current, since_us) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING task_uuid",
        (channel_uuid, task_uuid, reason, current, since_us),
    )
    return bool(opened)


# --- Late runs ---------------------------------------------------------------------------


async def late_watchers(fetch: Fetch) -> list[tuple[str, str, bool]]:
    """The channels that want to hear of late runs: (uuid, space, steps too)."""
    found = await fetch(
        "SELECT uuid, space_uuid, steps FROM channels WHERE on_late ORDER BY space_uuid", ()
    )
    return [(row[0], row[1], bool(row[2])) for row in found]


async def late_told(fetch: Fetch, channel_uuids: Sequence[str]) -> set[tuple[str, str]]:
    """The (channel, task) pairs told late already."""
    if not channel_uuids:
        return set()
    found = await fetch(
        "SELECT channel_uuid, task_uuid FROM late_runs WHERE channel_uuid IN "
        f"({marks(channel_uuids)})",
        tuple(channel_uuids),
    )
    return {(row[0], row[1]) for row in found}


async def tell_late(st: Statements, channel_uuid: str, task_uuid: str, at_us: int) -> bool:
    """Note a run told late to a channel unless it was (False: another instance did)."""
    noted = await st.rows(
        "INSERT INTO late_runs (channel_uuid, task_uuid, at_us) VALUES (?, ?, ?) "
        "ON CONFLICT DO NOTHING RETURNING task_uuid",
        (channel_uuid, task_uuid, at_us),
    )
    return bool(noted)


async def forget_late(st: Statements, pairs: Sequence[tuple[str, str]]) -> None:
    """Runs no longer running (finished, or gone): their notes go."""
    await st.many("DELETE FROM late_runs WHERE channel_uuid = ? AND task_uuid = ?", pairs)


async def close_episode(st: Statements, channel_uuid: str, task_uuid: str) -> bool:
    """End a stall episode (False: already ended)."""
    closed = await st.rows(
        "DELETE FROM stalls WHERE channel_uuid = ? AND task_uuid = ? RETURNING task_uuid",
        (channel_uuid, task_uuid),
    )
    return bool(closed)


async def task_states(fetch: Fetch, task_uuids: Sequence[str]) -> dict[str, bool]:
    """Whether each task that still exists has finished."""
    if not task_uuids:
        return {}
    found = await fetch(
        f"SELECT uuid, finished_at_us FROM tasks WHERE uuid IN ({marks(task_uuids)})",
        tuple(task_uuids),
    )
    return {row[0]: row[1] is not None for row in found}
