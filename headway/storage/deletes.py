"""SQL of deleting: a task with its children, a whole space, and what refers to them
(undelivered events, channel messages, stall episodes, share links, webhooks, channels,
the first answers of creates made with an idempotency key).

Children go before their parents and tasks before their space (the foreign keys), each
statement naming its rows by a key the schema indexes. Nothing here decides; the use
case (`service.deletes`) does, in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from .channels import lock_channels
from .database import Fetch, Statements
from .outbox import lock_webhooks

# Uuids named in one statement: bounds its parameters (SQLite allows 32,766).
AT_ONCE = 500


def _chunks(uuids: Sequence[str]) -> list[Sequence[str]]:
    return [uuids[start : start + AT_ONCE] for start in range(0, len(uuids), AT_ONCE)]


def _marks(count: int) -> str:
    return ", ".join("?" * count)


async def delete_tasks(st: Statements, task_uuids: Sequence[str]) -> None:
    """Delete these tasks (children before their parents: give them in that order, or
    all children in an earlier call) and everything that still refers to them, counting
    their undelivered events out of their webhooks' and channels' queues."""
    for chunk in _chunks(task_uuids):
        marks, params = _marks(len(chunk)), tuple(chunk)
        events = f"SELECT id FROM outbox WHERE task_uuid IN ({marks})"
        hooks = f"SELECT webhook_uuid FROM deliveries WHERE event_id IN ({events})"
        channel_rows = f"SELECT channel_uuid FROM channel_deliveries WHERE task_uuid IN ({marks})"
        if not st.is_sqlite:  # their rows before their queues' rows (see `storage.outbox`)
            await lock_webhooks(st, [row[0] for row in await st.rows(hooks, params)])
            await lock_channels(st, [row[0] for row in await st.rows(channel_rows, params)])
        await st.many(
            "UPDATE webhooks SET undelivered = undelivered - (SELECT count(*) FROM deliveries "
            f"WHERE deliveries.webhook_uuid = webhooks.uuid AND event_id IN ({events})) "
            f"WHERE uuid IN ({hooks})",
            [params * 2],
        )
        await st.many(
            "UPDATE channels SET queued = queued - (SELECT count(*) FROM channel_deliveries "
            "WHERE channel_deliveries.channel_uuid = channels.uuid AND task_uuid IN "
            f"({marks})) WHERE uuid IN ({channel_rows})",
            [params * 2],
        )
        await st.many(
            "DELETE FROM deliveries WHERE event_id IN (SELECT id FROM outbox WHERE "
            f"task_uuid IN ({marks}))",
            [params],
        )
        await st.many(f"DELETE FROM outbox WHERE task_uuid IN ({marks})", [params])
        await st.many(f"DELETE FROM channel_deliveries WHERE task_uuid IN ({marks})", [params])
        await st.many(f"DELETE FROM stalls WHERE task_uuid IN ({marks})", [params])
        await st.many(f"DELETE FROM tasks WHERE uuid IN ({marks})", [params])


async def family_uuids(fetch: Fetch, task_uuid: str) -> tuple[str, str | None, list[str]] | None:
    """(space, parent, children) of a task, or None if there is no such task."""
    found = await fetch(
        "SELECT uuid, space_uuid, parent_uuid FROM tasks WHERE uuid = ? OR parent_uuid = ?",
        (task_uuid, task_uuid),
    )
    own = [row for row in found if row[0] == task_uuid]
    if not own:
        return None
    return own[0][1], own[0][2], [row[0] for row in found if row[0] != task_uuid]


async def space_steps(fetch: Fetch, space_uuid: str, limit: int) -> list[str]:
    """At most `limit` of the space's steps (child tasks)."""
    found = await fetch(
        "SELECT uuid FROM tasks WHERE space_uuid = ? AND parent_uuid IS NOT NULL LIMIT ?",
        (space_uuid, limit),
    )
    return [row[0] for row in found]


async def space_top_level(fetch: Fetch, space_uuid: str, limit: int) -> list[str]:
    """At most `limit` of the space's top-level tasks, oldest first (by its index)."""
    found = await fetch(
        "SELECT uuid FROM tasks WHERE space_uuid = ? AND parent_uuid IS NULL "
        "ORDER BY created_at_us LIMIT ?",
        (space_uuid, limit),
    )
    return [row[0] for row in found]


async def delete_space(st: Statements, space_uuid: str) -> list[str] | None:
    """Delete the space and everything it holds; the uuids of the tasks deleted (their
    progress is the caller's to forget), or None if there was no such space."""
    by_channel = "channel_uuid IN (SELECT uuid FROM channels WHERE space_uuid = ?)"
    if not st.is_sqlite:  # their rows before their queues' rows (see `storage.outbox`)
        for table in ("webhooks", "channels"):
            await st.rows(
                f"SELECT uuid FROM {table} WHERE space_uuid = ? ORDER BY uuid FOR UPDATE",
                (space_uuid,),
            )
    for sql in (
        "DELETE FROM deliveries WHERE event_id IN (SELECT id FROM outbox WHERE space_uuid = ?)",
        "DELETE FROM deliveries WHERE webhook_uuid IN "
        "(SELECT uuid FROM webhooks WHERE space_uuid = ?)",
        "DELETE FROM outbox WHERE space_uuid = ?",
        "DELETE FROM webhook_log WHERE webhook_uuid IN "
        "(SELECT uuid FROM webhooks WHERE space_uuid = ?)",
        "DELETE FROM webhooks WHERE space_uuid = ?",
        f"DELETE FROM channel_deliveries WHERE {by_channel}",
        f"DELETE FROM channel_log WHERE {by_channel}",
        f"DELETE FROM stalls WHERE {by_channel}",
        "DELETE FROM channels WHERE space_uuid = ?",
        "DELETE FROM shares WHERE space_uuid = ?",
        "DELETE FROM idempotency_keys WHERE space_uuid = ?",
    ):
        await st.many(sql, [(space_uuid,)])
    tasks = [
        row[0]
        for sql in (
            "DELETE FROM tasks WHERE space_uuid = ? AND parent_uuid IS NOT NULL RETURNING uuid",
            "DELETE FROM tasks WHERE space_uuid = ? RETURNING uuid",
        )
        for row in await st.rows(sql, (space_uuid,))
    ]
    gone = await st.rows("DELETE FROM spaces WHERE uuid = ? RETURNING uuid", (space_uuid,))
    return tasks if gone else None


async def share_uuids(fetch: Fetch, space_uuid: str) -> list[str]:
    found = await fetch("SELECT uuid FROM shares WHERE space_uuid = ?", (space_uuid,))
    return [row[0] for row in found]
