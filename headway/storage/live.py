"""SQL of live messages: the channels that keep one message per task up to date, and each
message they keep (`live_messages`): the service's reference to it, what it last showed,
and when it may be sent next. How they are sent is in `notify.live`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .database import Fetch, Statements, marks


@dataclass(frozen=True, slots=True)
class LiveChannel:
    """A channel with `live` on, and what its messages need."""

    uuid: str
    space_uuid: str
    url: str
    steps: bool
    stalled_after_s: int
    share_uuid: str | None
    space_title: str | None


@dataclass(frozen=True, slots=True)
class LiveRow:
    """One message a channel keeps. `ref` is None until the service accepted it."""

    channel_uuid: str
    task_uuid: str
    ref: str | None
    state: str
    digest: str
    sent_at_us: int
    next_at_us: int
    attempts: int
    given_up: bool


async def live_channels(fetch: Fetch) -> list[LiveChannel]:
    """Every channel that keeps live messages, by space."""
    found = await fetch(
        "SELECT c.uuid, c.space_uuid, c.url, c.steps, c.stalled_after_s, c.share_uuid, s.title "
        "FROM channels c JOIN spaces s ON s.uuid = c.space_uuid "
        "WHERE c.live AND s.deleted_at_us IS NULL ORDER BY c.space_uuid, c.created_at_us",
        (),
    )
    return [
        LiveChannel(row[0], row[1], row[2], bool(row[3]), int(row[4]), row[5], row[6])
        for row in found
    ]


async def messages(fetch: Fetch, channel_uuids: Sequence[str]) -> list[LiveRow]:
    """The messages these channels keep."""
    if not channel_uuids:
        return []
    found = await fetch(
        "SELECT channel_uuid, task_uuid, ref, state, digest, sent_at_us, next_at_us, attempts, "
        f"given_up FROM live_messages WHERE channel_uuid IN ({marks(channel_uuids)})",
        tuple(channel_uuids),
    )
    return [
        LiveRow(r[0], r[1], r[2], r[3], r[4], int(r[5]), int(r[6]), int(r[7]), bool(r[8]))
        for r in found
    ]


async def kept(fetch: Fetch, channel_uuid: str, task_uuid: str) -> bool:
    """Whether the channel keeps a message for the task (none once either is deleted)."""
    found = await fetch(
        "SELECT 1 FROM live_messages WHERE channel_uuid = ? AND task_uuid = ?",
        (channel_uuid, task_uuid),
    )
    return bool(found)


async def claim(st: Statements, channel_uuid: str, task_uuid: str, now_us: int) -> bool:
    """A new message for this task, not sent yet, unless the channel keeps one (False)."""
    made = await st.rows(
        "INSERT INTO live_messages (channel_uuid, task_uuid, ref, state, digest, sent_at_us, "
        "next_at_us, attempts, given_up, created_at_us) SELECT ?, ?, NULL, '', '', 0, ?, 0, "
        "?, ? WHERE EXISTS (SELECT 1 FROM channels WHERE uuid = ? AND live) "
        "ON CONFLICT DO NOTHING RETURNING task_uuid",
        (channel_uuid, task_uuid, now_us, False, now_us, channel_uuid),
    )
    return bool(made)


async def shown(
    st: Statements,
    row: LiveRow,
    ref: str | None,
    state: str,
    digest: str,
    now_us: int,
) -> None:
    """The message shows `state` (text `digest`) since `now_us`."""
    await st.many(
        "UPDATE live_messages SET ref = ?, state = ?, digest = ?, sent_at_us = ?, "
        "next_at_us = ?, attempts = 0 WHERE channel_uuid = ? AND task_uuid = ?",
        [(ref, state, digest, now_us, now_us, row.channel_uuid, row.task_uuid)],
    )


async def retry(
    st: Statements, row: LiveRow, next_at_us: int, *, attempts: int, given_up: bool
) -> None:
    """A send failed: try again at `next_at_us`, or (`given_up`) never."""
    await st.many(
        "UPDATE live_messages SET next_at_us = ?, attempts = ?, given_up = ? "
        "WHERE channel_uuid = ? AND task_uuid = ?",
        [(next_at_us, attempts, given_up, row.channel_uuid, row.task_uuid)],
    )


async def drop(st: Statements, pairs: Sequence[tuple[str, str]]) -> None:
    """These messages are no longer kept: their task ended (they show its end) or went."""
    await st.many("DELETE FROM live_messages WHERE channel_uuid = ? AND task_uuid = ?", pairs)
