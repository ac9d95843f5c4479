"""Every SQL statement Headway runs, as functions of a connection. The service decides
which run together in one transaction."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import bindparam, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ..domain import TaskRow
from .tables import outbox, spaces, tasks

State = Literal["active", "finished"]

_task_columns = (
    tasks.c.uuid,
    tasks.c.space_uuid,
    tasks.c.parent_uuid,
    tasks.c.title,
    tasks.c.source,
    tasks.c.created_at_us,
    tasks.c.finished_at_us,
    tasks.c.duration,
)
_select_tasks = select(*_task_columns)

# Built once: every report runs it, and building a statement costs more than running it.
_FAMILY = _select_tasks.where(
    (tasks.c.uuid == bindparam("uuid")) | (tasks.c.parent_uuid == bindparam("uuid"))
)

# Above this many parents, fetching all of a space's children beats a long IN list.
_IN_LIST_LIMIT = 500


async def insert_space(
    conn: AsyncConnection, uuid: str, title: str | None, icon: str | None, now_us: int
) -> None:
    await conn.execute(
        insert(spaces).values(uuid=uuid, title=title, icon=icon, created_at_us=now_us)
    )


async def get_space(conn: AsyncConnection, uuid: str) -> tuple[str | None, str | None] | None:
    """The space's (title, icon), or None if there is no such space."""
    row = (
        await conn.execute(select(spaces.c.title, spaces.c.icon).where(spaces.c.uuid == uuid))
    ).first()
    return None if row is None else (row.title, row.icon)


async def claim_created_at(conn: AsyncConnection, space_uuid: str, now_us: int) -> int | None:
    """Reserve the next creation instant of a space: now, or 1 µs after the newest task.

    One conditional UPDATE, so concurrent creates (even on several instances) queue on
    the space's row and each gets a distinct, increasing instant. None: no such space.
    """
    last = spaces.c.last_task_at_us
    result = await conn.execute(
        update(spaces)
        .where(spaces.c.uuid == space_uuid)
        .values(last_task_at_us=case((last < now_us, now_us), else_=last + 1))
        .returning(spaces.c.last_task_at_us)
    )
    row = result.first()
    return None if row is None else row[0]


async def insert_task(conn: AsyncConnection, row: TaskRow) -> None:
    await conn.execute(
        insert(tasks).values(
            uuid=row.uuid,
            space_uuid=row.space_uuid,
            parent_uuid=row.parent_uuid,
            title=row.title,
            source=row.source,
            created_at_us=row.created_at_us,
        )
    )


async def get_task(conn: AsyncConnection, uuid: str) -> TaskRow | None:
    row = (await conn.execute(_select_tasks.where(tasks.c.uuid == uuid))).first()
    return None if row is None else TaskRow(*row)


async def get_family(conn: AsyncConnection, uuid: str) -> tuple[TaskRow | None, list[TaskRow]]:
    """A task and its children (oldest first), in one query."""
    # Sorted here rather than in SQL: an ORDER BY can steer the planner off the indexes.
    result = await conn.execute(_FAMILY, {"uuid": uuid})
    task, children = None, []
    for raw in result:
        row = TaskRow(*raw)
        if row.uuid == uuid:
            task = row
        else:
            children.append(row)
    children.sort(key=_created)
    return task, children


@dataclass(frozen=True, slots=True)
class Window:
    """Which top-level tasks of a space a read asks for (the query parameters)."""

    space_uuid: str
    before_us: int | None = None
    after_us: int | None = None
    limit: int | None = None
    state: State | None = None


class TopLevelPager:
    """The top-level tasks of a `Window`, in the order the space read returns them, a
    page at a time, each page a query of its own (keyset paging on `created_at`).

    Bare `limit`: the newest `limit`, oldest first. `before` alone: newest first.
    `after`, both cursors, or none: oldest first. `limit` counts after the cursors.
    """

    def __init__(
        self, window: Window, *, newest_first: bool, lower_us: int | None, page: int
    ) -> None:
        self._window = window
        self._newest_first = newest_first
        self._lower_us = lower_us  # exclusive bounds, moved as pages are read
        self._upper_us = window.before_us
        self._remaining = window.limit
        self._page = page

    @classmethod
    async def start(cls, conn: AsyncConnection, window: Window, page: int) -> TopLevelPager:
        lower_us = window.after_us
        if window.limit is not None and window.before_us is None and window.after_us is None:
            # The newest `limit`, oldest first: start at the limit-th newest.
            nth = (
                _top_level(window)
                .with_only_columns(tasks.c.created_at_us)
                .order_by(tasks.c.created_at_us.desc())
                .offset(window.limit - 1)
                .limit(1)
            )
            boundary = (await conn.execute(nth)).scalar()
            if boundary is not None:
                lower_us = boundary - 1
        newest_first = window.after_us is None and window.before_us is not None
        return cls(window, newest_first=newest_first, lower_us=lower_us, page=page)

    async def next_page(self, conn: AsyncConnection) -> list[TaskRow]:
        """The next page; empty once the window is exhausted."""
        if self._remaining == 0:
            return []
        size = self._page if self._remaining is None else min(self._page, self._remaining)
        query = _top_level(self._window)
        if self._lower_us is not None:
            query = query.where(tasks.c.created_at_us > self._lower_us)
        if self._upper_us is not None:
            query = query.where(tasks.c.created_at_us < self._upper_us)
        order = tasks.c.created_at_us.desc() if self._newest_first else tasks.c.created_at_us
        rows = [TaskRow(*raw) for raw in await conn.execute(query.order_by(order).limit(size))]
        if rows:
            if self._newest_first:
                self._upper_us = rows[-1].created_at_us
            else:
                self._lower_us = rows[-1].created_at_us
        self._remaining = (
            0
            if len(rows) < size
            else (None if self._remaining is None else self._remaining - len(rows))
        )
        return rows


def _top_level(window: Window) -> Any:
    query = _select_tasks.where(
        tasks.c.space_uuid == window.space_uuid, tasks.c.parent_uuid.is_(None)
    )
    if window.state == "active":
        query = query.where(tasks.c.finished_at_us.is_(None))
    elif window.state == "finished":
        query = query.where(tasks.c.finished_at_us.is_not(None))
    return query


async def list_children(
    conn: AsyncConnection, space_uuid: str, parents: list[str]
) -> dict[str, list[TaskRow]]:
    """The children of the given tasks, oldest first, keyed by parent."""
    if not parents:
        return {}
    if len(parents) <= _IN_LIST_LIMIT:
        query = _select_tasks.where(tasks.c.parent_uuid.in_(parents))
    else:
        query = _select_tasks.where(
            tasks.c.space_uuid == space_uuid, tasks.c.parent_uuid.is_not(None)
        )
    wanted = set(parents)
    found: dict[str, list[TaskRow]] = defaultdict(list)
    # Sorted here rather than in SQL: ORDER BY created_at_us made SQLite walk the whole
    # space's creation index instead of looking the parents up.
    for raw in sorted(await conn.execute(query), key=_created_at_column):
        row = TaskRow(*raw)
        if row.parent_uuid in wanted:
            found[row.parent_uuid].append(row)  # type: ignore[index]
    return found


def _created(row: TaskRow) -> int:
    return row.created_at_us


def _created_at_column(raw: Any) -> int:
    return raw.created_at_us


async def lock_task(conn: AsyncConnection, uuid: str) -> None:
    """Take the task's row lock for the rest of the transaction (a no-op write).

    Finishing a child locks its parent first, so that two last children finishing at
    once on PostgreSQL cannot both see the other unfinished and leave the parent open.
    """
    await conn.execute(update(tasks).where(tasks.c.uuid == uuid).values(duration=tasks.c.duration))


async def finish_task(conn: AsyncConnection, uuid: str, finished_at_us: int, duration: int) -> bool:
    """Mark the task finished unless it already is. True: this call finished it."""
    result = await conn.execute(
        update(tasks)
        .where(tasks.c.uuid == uuid, tasks.c.finished_at_us.is_(None))
        .values(finished_at_us=finished_at_us, duration=duration)
    )
    return result.rowcount == 1


async def insert_event(
    conn: AsyncConnection,
    event_id: str,
    space_uuid: str,
    task_uuid: str,
    payload: str,
    now_us: int,
    type_: str = "task.completed",
) -> None:
    await conn.execute(
        insert(outbox).values(
            id=event_id,
            space_uuid=space_uuid,
            task_uuid=task_uuid,
            type=type_,
            payload=payload,
            created_at_us=now_us,
        )
    )
