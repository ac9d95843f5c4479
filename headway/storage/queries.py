"""SQL of spaces and tasks: reads take a `Fetch` (a reader, `Database.fetch`, or
`Statements.rows` within a write), writes take `Statements` (webhooks and the outbox are in
`storage.webhooks` and `storage.outbox`, share links in `storage.shares`, the schema's own
in `storage.database`).
The service decides which run together in one transaction."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..domain.tasks import TaskRow
from .database import Fetch, Statements, chunks, marks


@dataclass(frozen=True, slots=True)
class NewSpace:
    uuid: str
    title: str | None
    icon: str | None


async def insert_spaces(st: Statements, new: Sequence[NewSpace], now_us: int) -> None:
    """Insert several spaces in one statement (executemany)."""
    await st.many(
        "INSERT INTO spaces (uuid, title, icon, created_at_us, active_at_us) "
        "VALUES (?, ?, ?, ?, ?)",
        [(space.uuid, space.title, space.icon, now_us, now_us) for space in new],
    )


# Tasks of spaces not deleted: a deleted space's rows stay a while after its delete (the
# sweeper removes them a batch at a time: see `storage.deletes`), and no read sees them.
# The deleted spaces are few (those still being removed) and indexed: the subquery is
# read once per statement.
LIVE = "space_uuid NOT IN (SELECT uuid FROM spaces WHERE deleted_at_us IS NOT NULL)"


class SpaceGone(LookupError):
    """The space is deleted, or never existed: nothing was written."""


async def space_head(fetch: Fetch, uuid: str) -> tuple[str | None, str | None] | None:
    """The space's (title, icon), or None if there is no such space (or it was deleted)."""
    found = await fetch(
        "SELECT title, icon FROM spaces WHERE uuid = ? AND deleted_at_us IS NULL", (uuid,)
    )
    return (found[0][0], found[0][1]) if found else None


async def note_active(st: Statements, used: Sequence[tuple[str, int]]) -> None:
    """Mark each (space uuid, when it was used) active then, unless it was already
    marked later."""
    await st.many(
        "UPDATE spaces SET active_at_us = ? WHERE uuid = ? AND active_at_us < ?",
        [(at_us, uuid, at_us) for uuid, at_us in used],
    )


async def held_counts(fetch: Fetch) -> tuple[int, int, int]:
    """How many spaces and tasks the database holds, and how many of those spaces are
    deleted with their rows still there."""
    found = await fetch(
        "SELECT (SELECT count(*) FROM spaces), (SELECT count(*) FROM tasks), "
        "(SELECT count(*) FROM spaces WHERE deleted_at_us IS NOT NULL)",
        (),
    )
    return found[0][0], found[0][1], found[0][2]


async def claim_created_at(
    st: Statements, space_uuid: str, now_us: int, count: int = 1, top_level: int = 0
) -> tuple[int, int] | None:
    """Reserve the next `count` creation instants of a space and return the first: now,
    or 1 µs after the newest task; the others follow it 1 µs apart. Also counts the
    `top_level` ones among them, and the space's activity. Returns the first instant and
    how many top-level tasks the space holds with them.

    One conditional UPDATE, so concurrent creates (even on several instances) queue on
    the space's row and each gets a distinct, increasing instant. None: no such space, or
    it was deleted (a delete takes the same row: a create is either before it, and goes
    with the space, or after it, and refused).
    """
    # Typed parameters: PostgreSQL cannot add two parameters of unknown type.
    found = await st.rows(
        "UPDATE spaces SET last_task_at_us = CASE WHEN last_task_at_us < CAST(? AS BIGINT) "
        "THEN CAST(? AS BIGINT) + CAST(? AS BIGINT) - 1 ELSE last_task_at_us + CAST(? AS BIGINT) "
        "END, top_tasks = top_tasks + ?, active_at_us = CAST(? AS BIGINT) "
        "WHERE uuid = ? AND deleted_at_us IS NULL RETURNING last_task_at_us, top_tasks",
        (now_us, now_us, count, count, top_level, now_us, space_uuid),
    )
    return (found[0][0] - count + 1, found[0][1]) if found else None


async def count_top_level(st: Statements, space_uuid: str, delta: int) -> None:
    """Move the space's count of top-level tasks by `delta` (see the caps)."""
    await st.many(
        "UPDATE spaces SET top_tasks = top_tasks + ? WHERE uuid = ?", [(delta, space_uuid)]
    )


async def count_children(st: Statements, added: dict[str, int]) -> None:
    """Count new steps of parents, by parent (see the caps)."""
    if not added:
        return
    await st.many(
        "UPDATE tasks SET children = children + ? WHERE uuid = ?",
        [(count, parent) for parent, count in added.items()],
    )


async def parents_by_uuid(st: Statements, uuids: Collection[str]) -> dict[str, tuple[TaskRow, int]]:
    """The tasks of these uuids that exist, by uuid, each with how many steps it holds."""
    if not uuids:
        return {}
    found = await st.rows(
        f"SELECT {_ROW_COLUMNS}, children FROM tasks WHERE uuid IN ({marks(uuids)})",
        list(uuids),
    )
    return {raw[0]: (TaskRow(*raw[:10]), int(raw[10])) for raw in found}


async def oldest_finished_top_level(st: Statements, space_uuid: str, count: int) -> list[str]:
    """The space's `count` oldest finished top-level tasks (fewer if it has fewer)."""
    found = await st.rows(
        "SELECT uuid FROM tasks WHERE space_uuid = ? AND parent_uuid IS NULL AND "
        "finished_at_us IS NOT NULL ORDER BY created_at_us LIMIT ?",
        (space_uuid, count),
    )
    return [row[0] for row in found]


async def children_uuids(st: Statements, parents: Sequence[str]) -> list[str]:
    """The steps of these parents."""
    if not parents:
        return []
    found = await st.rows(
        f"SELECT uuid FROM tasks WHERE parent_uuid IN ({marks(parents)})",
        list(parents),
    )
    return [row[0] for row in found]


async def insert_tasks(
    st: Statements, rows: Sequence[TaskRow], jobs: Sequence[str | None] | None = None
) -> None:
    """Insert new tasks in one statement (executemany), each in its job (see `headway.domain.jobs`;
    `jobs` in the order of `rows`; none given: in none)."""
    await st.many(
        "INSERT INTO tasks (uuid, space_uuid, parent_uuid, title, source, created_at_us, job) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                row.uuid,
                row.space_uuid,
                row.parent_uuid,
                row.title,
                row.source,
                row.created_at_us,
                job,
            )
            for row, job in zip(rows, jobs or [None] * len(rows), strict=True)
        ],
    )


async def tasks_by_uuid(st: Statements, uuids: Collection[str]) -> dict[str, TaskRow]:
    """The tasks of these uuids that exist (in spaces not deleted), by uuid."""
    if not uuids:
        return {}
    found = await st.rows(
        f"SELECT {_ROW_COLUMNS} FROM tasks WHERE uuid IN ({marks(uuids)}) AND {LIVE}",
        list(uuids),
    )
    return {row.uuid: row for row in (TaskRow(*raw) for raw in found)}


def by_creation(row: TaskRow) -> int:
    """The key that sorts tasks oldest first."""
    return row.created_at_us


async def read_family(fetch: Fetch, uuid: str) -> tuple[TaskRow | None, list[TaskRow]]:
    """A task and its children (oldest first), in one query: outside any transaction
    with a reader, within one with `Statements.rows`. Nothing of a deleted space."""
    return family_from_rows(uuid, await fetch(_FAMILY_SQL, (uuid, uuid)))


# The columns of a `TaskRow`, in its order.
_ROW_COLUMNS = (
    "uuid, space_uuid, parent_uuid, title, source, created_at_us, finished_at_us, duration, "
    "failed, error"
)
_FAMILY_SQL = f"SELECT {_ROW_COLUMNS} FROM tasks WHERE (uuid = ? OR parent_uuid = ?) AND {LIVE}"


# Tasks a `read_families` query names at most: bounds its statement's parameters.
FAMILIES_AT_ONCE = 400


async def read_families(
    fetch: Fetch, uuids: Sequence[str]
) -> dict[str, tuple[TaskRow, list[TaskRow]]]:
    """The tasks of `uuids` that exist (in spaces not deleted), each with its children
    (oldest first), by uuid: one query for every FAMILIES_AT_ONCE of them, outside any
    transaction."""
    found: dict[str, tuple[TaskRow, list[TaskRow]]] = {}
    for chunk in chunks(list(dict.fromkeys(uuids)), FAMILIES_AT_ONCE):
        rows = {
            raw[0]: TaskRow(*raw)  # a wanted child comes twice: as itself and as a child
            for raw in await fetch(
                f"SELECT {_ROW_COLUMNS} FROM tasks WHERE uuid IN ({marks(chunk)}) AND {LIVE} "
                f"UNION ALL SELECT {_ROW_COLUMNS} FROM tasks WHERE parent_uuid IN "
                f"({marks(chunk)}) AND {LIVE}",
                (*chunk, *chunk),
            )
        }
        # Only this chunk's families take children from this chunk's rows: a wanted
        # child of a parent of an earlier chunk is already among that parent's children.
        families = {uuid: (rows[uuid], []) for uuid in chunk if uuid in rows}
        for row in rows.values():
            if row.parent_uuid is not None and row.parent_uuid in families:
                families[row.parent_uuid][1].append(row)
        for _, children in families.values():
            children.sort(key=by_creation)
        found.update(families)
    return found


def family_from_rows(
    uuid: str, found: Iterable[Sequence[Any]]
) -> tuple[TaskRow | None, list[TaskRow]]:
    # Sorted here rather than in SQL: an ORDER BY can steer the planner off the indexes.
    task, children = None, []
    for raw in found:
        row = TaskRow(*raw)
        if row.uuid == uuid:
            task = row
        else:
            children.append(row)
    children.sort(key=by_creation)
    return task, children


# What a space holds beside its tasks, each row with its `uuid` and `created_at_us`.
Held = Literal["webhooks", "shares", "channels"]


async def space_holds_fewer(st: Statements, table: Held, space_uuid: str, cap: int) -> bool:
    """Whether the space has fewer than `cap` rows in `table` (webhooks, share links,
    channels). SpaceGone if the space was deleted (or never existed).

    Exact under concurrent inserts when called first in their transaction: on PostgreSQL
    the space's row is locked first (FOR NO KEY UPDATE: inserts of this kind in one space
    queue for the length of their transaction, while task inserts, which only take a
    key-share lock on the space for their foreign key, do not); SQLite runs one write
    transaction at a time anyway. A space's delete takes the same lock, so a row added
    here either goes with the space or is refused.
    """
    lock = "" if st.is_sqlite else " FOR NO KEY UPDATE"
    space = await st.rows(f"SELECT deleted_at_us FROM spaces WHERE uuid = ?{lock}", (space_uuid,))
    if not space or space[0][0] is not None:
        raise SpaceGone(space_uuid)
    found = await st.rows(f"SELECT count(*) FROM {table} WHERE space_uuid = ?", (space_uuid,))
    return found[0][0] < cap


async def insert_held(
    st: Statements, table: Held, space_uuid: str, cap: int, columns: str, row: Sequence[Any]
) -> bool:
    """Insert `row` (of `columns`) into `table` unless the space holds `cap` rows there
    already (False: nothing stored); exact under concurrent inserts (see
    `space_holds_fewer`)."""
    if not await space_holds_fewer(st, table, space_uuid, cap):
        return False
    await st.many(f"INSERT INTO {table} ({columns}) VALUES ({marks(row)})", [row])
    return True


async def list_held(fetch: Fetch, table: Held, columns: str, space_uuid: str) -> Sequence[Any]:
    """`columns` of the space's rows of `table`, oldest first."""
    return await fetch(
        f"SELECT {columns} FROM {table} WHERE space_uuid = ? ORDER BY created_at_us, uuid",
        (space_uuid,),
    )


async def delete_held(st: Statements, table: Held, space_uuid: str, uuid: str) -> bool:
    """Delete the space's row `uuid` of `table`; False if the space holds no such row."""
    deleted = await st.rows(
        f"DELETE FROM {table} WHERE uuid = ? AND space_uuid = ? RETURNING uuid", (uuid, space_uuid)
    )
    return len(deleted) == 1


async def lock_task(st: Statements, uuid: str) -> None:
    """Take the task's row lock for the rest of the transaction (a no-op write).

    Finishing a child locks its parent first, so that two last children finishing at
    once on PostgreSQL cannot both see the other unfinished and leave the parent open.
    """
    await st.many("UPDATE tasks SET duration = duration WHERE uuid = ?", [(uuid,)])


async def finish_task(
    st: Statements,
    uuid: str,
    finished_at_us: int,
    duration: int,
    failed: bool,
    error: str | None = None,
    *,
    unless_held: bool = False,
) -> bool:
    """Mark the task finished, succeeded or `failed` (with `error`, the error it reported
    itself, if any: see `domain.TaskRow`), unless it already is (or its space was deleted,
    or, with `unless_held`, it is a parent held open by its own reporter). True: this call
    finished it."""
    held = " AND NOT held" if unless_held else ""
    found = await st.rows(
        "UPDATE tasks SET finished_at_us = ?, duration = ?, failed = ?, error = ? "
        f"WHERE uuid = ? AND finished_at_us IS NULL{held} AND {LIVE} RETURNING uuid",
        (finished_at_us, duration, failed, error, uuid),
    )
    return len(found) == 1


async def hold_tasks(st: Statements, uuids: Collection[str]) -> None:
    """Mark these parents held open by their own reporter: from now on only their own
    `done` finishes them (see `service.families`)."""
    if uuids:
        await st.many(
            f"UPDATE tasks SET held = TRUE WHERE uuid IN ({marks(uuids)}) AND NOT held",
            [list(uuids)],
        )


async def insert_event(
    st: Statements,
    event_id: str,
    space_uuid: str,
    task_uuid: str,
    payload: str,
    now_us: int,
    type_: str = "task.completed",
    *,
    webhooks: int = 0,
) -> None:
    """Store a completion event, queued for `webhooks` webhooks (see `webhooks.fan_out`):
    one queued for none is swept soon after (`webhooks.sweep_unwatched`)."""
    await st.many(
        "INSERT INTO outbox (id, space_uuid, task_uuid, type, payload, created_at_us, webhooks) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(event_id, space_uuid, task_uuid, type_, payload, now_us, webhooks)],
    )
