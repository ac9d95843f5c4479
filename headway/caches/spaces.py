"""Small spaces held whole in memory: a read of a space of at most `SMALL_SPACE` tasks
takes no query.

A space's rows change only when a task is created in it, finishes or is removed; the
unit of work of each such write tells it after its commit (or failure, which may have
committed; see `service.unit`), and a load that raced with one is not kept
(`generation`, as in `caches.families`). Each entry also keeps the version of the
space's rows it was read at (`space_version_key`, read before the rows; see
`coherence`), and is used only while the space is still at that version, for at most
`caches.families.VERSIONED_MAX_AGE_US` (one process alone: a version that never moves).
With each row the entry keeps the JSON of its answer while the task's progress stays the
same object (the memory store replaces it on every write), so a read of an unchanged
task costs a lookup. Pages of bigger spaces, read from the database, reuse the answers
of their childless tasks the same way, for a bounded number of tasks (`ShownTasks`).

Every cache here is bounded in bytes as the process's memory holds them (rows as
`caches.families.row_bytes` counts them, answers at SHOWN_BYTES plus their JSON): small
spaces with their answers SPACES_BYTES, big spaces' pages PAGES_BYTES, the answers of
big spaces' tasks SHOWN_TASKS_BYTES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from typing import ClassVar

import msgspec

from ..domain.tasks import Changed, FamilyVersion, Progress, TaskRow, TaskView, view, view_json
from ..storage.database import Fetch
from ..storage.pages import Window, families_of, space_has_children, space_rows
from .bounded import Bounded, Cache
from .families import KEPT_JSON_BYTES, ROW_BYTES, SHOWN_BYTES, VERSIONED_MAX_AGE_US, row_bytes

# Spaces of at most this many tasks are held whole; bigger ones are read page by page.
SMALL_SPACE = 1000
# Small spaces' rows and their answers held in all: the least recently read spaces go
# first (about 50,000 rows of short titles).
SPACES_BYTES = 16 * 1024**2
# Answers of tasks of big spaces held (`ShownTasks`): about 16,000 of 0.5 KB.
SHOWN_TASKS_BYTES = 8 * 1024**2


def space_version_key(space_uuid: str) -> str:
    """The name under which a space's rows are versioned among the families' versions
    (see `coherence.FamilyVersions`): no task uuid has this form."""
    return "space:" + space_uuid


class ShownTasks(Cache):
    """The JSON of childless tasks' answers as last made, by uuid (a small space's, or
    those shown in pages of big spaces): reused while the task's progress is the same
    object (the memory store replaces it on every write) and its row has not finished
    since, so a page read again costs a lookup per unchanged task. At most `held` of
    them, holding at most `max_bytes` (each SHOWN_BYTES plus its JSON): past either, the
    eighth made longest ago are dropped. Tasks holding large values are not kept (see
    `caches.families.KEPT_JSON_BYTES`). `on_grow`, if given, hears every change of
    `bytes_held` (a small space's answers count in its space's bytes)."""

    # An entry checks its progress and finish on every use: no change makes it stale.
    hears: ClassVar[frozenset[Changed]] = frozenset()

    def __init__(
        self,
        held: int | None = None,
        max_bytes: int = SHOWN_TASKS_BYTES,
        on_grow: Callable[[int], None] | None = None,
    ) -> None:
        self._on_grow = on_grow
        self._entries: Bounded[str, tuple[Progress | None, int | None, msgspec.Raw]] = Bounded(
            count=held,
            max_bytes=max_bytes,
            size=lambda made: SHOWN_BYTES + len(made[2]),
            keep=7 / 8,
        )

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """Nothing to drop (see `hears`)."""

    def __len__(self) -> int:
        return len(self._entries)

    def json(self, row: TaskRow, progress: Progress | None) -> msgspec.Raw | TaskView:
        """The task's answer: its JSON, kept, or for large values its struct (see
        `caches.families.KEPT_JSON_BYTES`)."""
        entries = self._entries
        made = entries.get(row.uuid)
        if made is not None and made[0] is progress and made[1] == row.finished_at_us:
            return made[2]
        before = entries.bytes_held
        answer: msgspec.Raw | TaskView
        if progress is not None and len(progress.values) > KEPT_JSON_BYTES:
            entries.pop(row.uuid)
            answer = view(row, progress)
        else:
            answer = view_json(row, progress)
            entries.put(row.uuid, (progress, row.finished_at_us, answer))  # now the newest
        if self._on_grow is not None and entries.bytes_held != before:
            self._on_grow(entries.bytes_held - before)
        return answer


@dataclass
class SmallSpace:
    """A space's top-level tasks (oldest first), their children (oldest first) by
    parent, the JSON of the answers last made for childless tasks, and what its rows
    cost (`caches.families.row_bytes`)."""

    top: list[TaskRow]
    children: dict[str, list[TaskRow]]
    rows: int
    rows_bytes: int = 0
    shown: ShownTasks = field(default_factory=lambda: ShownTasks(SMALL_SPACE))

    def rows_of(self, window: Window) -> tuple[list[TaskRow], dict[str, list[TaskRow]]]:
        """The top-level tasks a read of `window` answers, and the children by parent."""
        return window.select(self.top), self.children


@dataclass(slots=True, eq=False)
class BigSpace:
    """A space known to be larger than SMALL_SPACE (spaces never shrink), and whether it
    is known to hold no child task: its pages then need no query for children.
    `version` moves with each create or finish in it: pages read before are stale."""

    childless: bool
    version: int = 0


# Rows of big spaces' pages held (`SmallSpaces.page`), as `row_bytes` counts them.
PAGES_BYTES = 4 * 1024**2
# A page holding more rows than this (its tasks' children count) is not held.
PAGE_ROWS_MOST = 1_000
Page = tuple[list[TaskRow], dict[str, list[TaskRow]]]


class SmallSpaces(Cache):
    """Small spaces by uuid, least recently read first, and big ones (`BigSpace`):
    small spaces' rows and answers hold at most `max_bytes`, big spaces' pages at most
    `page_bytes`."""

    # A space's rows change when a task is created in it, finishes or is deleted.
    hears: ClassVar[frozenset[Changed]] = frozenset(
        {Changed.CREATE, Changed.FINISH, Changed.DELETE, Changed.PRUNE, Changed.DROP}
    )

    def __init__(
        self,
        small: int = SMALL_SPACE,
        max_bytes: int = SPACES_BYTES,
        page_bytes: int = PAGES_BYTES,
    ) -> None:
        self._small = small
        self._max_bytes = max_bytes
        # Small spaces' rows and answers count; the spaces read longest ago go first.
        self._entries: Bounded[str, SmallSpace | BigSpace] = Bounded(
            max_bytes=max_bytes, size=_space_bytes, on_drop=self._dropped
        )
        # Each entry's (version of its rows, when they were read, in µs).
        self._stamps: dict[str, tuple[FamilyVersion, int]] = {}
        # Whole answers of big spaces' windows, oldest first: (space, its version, page,
        # its bytes).
        self._pages: Bounded[Window, tuple[BigSpace, int, Page, int]] = Bounded(
            max_bytes=page_bytes, size=lambda held: held[3]
        )

    @property
    def page_bytes_held(self) -> int:
        return self._pages.bytes_held

    def page(self, big: BigSpace, window: Window) -> Page | None:
        """The rows a read of `window` in the big space answers (its top-level tasks and
        their children, as `pages.TopLevelPager` pages them), if held and still
        current; else None."""
        held = self._pages.get(window)
        if held is None:
            return None
        if held[0] is big and held[1] == big.version:
            return held[2]
        self._pages.pop(window)
        return None

    def keep_page(self, big: BigSpace, version: int, window: Window, page: Page) -> None:
        """Hold `page`, the whole answer to `window`, read while the big space was at
        `version` (kept only if nothing was created or finished there since)."""
        if big.version != version or self._entries.get(window.space_uuid) is not big:
            return
        if len(page[0]) + sum(map(len, page[1].values())) > PAGE_ROWS_MOST:
            return
        # An empty page counts as a row: the bound holds however many are read.
        size = sum(map(row_bytes, chain(page[0], *page[1].values())))
        self._pages.put(window, (big, version, page, max(size, ROW_BYTES)))

    def get(
        self, space_uuid: str, version: FamilyVersion | None = None, now_us: int = 0
    ) -> SmallSpace | BigSpace | None:
        """The space's entry; with a `version` (read just now), only if its rows were
        read at that version less than `VERSIONED_MAX_AGE_US` ago (else it is dropped)."""
        if space_uuid not in self._entries:
            return None
        if version is not None:
            stamp = self._stamps.get(space_uuid)
            if stamp is None or stamp[0] != version or now_us - stamp[1] >= VERSIONED_MAX_AGE_US:
                self._drop(space_uuid)  # a big space's pages go with it (`page`)
                return None
        return self._entries.touch(space_uuid)

    async def load(
        self,
        fetch: Fetch,
        space_uuid: str,
        version: FamilyVersion | None = None,
        now_us: int = 0,
    ) -> SmallSpace | BigSpace:
        """Read the space's rows, and keep them if it is small and nothing changed
        meanwhile; returns the entry, a `BigSpace` if it is big. `version`: the version
        of the space's rows, read before this (see `get`)."""
        generation = self.generation
        found = await space_rows(fetch, space_uuid, self._small + 1)
        if len(found) > self._small:
            child = await space_has_children(fetch, space_uuid)
            # A child created meanwhile may not be in what was read: not known childless.
            big = BigSpace(childless=not child and generation == self.generation)
            self._hold(space_uuid, big, None, version, now_us)
            return big
        top, children = families_of(space_uuid, found)
        rows_bytes = sum(map(row_bytes, chain(top, *children.values())))
        entry = SmallSpace(top, children, len(found), rows_bytes)

        def grew(size: int) -> None:  # its answers count while it is held
            if self._entries.get(space_uuid) is entry:
                self._entries.grew(size)

        entry.shown = ShownTasks(self._small, self._max_bytes, grew)
        self._hold(space_uuid, entry, generation, version, now_us)
        return entry

    def _hold(
        self,
        space_uuid: str,
        entry: SmallSpace | BigSpace,
        generation: int | None,
        version: FamilyVersion | None,
        now_us: int,
    ) -> None:
        """Hold `entry` (read while `generation` was current) at `version`."""
        if generation is not None and generation != self.generation:
            return
        self._stamps.pop(space_uuid, None)
        if self._entries.put(space_uuid, entry) and version is not None:
            self._stamps[space_uuid] = (version, now_us)

    def _dropped(self, space_uuid: str, _entry: SmallSpace | BigSpace) -> None:
        self._stamps.pop(space_uuid, None)

    def _drop(self, space_uuid: str) -> None:
        self._entries.pop(space_uuid)
        self._stamps.pop(space_uuid, None)

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """After a create, a finish or a delete in the space committed (or may have), or
        the space's delete."""
        self._entries.forget()  # the generation moves on
        entry = self._entries.get(space_uuid)
        if kind is Changed.DROP or isinstance(entry, SmallSpace):
            self._drop(space_uuid)
        elif entry is not None:  # still big
            self._entries.touch(space_uuid)
            if kind is Changed.CREATE and parent_uuid is not None:  # a child task
                entry.childless = False
            entry.version += 1  # its pages held are stale


def _space_bytes(entry: SmallSpace | BigSpace) -> int:
    """What a held space costs: a small one's rows and answers; a big one, nothing."""
    return entry.rows_bytes + entry.shown.bytes_held if isinstance(entry, SmallSpace) else 0
