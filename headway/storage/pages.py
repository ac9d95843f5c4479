"""A space's top-level tasks a page at a time: which ones a read asks for (`Window`), read
from the database in pages with their children (`TopLevelPager`), or from rows held in
memory (`Window.select`, for `caches.spaces`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..domain.tasks import TaskRow
from .database import Fetch
from .queries import by_creation

State = Literal["active", "finished"]


@dataclass(frozen=True, slots=True)
class Window:
    """Which top-level tasks of a space a read asks for (the query parameters), and in
    which order it answers them: the rules every read follows, whether it reads the
    database (`TopLevelPager`) or rows held in memory (`select`).

    Bare `limit`: the newest `limit`, oldest first. `before` alone: newest first.
    `after`, both cursors, or none: oldest first. `limit` counts after the cursors.
    `state` keeps the top-level tasks in that state (their children come with them).
    """

    space_uuid: str
    before_us: int | None = None
    after_us: int | None = None
    limit: int | None = None
    state: State | None = None

    @property
    def newest_only(self) -> bool:
        """The newest `limit` tasks are wanted (a bare `limit`)."""
        return self.limit is not None and self.before_us is None and self.after_us is None

    @property
    def newest_first(self) -> bool:
        """The answer runs newest first (`before` alone)."""
        return self.after_us is None and self.before_us is not None

    def admits(self, row: TaskRow) -> bool:
        """Whether the top-level task `row` is in the window, its limit aside."""
        state, before, after = self.state, self.before_us, self.after_us
        return (
            (state is None or (row.finished_at_us is not None) == (state == "finished"))
            and (after is None or row.created_at_us > after)
            and (before is None or row.created_at_us < before)
        )

    def select(self, top: Sequence[TaskRow]) -> list[TaskRow]:
        """The window's tasks of `top`, a space's top-level tasks oldest first, in the
        window's order."""
        rows = [row for row in top if self.admits(row)]
        limit = self.limit
        if self.newest_only:
            assert limit is not None
            return rows[-limit:] if limit < len(rows) else rows
        if self.newest_first:
            rows.reverse()
        return rows if limit is None else rows[:limit]


class TopLevelPager:
    """The top-level tasks of a `Window`, in its order, with their children, a page at a
    time: each page is one query and one round trip (keyset paging on `created_at`).
    Pages grow from `page` to `max_page` top-level tasks, so a small read costs one small
    query and a whole big space few large ones."""

    def __init__(
        self, window: Window, lower_us: int | None, page: int, max_page: int, childless: bool
    ) -> None:
        self._window = window
        self._childless = childless
        self._newest_first = window.newest_first
        self._lower_us = lower_us  # exclusive bounds, moved as pages are read
        self._upper_us = window.before_us
        self._remaining = window.limit
        self._page = page
        self._max_page = max(page, max_page)

    @classmethod
    async def start(
        cls,
        fetch: Fetch,
        window: Window,
        page: int,
        max_page: int = 0,
        *,
        childless: bool = False,
    ) -> TopLevelPager:
        """The pager, its first query run. `childless`: the space is known to hold no
        child task, so pages need not look for children."""
        lower_us = window.after_us
        if window.newest_only:
            assert window.limit is not None
            # The newest `limit`, oldest first: start at the limit-th newest.
            where, params = _top_level(window)
            found = await fetch(
                f"SELECT created_at_us FROM tasks WHERE {where} "
                "ORDER BY created_at_us DESC LIMIT 1 OFFSET ?",
                (*params, window.limit - 1),
            )
            if found:
                lower_us = found[0][0] - 1
        return cls(window, lower_us, page, max_page, childless)

    @property
    def exhausted(self) -> bool:
        """True once the window holds no more pages."""
        return self._remaining == 0

    async def next_page(self, fetch: Fetch) -> tuple[list[TaskRow], dict[str, list[TaskRow]]]:
        """The next page's top-level tasks, and their children (oldest first) by parent;
        no tasks once the window is exhausted."""
        if self._remaining == 0:
            return [], {}
        size = self._page if self._remaining is None else min(self._page, self._remaining)
        self._page = min(self._page * 2, self._max_page)
        where, params = _top_level(self._window)
        if self._lower_us is not None:
            where += " AND created_at_us > ?"
            params.append(self._lower_us)
        if self._upper_us is not None:
            where += " AND created_at_us < ?"
            params.append(self._upper_us)
        order = "DESC" if self._newest_first else "ASC"
        top = f"SELECT {_COLUMNS} FROM tasks WHERE {where} ORDER BY created_at_us {order} LIMIT ?"
        if self._childless:
            found = await fetch(top, (*params, size))
        else:
            # The children come in the same query: one round trip per page. Both parts
            # are sorted here rather than in SQL (see `queries.family_from_rows`).
            found = await fetch(
                f"WITH top AS ({top}) SELECT {_COLUMNS} FROM top UNION ALL "
                f"SELECT {_COLUMNS} FROM tasks WHERE parent_uuid IN (SELECT uuid FROM top)",
                (*params, size),
            )
        rows, children = families_of(self._window.space_uuid, found)
        if self._newest_first:
            rows.reverse()
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
        return rows, children


# Every column but `space_uuid`, which the window names.
_COLUMNS = (
    "uuid, parent_uuid, title, source, created_at_us, finished_at_us, duration, failed, error"
)


def _top_level(window: Window) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of a window's top-level tasks."""
    where = "space_uuid = ? AND parent_uuid IS NULL"
    if window.state == "active":
        where += " AND finished_at_us IS NULL"
    elif window.state == "finished":
        where += " AND finished_at_us IS NOT NULL"
    return where, [window.space_uuid]


async def space_rows(fetch: Fetch, space_uuid: str, most: int) -> Sequence[Any]:
    """Rows of `_COLUMNS` of the space's tasks, at most `most` of them, in no order."""
    return await fetch(
        f"SELECT {_COLUMNS} FROM tasks WHERE space_uuid = ? LIMIT ?", (space_uuid, most)
    )


async def space_has_children(fetch: Fetch, space_uuid: str) -> bool:
    """Whether any task of the space is the child of another."""
    found = await fetch(
        "SELECT 1 FROM tasks WHERE space_uuid = ? AND parent_uuid IS NOT NULL LIMIT 1",
        (space_uuid,),
    )
    return bool(found)


def families_of(
    space_uuid: str, found: Sequence[tuple[Any, ...]]
) -> tuple[list[TaskRow], dict[str, list[TaskRow]]]:
    """Rows of `_COLUMNS` as the space's top-level tasks and their children by parent,
    each oldest first."""
    top: list[TaskRow] = []
    children: dict[str, list[TaskRow]] = defaultdict(list)
    for uuid, parent, title, source, created, finished, duration, failed, error in found:
        row = TaskRow(
            uuid, space_uuid, parent, title, source, created, finished, duration, failed, error
        )
        if parent is None:
            top.append(row)
        else:
            children[parent].append(row)
    top.sort(key=by_creation)
    for family in children.values():
        family.sort(key=by_creation)
    return top, dict(children)
