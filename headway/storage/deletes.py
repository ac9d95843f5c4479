"""SQL of deleting: a task with its children, a whole space, and what refers to them
(undelivered events, channel messages, stall episodes, share links, webhooks, channels,
the first answers of creates made with an idempotency key).

A task goes with everything of it in one transaction. A space goes in two steps, so that
no transaction holds the write lock long however much it holds: `delete_space` marks it
deleted (`spaces.deleted_at_us`) and removes what could still act for it (share links,
webhooks, channels, their logs) in one short transaction, after which no read sees it
or anything of it (see `queries.LIVE`) and nothing of it is delivered (deliveries and
channel messages are claimed through their endpoints' rows); the sweeper then removes the
rest a batch at a time (`remove_tasks`, `remove_events`, `remove_keys`) and the space's
row last (`remove_space`), whether it is the process that deleted it or, after a crash,
any other. Every batch names its rows by keys the schema indexes, and is statements run
for their effect only: on SQLite, one trip to the writer's thread from BEGIN to COMMIT.

Children go before their parents and tasks before their space (the foreign keys). Nothing
here decides; the use cases (`service.deletes`, `sweeper`) do.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import jobs
from .database import Fetch, Statements, chunks, marks
from .outbox import CHANNELS, WEBHOOKS, lock
from .queries import LIVE

# Uuids named in one statement: bounds its parameters (SQLite allows 32,766).
AT_ONCE = 500


async def delete_tasks(st: Statements, task_uuids: Sequence[str]) -> None:
    """Delete these tasks (children before their parents: give them in that order, or
    all children in an earlier call) and everything that still refers to them, counting
    their undelivered events out of their webhooks' and channels' queues."""
    for chunk in chunks(task_uuids, AT_ONCE):
        params, named = tuple(chunk), marks(chunk)
        runs = await jobs.runs_of(st, params)  # counted out of their jobs, last
        events = f"SELECT id FROM outbox WHERE task_uuid IN ({named})"
        hooks = f"SELECT webhook_uuid FROM deliveries WHERE event_id IN ({events})"
        channel_rows = f"SELECT channel_uuid FROM channel_deliveries WHERE task_uuid IN ({named})"
        if not st.is_sqlite:  # their rows before their queues' rows (see `storage.outbox`)
            await lock(st, WEBHOOKS, [row[0] for row in await st.rows(hooks, params)])
            await lock(st, CHANNELS, [row[0] for row in await st.rows(channel_rows, params)])
        await st.many(
            "UPDATE webhooks SET undelivered = undelivered - (SELECT count(*) FROM deliveries "
            f"WHERE deliveries.webhook_uuid = webhooks.uuid AND event_id IN ({events})) "
            f"WHERE uuid IN ({hooks})",
            [params * 2],
        )
        await st.many(
            "UPDATE channels SET queued = queued - (SELECT count(*) FROM channel_deliveries "
            "WHERE channel_deliveries.channel_uuid = channels.uuid AND task_uuid IN "
            f"({named})) WHERE uuid IN ({channel_rows})",
            [params * 2],
        )
        for sql in _removals(named):
            await st.many(sql, [params])
        await jobs.forget_runs(st, runs)


async def family_uuids(fetch: Fetch, task_uuid: str) -> tuple[str, str | None, list[str]] | None:
    """(space, parent, children) of a task, or None if there is no such task (or its space
    was deleted)."""
    found = await fetch(
        "SELECT uuid, space_uuid, parent_uuid FROM tasks WHERE (uuid = ? OR parent_uuid = ?) "
        f"AND {LIVE}",
        (task_uuid, task_uuid),
    )
    own = [row for row in found if row[0] == task_uuid]
    if not own:
        return None
    return own[0][1], own[0][2], [row[0] for row in found if row[0] != task_uuid]


# --- A space -------------------------------------------------------------------------------


async def delete_space(
    st: Statements, space_uuid: str, now_us: int, *, idle_before_us: int | None = None
) -> bool:
    """Mark the space deleted, and remove its share links, webhooks and channels (at most
    a cap of each per space, with their logs' last few entries): after this commits,
    nothing reads it, adds to it, or delivers anything of it. False: there is no such
    space, it is deleted already, or (with `idle_before_us`) it was used since then.

    On PostgreSQL the space's row is taken first (as creates in it take it: each is before
    the delete, and goes with the space, or after it, and is refused), then its webhooks'
    and channels' rows in uuid order, before their queues' (see `storage.outbox`)."""
    idle = "" if idle_before_us is None else " AND active_at_us < ?"
    marked = await st.rows(
        f"UPDATE spaces SET deleted_at_us = ? WHERE uuid = ? AND deleted_at_us IS NULL{idle} "
        "RETURNING uuid",
        (now_us, space_uuid, *(() if idle_before_us is None else (idle_before_us,))),
    )
    if not marked:
        return False
    if not st.is_sqlite:
        for table in ("webhooks", "channels"):
            await st.rows(
                f"SELECT uuid FROM {table} WHERE space_uuid = ? ORDER BY uuid FOR UPDATE",
                (space_uuid,),
            )
    for sql in _ENDPOINTS:
        await st.many(sql, [(space_uuid,)])
    return True


# What can still act for a space (a link shows it, an endpoint is claimed through its row),
# removed as it is deleted. Their queues' rows (deliveries, channel messages) stay, never
# claimed again, until the sweeper removes them with their tasks and events.
_ENDPOINTS = (
    "DELETE FROM webhook_log WHERE webhook_uuid IN "
    "(SELECT uuid FROM webhooks WHERE space_uuid = ?)",
    "DELETE FROM webhooks WHERE space_uuid = ?",
    "DELETE FROM channel_log WHERE channel_uuid IN "
    "(SELECT uuid FROM channels WHERE space_uuid = ?)",
    "DELETE FROM live_messages WHERE channel_uuid IN "
    "(SELECT uuid FROM channels WHERE space_uuid = ?)",
    "DELETE FROM channels WHERE space_uuid = ?",
    "DELETE FROM shares WHERE space_uuid = ?",
)


async def deleted_spaces(fetch: Fetch, limit: int) -> list[str]:
    """Spaces deleted whose rows are still being removed, those deleted first first."""
    found = await fetch(
        "SELECT uuid FROM spaces WHERE deleted_at_us IS NOT NULL ORDER BY deleted_at_us LIMIT ?",
        (limit,),
    )
    return [row[0] for row in found]


async def idle_spaces(fetch: Fetch, idle_since_us: int, limit: int) -> list[str]:
    """At most `limit` spaces not deleted and idle since before `idle_since_us`, those
    idle longest first."""
    found = await fetch(
        "SELECT uuid FROM spaces WHERE active_at_us < ? AND deleted_at_us IS NULL "
        "ORDER BY active_at_us LIMIT ?",
        (idle_since_us, limit),
    )
    return [row[0] for row in found]


async def tasks_newest(
    fetch: Fetch, space_uuid: str, before_us: int | None, limit: int
) -> list[tuple[str, int]]:
    """At most `limit` of the space's tasks (steps too) created before `before_us` (None:
    any), newest first, as (uuid, created_at_us): an index range. Steps are created after
    their parents, so a page taken newest first never holds a parent before its steps."""
    below = "" if before_us is None else " AND created_at_us < ?"
    found = await fetch(
        f"SELECT uuid, created_at_us FROM tasks WHERE space_uuid = ?{below} "
        "ORDER BY created_at_us DESC LIMIT ?",
        (space_uuid, *(() if before_us is None else (before_us,)), limit),
    )
    return [(row[0], int(row[1])) for row in found]


async def tasks_oldest(
    fetch: Fetch, space_uuid: str, after_us: int, limit: int
) -> list[tuple[str, int]]:
    """At most `limit` of the space's tasks (steps too) created after `after_us`, oldest
    first, as (uuid, created_at_us): an index range."""
    found = await fetch(
        "SELECT uuid, created_at_us FROM tasks WHERE space_uuid = ? AND created_at_us > ? "
        "ORDER BY created_at_us LIMIT ?",
        (space_uuid, after_us, limit),
    )
    return [(row[0], int(row[1])) for row in found]


async def remove_tasks(st: Statements, task_uuids: Sequence[str]) -> None:
    """Remove these tasks of a deleted space, with their events, those events' deliveries,
    their channel messages and stall episodes (give steps before their parents, as
    `tasks_newest` does). Their endpoints are gone: no count to move, no row to lock.
    On PostgreSQL, one statement (its parts see one snapshot; the foreign keys are checked
    at its end): one round trip where each would take one."""
    for chunk in chunks(task_uuids, AT_ONCE):
        params, parts = tuple(chunk), _removals(marks(chunk))
        if st.is_sqlite:
            for sql in parts:
                await st.many(sql, [params])
        else:
            *first, last = parts
            ctes = ", ".join(f"part{n} AS ({sql})" for n, sql in enumerate(first))
            await st.many(f"WITH {ctes} {last}", [params * len(parts)])


def _removals(named: str) -> list[str]:
    """The deletes of tasks (`named`: their placeholders) and of what refers to them, in
    the order the foreign keys allow, each with the tasks' uuids as its parameters."""
    events = f"SELECT id FROM outbox WHERE task_uuid IN ({named})"
    return [
        f"DELETE FROM deliveries WHERE event_id IN ({events})",
        *(f"DELETE FROM {table} WHERE {column} IN ({named})" for table, column in _OF_TASKS),
    ]


_OF_TASKS = (
    ("outbox", "task_uuid"),
    ("channel_deliveries", "task_uuid"),
    ("stalls", "task_uuid"),
    ("late_runs", "task_uuid"),
    ("live_messages", "task_uuid"),
    ("tasks", "uuid"),
)


async def event_ids(fetch: Fetch, space_uuid: str, limit: int) -> list[str]:
    """At most `limit` ids of the space's events still in the outbox."""
    found = await fetch("SELECT id FROM outbox WHERE space_uuid = ? LIMIT ?", (space_uuid, limit))
    return [row[0] for row in found]


async def remove_events(st: Statements, ids: Sequence[str]) -> None:
    """Remove these events of a deleted space, with their deliveries."""
    for chunk in chunks(ids, AT_ONCE):
        await st.many(f"DELETE FROM deliveries WHERE event_id IN ({marks(chunk)})", [chunk])
        await st.many(f"DELETE FROM outbox WHERE id IN ({marks(chunk)})", [chunk])


async def key_pairs(fetch: Fetch, space_uuid: str, limit: int) -> list[tuple[str, str]]:
    """At most `limit` (scope, key) of the idempotency keys whose answers name the space."""
    found = await fetch(
        "SELECT scope, key FROM idempotency_keys WHERE space_uuid = ? LIMIT ?", (space_uuid, limit)
    )
    return [(row[0], row[1]) for row in found]


async def remove_keys(st: Statements, pairs: Sequence[tuple[str, str]]) -> None:
    """Remove these idempotency keys (those of a deleted space)."""
    await st.many("DELETE FROM idempotency_keys WHERE scope = ? AND key = ?", pairs)


async def remove_space(st: Statements, space_uuid: str) -> None:
    """Remove the deleted space's row, once every task of it is gone (else nothing), with
    whatever of it is left: events a finish racing the delete wrote, keys, endpoints (a
    few rows at most: the batches took the rest)."""
    for sql in (
        "DELETE FROM deliveries WHERE event_id IN (SELECT id FROM outbox WHERE space_uuid = ?)",
        "DELETE FROM outbox WHERE space_uuid = ?",
        "DELETE FROM idempotency_keys WHERE space_uuid = ?",
        "DELETE FROM jobs WHERE space_uuid = ?",
        *_ENDPOINTS,
    ):
        await st.many(sql, [(space_uuid,)])
    await st.many(
        "DELETE FROM spaces WHERE uuid = ? AND deleted_at_us IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM tasks WHERE space_uuid = ?)",
        [(space_uuid, space_uuid)],
    )
