"""Space reads: the window a read asks for, the rows that answer it (held in memory where
they can be, else read page by page), and the one renderer of a page of tasks that REST,
the live stream's snapshot, share links and `/mcp` all answer with."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypedDict, Unpack, cast

import msgspec

from ..caches.spaces import BigSpace, ShownTasks, SmallSpace, SmallSpaces, space_version_key
from ..domain import tasks as domain
from ..domain.errors import BadRequest, NotFound
from ..domain.tasks import FamilyVersion, Progress, TaskRow, TaskView
from ..storage import pages, queries
from .activity import Activity
from .context import NO_SPACE, Stores, canonical
from .spaces import Head, Spaces

# Top-level tasks read at a time for a space read (their children come with them): the
# first page, then twice as many each page up to MAX_SPACE_PAGE, so that a small read is
# one small query and a whole big space takes few round trips.
SPACE_PAGE = 200
MAX_SPACE_PAGE = 3200
# Pages of at most this many top-level tasks (a read with a `limit`, as a dashboard
# polls) reuse their tasks' answers; a read of a whole big space would only churn them.
SHOWN_PAGE = 100


class SpaceQuery(TypedDict, total=False):
    """A space read's query parameters (see `pages.Window`), each optional."""

    before: str | None
    after: str | None
    limit: int | str | None  # a number, or a query parameter's text
    state: str | None


Shown = TaskView | msgspec.Raw  # a task's answer: its struct, or its JSON already made
Rows = tuple[list[TaskRow], dict[str, list[TaskRow]]]  # top-level tasks, children by parent


class SpaceReads:
    """Reads of a space's tasks. Small spaces are held whole and pages of big ones kept
    (see `caches.spaces`), a cache registered with `Writes`, each only while the
    space's rows are at the version they were read at (see `coherence`). Where the
    progress store hands out the object it holds, the answers of unchanged tasks are
    reused too (`ShownTasks`: progress read from Redis is a new object each time)."""

    def __init__(self, stores: Stores, spaces: Spaces, activity: Activity) -> None:
        self._stores = stores
        self._activity = activity
        self._spaces = spaces
        self._coherence = stores.writes.coherence
        self.small: SmallSpaces | None = SmallSpaces()
        self.shown = self._coherence.shown_tasks()
        self._reuses = self.shown is not None
        for cache in (self.small, self.shown):
            if cache is not None:
                stores.writes.register(cache)

    def hold(self, small: SmallSpaces | None) -> None:
        """Hold spaces in `small` from now on (None: hold none)."""
        self._stores.writes.replace(self.small, small)
        self.small = small

    async def get(self, space_uuid: str, **query: Unpack[SpaceQuery]) -> dict[str, Any]:
        """A space with its top-level tasks, all in one answer (see `read`)."""
        head, pages = await self.read(space_uuid, **query)
        return {**head, "tasks": [task async for page in pages for task in page]}

    async def read(
        self, space_uuid: str, **query: Unpack[SpaceQuery]
    ) -> tuple[Head, AsyncIterator[list[Shown]]]:
        """A space read as its `{"title", "icon"}` and its tasks, a page at a time, in the
        order `pages.Window` sets.

        Every bad parameter and an unknown space raise here, and the first page is read
        and rendered here too, so a store that is down fails the read before any byte is
        sent. The other pages are read as they are consumed, each on a connection of its
        own, so a reader that stops reading holds one page and no connection.
        """
        before_us = _cursor("before", query.get("before"))
        after_us = _cursor("after", query.get("after"))
        count = parse_limit(query.get("limit"))
        state = query.get("state")
        if state is not None and state not in ("active", "finished"):
            raise BadRequest(f"state must be active or finished, not {state!r}.")
        key = canonical(space_uuid, NO_SPACE)
        window = pages.Window(key, before_us, after_us, count, cast(pages.State | None, state))
        head = self._spaces.heads.get(key)
        version: FamilyVersion | None = None
        now_us = 0
        if self.small is not None:
            version = await self._coherence.version(space_version_key(key))
            now_us = self._stores.clock.now_us()
        held = None if self.small is None else self.small.get(key, version, now_us)
        if not self._coherence.head_shows_space(held is not None):
            head = None  # another instance may have deleted the space: ask the database
        if head is not None:
            self._activity.note(key)  # an existing space was read
        if head is not None and isinstance(held, SmallSpace):
            return head, _one(await self.render(held.rows_of(window), *self._held_shown(held)))
        if head is not None and isinstance(held, BigSpace):
            assert self.small is not None
            page = self.small.page(held, window)
            if page is not None:
                return head, _one(await self.render(page, *self._reuse(page)))
        async with self._stores.db.read() as fetch:
            if head is None:
                found = await queries.space_head(fetch, key)
                if found is None:
                    raise NotFound(NO_SPACE)
                head = self._spaces.heads.keep(key, *found)
                self._activity.note(key)
            if self.small is not None and held is None:
                held = await self.small.load(fetch, key, version, now_us)
            if isinstance(held, SmallSpace):
                return head, _one(await self.render(held.rows_of(window), *self._held_shown(held)))
            big = held if isinstance(held, BigSpace) else None
            version = 0 if big is None else big.version  # as the rows are read
            pager = await pages.TopLevelPager.start(
                fetch,
                window,
                SPACE_PAGE,
                MAX_SPACE_PAGE,
                childless=big is not None and big.childless,
            )
            first = await pager.next_page(fetch)
        if big is not None and pager.exhausted:
            assert self.small is not None
            self.small.keep_page(big, version, window, first)  # the whole answer
        if pager.exhausted or not first[0]:
            return head, _one(await self.render(first, *self._reuse(first)))
        return head, self._pages(pager, await self.render(first, *self._reuse(first)))

    def _held_shown(self, held: SmallSpace) -> tuple[ShownTasks | None, ShownTasks | None]:
        """Where a held small space's read reuses answers: its own `ShownTasks`, where
        answers are reused at all (`Coherence.shown_tasks`)."""
        shown = held.shown if self._reuses else None
        return shown, shown

    def _reuse(self, rows: Rows) -> tuple[ShownTasks | None, None]:
        """Where a page read from the database reuses answers: its childless tasks', in a
        page small enough (a whole big space would only churn them); children never."""
        return (self.shown if len(rows[0]) <= SHOWN_PAGE else None), None

    async def _pages(
        self, pager: pages.TopLevelPager, first: list[Shown]
    ) -> AsyncIterator[list[Shown]]:
        yield first
        while not pager.exhausted:
            async with self._stores.db.read() as fetch:
                rows = await pager.next_page(fetch)
            if not rows[0]:
                return
            yield await self.render(rows, *self._reuse(rows))

    async def render(
        self, rows: Rows, shown: ShownTasks | None, children_shown: ShownTasks | None
    ) -> list[Shown]:
        """The answers of a page: its top-level tasks in order, each with its children.
        A childless task's JSON comes from `shown`, a child's from `children_shown`, where
        given (reused while its progress is unchanged: see `ShownTasks`)."""
        top, children = rows
        if not top:
            return []
        uuids = [row.uuid for row in top]
        for row in top:
            family = children.get(row.uuid)
            if family:
                uuids.extend(child.uuid for child in family)
        found = await self._stores.progress.get_many(uuids)
        return render_page(top, children, found, shown, children_shown)


def render_page(
    top: Sequence[TaskRow],
    children: dict[str, list[TaskRow]],
    found: Sequence[Progress | None],
    shown: ShownTasks | None,
    children_shown: ShownTasks | None,
) -> list[Shown]:
    """The answers of top-level tasks and their children, given the progress `found` of
    each: the top-level tasks' in order, then each family's, in the order of `top`."""
    view = domain.view
    if not children:
        if shown is not None:
            json = shown.json
            return [json(row, progress) for row, progress in zip(top, found, strict=True)]
        return [view(row, progress) for row, progress in zip(top, found, strict=True)]
    page: list[Shown] = []
    at = len(top)  # where the next family's progress begins in `found`
    for index, row in enumerate(top):
        family = children.get(row.uuid)
        if not family:
            page.append(view(row, found[index]) if shown is None else shown.json(row, found[index]))
            continue
        pairs = list(zip(family, found[at : at + len(family)], strict=True))
        at += len(family)
        nested = None
        if children_shown is not None:
            nested = [children_shown.json(child, progress) for child, progress in pairs]
        page.append(view(row, found[index], pairs, nested))
    return page


async def _one(page: list[Shown]) -> AsyncIterator[list[Shown]]:
    """A read answered in one page, rendered already (see `SpaceReads.read`)."""
    if page:
        yield page


_WHOLE_NUMBER = re.compile(r"\+?[0-9]+")  # ASCII digits only: int() also reads "٣"
# A limit beyond any space's size means "all"; SQL integers stop at 2**63 - 1.
_MAX_LIMIT = 10**18


def parse_limit(value: int | str | None) -> int | None:
    """A read's `limit`, from a number or a query parameter's text; 400 unless a whole
    number of at least 1. Beyond any space's size, it means all."""
    if value is None:
        return None
    text = str(value).strip()
    digits = text.removeprefix("+").lstrip("0")
    if isinstance(value, bool) or not _WHOLE_NUMBER.fullmatch(text) or not digits:
        raise BadRequest(f"limit must be a whole number, at least 1, not {str(value)!r}.")
    return int(digits) if len(digits) <= 18 else _MAX_LIMIT


def _cursor(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        # A `before` finer than a microsecond lies after the microsecond it falls in.
        return domain.parse_ts(value, round_up=name == "before")
    except ValueError:
        raise BadRequest(
            f"{name} must be an RFC 3339 timestamp such as 2026-11-22T01:15:09.123456Z, "
            f"not {value!r}."
        ) from None
