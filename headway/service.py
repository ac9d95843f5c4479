"""The use cases of Headway, each one transaction: create and read spaces and tasks,
and report progress. REST and MCP both call these and nothing else."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from . import domain, webhooks
from .clock import Clock
from .completion import completion_event
from .domain import Progress, Report, TaskRow, canonical_uuid, task_view
from .errors import BadRequest, HeadwayError, NotFound, Unprocessable
from .progress import ProgressStore
from .progress.feed import REVOKED, TASK, Change, ChangeFeed
from .schemas import MAX_ICON, CreateSpace, CreateTask, CreateWebhook
from .storage import outbox, queries, shares
from .storage.batch import GroupCommit
from .storage.database import Database, Statements
from .storage.families import FamilyCache, FamilyVersion, FamilyVersions
from .storage.small_spaces import BigSpace, Page, ShownTasks, SmallSpace, SmallSpaces

Family = list[tuple[TaskRow, Progress | None]]

# Top-level tasks read at a time for a space read (their children come with them): the
# first page, then twice as many each page up to MAX_SPACE_PAGE, so that a small read is
# one small query and a whole big space takes few round trips.
SPACE_PAGE = 200
MAX_SPACE_PAGE = 3200
# Pages of at most this many top-level tasks (a read with a `limit`, as a dashboard
# polls) reuse their tasks' answers; a read of a whole big space would only churn them.
SHOWN_PAGE = 100
# Spaces whose `{"title", "icon"}` are kept: a space never changes them and is never
# deleted, so a read of a space seen before needs no query for them.
SPACE_HEADS = 10_000
# A report whose cached family keeps changing under it reloads it this many times, then
# writes without the version check (as without a cache: read the family, then write).
FAMILY_RELOADS = 3


class Service:
    """Headway's rules applied to storage: the database holds spaces and tasks, the
    progress store holds live state, and the outbox holds completion events."""

    def __init__(
        self,
        db: Database,
        progress: ProgressStore,
        clock: Clock,
        *,
        allow_private_webhooks: bool = False,
        webhooks_per_space: int = 20,
        families: FamilyCache | None = None,
        feed: ChangeFeed | None = None,
        shares_per_space: int = 100,
    ) -> None:
        self.db = db
        self.progress = progress
        self.clock = clock
        # Unversioned only for a process that is the only one serving; versioned, its
        # versions live in the progress store (see storage.families).
        self.families = families
        self._versions: FamilyVersions | None = None
        if families is not None and families.versioned:
            self._versions = cast(FamilyVersions, progress)
        # Small spaces held whole, where this process is the only writer (as `families`).
        self._small = SmallSpaces() if families is not None and not families.versioned else None
        self._shown = ShownTasks() if self._small is not None else None
        self.allow_private_webhooks = allow_private_webhooks
        self.webhooks_per_space = webhooks_per_space
        self.shares_per_space = shares_per_space
        # Told of every change to a task, after it is stored (see progress.feed).
        self.feed = feed
        # Called after a transaction that recorded an event commits (wakes the worker).
        self.on_event: Callable[[], None] = lambda: None
        self._space_heads: dict[str, dict[str, str | None]] = {}
        # Concurrent creates share a transaction and its commit (see storage.batch).
        self._space_creates = GroupCommit(db, self._insert_spaces)
        self._task_creates = GroupCommit(db, self._insert_tasks, after=self._forget_parents)

    # --- Spaces ---------------------------------------------------------------------------

    async def create_space(self, body: CreateSpace) -> dict[str, Any]:
        if body.icon is not None and (
            len(body.icon) > MAX_ICON or domain.grapheme_count(body.icon) != 1
        ):
            raise Unprocessable("icon must be exactly one character (one emoji or letter).")
        space_uuid = str(uuid.uuid4())
        await self._space_creates.submit(queries.NewSpace(space_uuid, body.title, body.icon))
        return {"uuid": space_uuid, "title": body.title, "icon": body.icon}

    async def _insert_spaces(
        self, st: Statements, new: Sequence[queries.NewSpace]
    ) -> list[Exception | None]:
        await queries.insert_spaces(st, new, self.clock.now_us())
        return [None] * len(new)

    async def get_space(
        self,
        space_uuid: str,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int | str | None = None,
        state: str | None = None,
    ) -> dict[str, Any]:
        """A space with its top-level tasks (see `queries.TopLevelPager` for the order).

        `limit` may be a number or the text of a query parameter; both are checked alike.
        """
        head, pages = await self.read_space(
            space_uuid, before=before, after=after, limit=limit, state=state
        )
        return {**head, "tasks": [task async for page in pages for task in page]}

    async def read_space(
        self,
        space_uuid: str,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int | str | None = None,
        state: str | None = None,
    ) -> tuple[dict[str, Any], AsyncIterator[list[domain.TaskView | msgspec.Raw]]]:
        """A space read as its `{"title", "icon"}` and its tasks, a page at a time (each
        task as its answer's struct, or as its JSON already made: `msgspec.Raw`).

        Every bad parameter and an unknown space raise here, and the first page is read
        here too, so a database that is down fails the read before any byte is sent.
        The other pages are read as they are consumed, each on a connection of its own,
        so a reader that stops reading holds one page and no connection.
        """
        before_us = _cursor("before", before)
        after_us = _cursor("after", after)
        count = parse_limit(limit)
        if state is not None and state not in ("active", "finished"):
            raise BadRequest(f"state must be active or finished, not {state!r}.")
        key = canonical_uuid(space_uuid)
        if key is None:
            raise NotFound(_NO_SPACE)
        window = queries.Window(key, before_us, after_us, count, cast(queries.State | None, state))
        head = self._space_heads.get(key)
        small = None if self._small is None else self._small.get(key)
        if head is not None and isinstance(small, SmallSpace):
            return head, self._small_space_page(small, window)
        if head is not None and isinstance(small, BigSpace):
            assert self._small is not None
            held = self._small.page(small, window)
            if held is not None:
                return head, self._held_page(held)
        async with self.db.rows() as fetch:
            if head is None:
                space = await queries.space_head(fetch, key)
                if space is None:
                    raise NotFound(_NO_SPACE)
                head = self._remember_space(key, *space)
            if self._small is not None and small is None:
                small = await self._small.load(fetch, key)
            if isinstance(small, SmallSpace):
                return head, self._small_space_page(small, window)
            big = small if isinstance(small, BigSpace) else None
            version = 0 if big is None else big.version  # as the rows are read
            pager = await queries.TopLevelPager.start(
                fetch,
                window,
                SPACE_PAGE,
                MAX_SPACE_PAGE,
                childless=big is not None and big.childless,
            )
            first = await pager.next_page(fetch)
        if big is not None and pager.exhausted:
            assert self._small is not None
            self._small.keep_page(big, version, window, first)  # the whole answer
        return head, self._space_pages(pager, first)

    async def _held_page(self, page: Page) -> AsyncIterator[list[domain.TaskView | msgspec.Raw]]:
        """A read of a big space answered by a page held (see `SmallSpaces.page`)."""
        if page[0]:
            yield await self._page_views(*page)

    async def _small_space_page(
        self, small: SmallSpace, window: queries.Window
    ) -> AsyncIterator[list[domain.TaskView | msgspec.Raw]]:
        """A read of a space held whole: one page, each childless task's JSON reused
        while its progress is unchanged (see `storage.small_spaces`)."""
        top = small.window(window)
        if not top:
            return
        uuids = [row.uuid for row in top]
        families = small.children
        for row in top:
            family = families.get(row.uuid)
            if family:
                uuids.extend(child.uuid for child in family)
        found = await self.progress.get_many(uuids)
        page: list[domain.TaskView | msgspec.Raw] = []
        at = len(top)  # where the next family's progress begins in `found`
        for index, row in enumerate(top):
            family = families.get(row.uuid)
            if not family:
                page.append(small.json(row, found[index]))
                continue
            held = found[at : at + len(family)]
            at += len(family)
            pairs = list(zip(family, held, strict=True))
            shown = [small.json(child, progress) for child, progress in pairs]
            page.append(domain.view(row, found[index], pairs, shown))
        yield page

    async def space_head(self, space_uuid: str) -> dict[str, str | None]:
        """A space's `{"title", "icon"}`; NotFound if there is no such space."""
        key = canonical_uuid(space_uuid)
        if key is None:
            raise NotFound(_NO_SPACE)
        head = self._space_heads.get(key)
        if head is None:
            async with self.db.rows() as fetch:
                space = await queries.space_head(fetch, key)
            if space is None:
                raise NotFound(_NO_SPACE)
            head = self._remember_space(key, *space)
        return head

    def _remember_space(
        self, key: str, title: str | None, icon: str | None
    ) -> dict[str, str | None]:
        heads = self._space_heads
        if len(heads) >= SPACE_HEADS:
            del heads[next(iter(heads))]  # the longest held
        head = heads[key] = {"title": title, "icon": icon}
        return head

    async def _space_pages(
        self, pager: queries.TopLevelPager, page: tuple[list[TaskRow], dict[str, list[TaskRow]]]
    ) -> AsyncIterator[list[domain.TaskView | msgspec.Raw]]:
        while True:
            top, children = page
            if not top:
                return
            yield await self._page_views(top, children)
            if pager.exhausted:
                return
            async with self.db.rows() as fetch:
                page = await pager.next_page(fetch)

    async def _page_views(
        self, top: list[TaskRow], children: dict[str, list[TaskRow]]
    ) -> list[domain.TaskView | msgspec.Raw]:
        """The answers for a page of top-level tasks and their children (a childless
        task's as its JSON, where a small page reuses it: see `ShownTasks`)."""
        uuids = [row.uuid for row in top]
        for family in children.values():
            uuids.extend(child.uuid for child in family)
        found = await self.progress.get_many(uuids)
        view = domain.view
        if not children:
            if self._shown is not None and len(top) <= SHOWN_PAGE:
                shown = self._shown.json
                return [shown(row, progress) for row, progress in zip(top, found, strict=True)]
            return [view(row, progress) for row, progress in zip(top, found, strict=True)]
        progress_of = dict(zip(uuids, found, strict=True))
        return [
            view(
                row,
                progress_of[row.uuid],
                [(child, progress_of[child.uuid]) for child in children.get(row.uuid, ())],
            )
            for row in top
        ]

    # --- Tasks ----------------------------------------------------------------------------

    async def create_task(self, space_uuid: str, body: CreateTask) -> dict[str, Any]:
        """Create a task; answered once the commit holding it is durable. Concurrent
        creates share that commit (see `_insert_tasks`)."""
        space_key = canonical_uuid(space_uuid)
        if space_key is None:
            raise NotFound(_NO_SPACE)
        parent_key = None
        if body.parent_uuid is not None:
            parent_key = canonical_uuid(body.parent_uuid)
            if parent_key is None:
                raise Unprocessable(_NOT_A_PARENT)
        task_uuid = str(uuid.uuid4())
        new = _NewTask(task_uuid, space_key, parent_key, body.title, body.source)
        try:
            await self._task_creates.submit(new)
        except HeadwayError:
            raise  # refused: nothing was written
        except BaseException:
            await self._bump(parent_key)  # the batch may have committed all the same
            raise
        await self._bump(parent_key)
        self._changed(space_key, task_uuid, parent_key)
        return {"uuid": task_uuid}

    async def _insert_tasks(
        self, st: Statements, batch: Sequence[_NewTask]
    ) -> list[TaskRow | HeadwayError]:
        """Write a batch of creates in one transaction. A create refused for its own reason
        (unknown space 404, bad parent 422) is refused alone, before anything is written
        for it; the others of a space get its next instants, in the order they arrived."""
        wanted = {new.parent_uuid for new in batch if new.parent_uuid is not None}
        parents = await queries.tasks_by_uuid(st, wanted)
        refused: dict[int, HeadwayError] = {}
        by_space: dict[str, list[int]] = defaultdict(list)
        for index, new in enumerate(batch):
            by_space[new.space_uuid].append(index)
            if new.parent_uuid is not None:
                refusal = _parent_refusal(parents.get(new.parent_uuid), new.space_uuid)
                if refusal is not None:
                    refused[index] = refusal
        now_us = self.clock.now_us()
        outcomes: dict[int, TaskRow | HeadwayError] = {}
        rows: list[TaskRow] = []
        # Spaces in one fixed order: on PostgreSQL, batches on several instances take
        # their spaces' row locks (the claims) in the same order, so never deadlock.
        for space_key in sorted(by_space):
            members = by_space[space_key]
            accepted = [index for index in members if index not in refused]
            if accepted:
                first_us = await queries.claim_created_at(st, space_key, now_us, len(accepted))
            else:  # only refusals: which one depends on whether the space exists
                first_us = 0 if await queries.space_exists(st, space_key) else None
            if first_us is None:
                for index in members:
                    outcomes[index] = NotFound(_NO_SPACE)  # before any parent's refusal
                continue
            for index in members:
                if index in refused:
                    outcomes[index] = refused[index]
            for offset, index in enumerate(accepted):
                new = batch[index]
                row = TaskRow(
                    new.uuid,
                    space_key,
                    new.parent_uuid,
                    new.title,
                    new.source,
                    first_us + offset,
                )
                outcomes[index] = row
                rows.append(row)
        if rows:
            await queries.insert_tasks(st, rows)
        return [outcomes[index] for index in range(len(batch))]

    def _forget_parents(self, batch: Sequence[_NewTask]) -> None:
        # After the batch's commit or its failure (it may have committed all the same):
        # a cached parent must not stay without its new child, nor a space without it.
        parents = {new.parent_uuid for new in batch if new.parent_uuid is not None}
        if parents:
            self._forget(*parents)
        if self._small is not None:
            self._small.forget(*{new.space_uuid for new in batch if new.parent_uuid is None})
            self._small.forget(
                *{new.space_uuid for new in batch if new.parent_uuid is not None}, children=True
            )

    async def get_task(self, task_uuid: str) -> domain.TaskView:
        if self._versions is not None:  # a read checks no version: read the database
            row, children = await self._read_family(task_uuid)
        else:
            row, children = await self._family(task_uuid)
        if not children:
            return domain.view(row, await self.progress.get(row.uuid))
        if self.families is not None:
            uuids = self.families.uuids(row, children)
        else:
            uuids = [row.uuid, *(child.uuid for child in children)]
        found = await self.progress.get_many(uuids)
        return self._view(row, found[0], children, found[1:])

    def _view(
        self,
        row: TaskRow,
        progress: Progress | None,
        children: Sequence[TaskRow],
        found: Sequence[Progress | None],
    ) -> domain.TaskView:
        """The answer for a parent, its children's JSON and aggregate reused from the
        family cache where it holds them (see `storage.families`)."""
        if self.families is not None:
            made = self.families.children_answer(row.uuid, children, found)
            if made is not None:
                return domain.view(row, progress, (), made.shown, (made.done, made.latest_us))
        return domain.view(row, progress, list(zip(children, found, strict=True)))

    async def report(self, task_uuid: str, report: Report) -> domain.TaskView:
        """Replace a task's live state with `report`; finish the task if the report says so.

        Finishing is decided by a conditional update in the database, so of several
        concurrent finishing reports exactly one records the completion and its event.
        A report that does not finish its task writes nothing to the database.
        """
        if self._versions is None:
            row, children = await self._family(task_uuid)
            return await self._report(row, children, report)
        # Versioned cache (several instances): the write of a report that finishes nothing
        # checks, in the same round trip, that the family it was decided on is current.
        cache = cast(FamilyCache, self.families)
        versions = self._versions
        key = canonical_uuid(task_uuid)
        if key is None:
            raise NotFound(_NO_TASK)
        cached = cache.get_versioned(key, self.clock.now_us())
        seen: FamilyVersion | None = None  # a version the failed write saw, read before any SQL
        for _ in range(FAMILY_RELOADS):
            if cached is None:
                version = await versions.family_version(key) if seen is None else seen
                row, children = await self._read_family(key)
                cache.put_versioned((row, children), version, self.clock.now_us())
                fresh = True
            else:
                row, children, version = cached
                fresh = False
            try:
                return await self._report(row, children, report, version, fresh=fresh)
            except _FamilyChanged as changed:
                seen, cached = changed.version, None
        row, children = await self._read_family(key)
        return await self._report(row, children, report)

    async def _report(
        self,
        row: TaskRow,
        children: Sequence[TaskRow],
        report: Report,
        version: FamilyVersion | None = None,
        *,
        fresh: bool = True,
    ) -> domain.TaskView:
        """`report` applied to the family `row`, `children`. With a `version` (the family
        as cached at that version), raises `_FamilyChanged` having written nothing if the
        family is no longer at it, or if the report finishes the task and the family did
        not come `fresh` from the database (a finish is decided on the database's rows)."""
        # Only `{"done": true}` keeps anything of the last report; others replace it all.
        previous = await self.progress.get(row.uuid) if report.is_done_only else None
        now_us = self.clock.now_us()
        progress, finishing = domain.apply_report(
            previous, report, now_us, is_parent=bool(children)
        )
        family: Family = []
        found: list[Progress | None] = []
        if children:
            found = await self.progress.get_many([c.uuid for c in children])
            family = list(zip(children, found, strict=True))
        # Refused before anything is written, a finish included.
        self.progress.admit(row.uuid, row.space_uuid, progress)
        if finishing and not row.finished:
            if not fresh:
                raise _FamilyChanged(None)
            row = await self._finish(row, progress, family, now_us)
            if report.is_done_only:
                # Finishing waited on the database; a report that landed meanwhile holds
                # the last numbers now, and `{"done": true}` keeps the last numbers.
                latest = await self.progress.get(row.uuid)
                if latest is not previous:
                    progress, _ = domain.apply_report(
                        latest, report, now_us, is_parent=bool(children)
                    )
            await self.progress.put(row.uuid, progress, row.space_uuid)
        elif version is None:
            await self.progress.put(row.uuid, progress, row.space_uuid)
        else:
            # The change is announced to the other instances by the write itself.
            change = Change(TASK, row.space_uuid, row.uuid, row.parent_uuid)
            note = None if self.feed is None else self.feed.announcement(change)
            versions = cast(FamilyVersions, self._versions)
            current = await versions.put_if_family(
                row.uuid, progress, row.space_uuid, version, note
            )
            if current is not None:
                raise _FamilyChanged(current)
            if self.feed is not None:
                self.feed.publish(change, announced=note is not None)
            return self._answer(row, progress, children, found)
        self._changed(row.space_uuid, row.uuid, row.parent_uuid)
        return self._answer(row, progress, children, found)

    def _answer(
        self,
        row: TaskRow,
        progress: Progress,
        children: Sequence[TaskRow],
        found: Sequence[Progress | None],
    ) -> domain.TaskView:
        """The answer to a report: the task as it now stands."""
        if children:
            return self._view(row, progress, children, found)
        return domain.view(row, progress)

    def _changed(self, space_uuid: str, task_uuid: str, parent_uuid: str | None) -> None:
        """Tell the feed a task changed (its parent's aggregate with it); never waits."""
        if self.feed is not None:
            self.feed.publish(Change(TASK, space_uuid, task_uuid, parent_uuid))

    async def event_view(self, task_uuid: str) -> domain.TaskView | None:
        """A task as the live stream shows it: as `get_task` answers, but with no
        children (each child is an event of its own); None if there is no such task."""
        try:
            if self._versions is not None:
                row, children = await self._read_family(task_uuid)
            else:
                row, children = await self._family(task_uuid)
        except NotFound:
            return None
        found = await self.progress.get_many([row.uuid, *(c.uuid for c in children)])
        if not children:
            return domain.view(row, found[0])
        return domain.view(row, found[0], list(zip(children, found[1:], strict=True)), [])

    async def _read_family(self, task_uuid: str) -> tuple[TaskRow, Sequence[TaskRow]]:
        """The family as the database holds it now, bypassing any cache."""
        key = canonical_uuid(task_uuid)
        if key is None:
            raise NotFound(_NO_TASK)
        row, children = await queries.read_family(self.db.fetch, key)
        if row is None:
            raise NotFound(_NO_TASK)
        return row, children

    async def _bump(self, *task_uuids: str | None) -> None:
        """After a change to these families committed (or may have), before the request
        that made it answers: other instances' cached copies are stale from now on."""
        if self._versions is not None:
            await self._versions.bump_families(*task_uuids)

    async def _family(self, task_uuid: str) -> tuple[TaskRow, Sequence[TaskRow]]:
        key = canonical_uuid(task_uuid)
        if key is None:
            raise NotFound(_NO_TASK)
        cache = self.families
        if cache is not None:
            cached = cache.get(key)
            if cached is not None:
                return cached
            generation = cache.generation
        row, children = await queries.read_family(self.db.fetch, key)
        if row is None:
            raise NotFound(_NO_TASK)
        if cache is not None:
            cache.put((row, children), generation)
        return row, children

    def _forget(self, *task_uuids: str | None) -> None:
        if self.families is not None:
            self.families.forget(*task_uuids)

    async def _finish(
        self, row: TaskRow, progress: Progress, family: Family, now_us: int
    ) -> TaskRow:
        """Record the completion of `row` (and of its parent, if it was the last open
        child), with one outbox event each. Returns the row as it now stands."""
        duration = domain.duration_seconds(row.created_at_us, now_us)
        try:
            finished = await self._record_finish(row, progress, family, now_us, duration)
        except BaseException:
            self._forget(row.uuid, row.parent_uuid)
            if self._small is not None:
                self._small.forget(row.space_uuid)
            await self._bump(row.uuid, row.parent_uuid)  # it may have committed
            raise
        self._forget(row.uuid, row.parent_uuid)
        if self._small is not None:
            self._small.forget(row.space_uuid)
        # The parent's too: its cached children rows changed, and it may have finished.
        await self._bump(row.uuid, row.parent_uuid)
        return finished

    async def _record_finish(
        self, row: TaskRow, progress: Progress, family: Family, now_us: int, duration: int
    ) -> TaskRow:
        async with self.db.write() as conn:
            if row.parent_uuid is not None:
                await queries.lock_task(conn, row.parent_uuid)
            if not await queries.finish_task(conn, row.uuid, now_us, duration):
                # Another report finished it first; its finish time stands.
                return await queries.get_task(conn, row.uuid) or row
            row = msgspec.structs.replace(row, finished_at_us=now_us, duration=duration)
            await self._record_event(conn, task_view(row, progress, family), now_us)
            if row.parent_uuid is not None:
                await self._finish_parent_if_done(conn, row, progress, now_us)
        self.on_event()
        return row

    async def _finish_parent_if_done(
        self, conn: Any, child: TaskRow, child_progress: Progress, now_us: int
    ) -> None:
        parent_uuid = child.parent_uuid
        assert parent_uuid is not None
        # Read after this child's finish, under the parent's row lock (see `_record_finish`).
        parent, siblings = await queries.get_family(conn, parent_uuid)
        if parent is None or any(not sibling.finished for sibling in siblings):
            return
        duration = domain.duration_seconds(parent.created_at_us, now_us)
        if not await queries.finish_task(conn, parent.uuid, now_us, duration):
            return
        parent = msgspec.structs.replace(parent, finished_at_us=now_us, duration=duration)
        found = await self.progress.get_many([parent.uuid, *(s.uuid for s in siblings)])
        family = [
            (s, child_progress if s.uuid == child.uuid else p)
            for s, p in zip(siblings, found[1:], strict=True)
        ]
        await self._record_event(conn, task_view(parent, found[0], family), now_us)

    async def _record_event(self, conn: Any, task: dict[str, Any], now_us: int) -> None:
        """Write the completion event (bounded in size: see `completion_event`) and queue
        it for every webhook of the space."""
        event_id = f"msg_{uuid.uuid4().hex}"
        payload = completion_event(task, now_us)
        await queries.insert_event(
            conn, event_id, task["space_uuid"], task["uuid"], payload, now_us
        )
        await outbox.fan_out(conn, event_id, task["space_uuid"], now_us)

    # --- Webhooks -------------------------------------------------------------------------

    async def create_webhook(self, space_uuid: str, body: CreateWebhook) -> dict[str, Any]:
        """Register a webhook; the answer holds its signing secret, shown only here."""
        space_key = await self._existing_space(space_uuid)
        url = webhooks.check_url_syntax(body.url)
        try:
            await webhooks.check_destination(url, allow_private=self.allow_private_webhooks)
        except webhooks.RefusedAddress as exc:
            raise Unprocessable(
                f"url is refused: {exc}. Webhooks must reach a public address."
            ) from None
        webhook_uuid, secret = str(uuid.uuid4()), webhooks.new_secret()
        cap = self.webhooks_per_space
        async with self.db.write() as conn:  # spaces are never deleted: it still exists
            if not await outbox.insert_webhook(
                conn, webhook_uuid, space_key, body.url, secret, self.clock.now_us(), cap=cap
            ):
                raise Unprocessable(f"A space holds at most {cap} webhooks; delete one first.")
        return {"uuid": webhook_uuid, "url": body.url, "secret": secret}

    async def list_webhooks(self, space_uuid: str) -> list[dict[str, str]]:
        space_key = await self._existing_space(space_uuid)
        async with self.db.read() as conn:
            found = await outbox.list_webhooks(conn, space_key)
        return [{"uuid": hook, "url": url} for hook, url in found]

    async def delete_webhook(self, space_uuid: str, webhook_uuid: str) -> None:
        space_key = await self._existing_space(space_uuid)
        hook = canonical_uuid(webhook_uuid)
        async with self.db.write() as conn:
            if hook is None or not await outbox.delete_webhook(conn, space_key, hook):
                raise NotFound("No such webhook in this space.")

    # --- Share links ----------------------------------------------------------------------

    async def create_share(self, space_uuid: str) -> dict[str, str]:
        """A new read-only link to the space."""
        space_key = await self._existing_space(space_uuid)
        share_uuid = str(uuid.uuid4())
        cap = self.shares_per_space
        now_us = self.clock.now_us()
        async with self.db.write() as conn:
            if not await shares.insert_share(conn, share_uuid, space_key, now_us, cap=cap):
                raise Unprocessable(f"A space holds at most {cap} share links; revoke one first.")
        return {
            "uuid": share_uuid,
            "url": f"/shared/{share_uuid}",
            "created_at": domain.format_ts(now_us),
        }

    async def list_shares(self, space_uuid: str) -> list[dict[str, str]]:
        space_key = await self._existing_space(space_uuid)
        async with self.db.read() as conn:
            found = await shares.list_shares(conn, space_key)
        return [
            {"uuid": share, "url": f"/shared/{share}", "created_at": domain.format_ts(created)}
            for share, created in found
        ]

    async def delete_share(self, space_uuid: str, share_uuid: str) -> None:
        """Revoke a share link; its open streams end (see progress.feed `REVOKED`)."""
        space_key = await self._existing_space(space_uuid)
        share_key = canonical_uuid(share_uuid)
        async with self.db.write() as conn:
            if share_key is None or not await shares.delete_share(conn, space_key, share_key):
                raise NotFound("No such share link in this space.")
        if self.feed is not None:
            self.feed.publish(Change(REVOKED, space_key, share_key))

    async def space_of_share(self, share_uuid: str) -> str:
        """The uuid of the space a share link shows; NotFound if it was revoked or never
        existed."""
        key = canonical_uuid(share_uuid)
        if key is not None:
            async with self.db.read() as conn:
                space = await shares.space_of_share(conn, key)
            if space is not None:
                return space
        raise NotFound(_NO_SHARE)

    async def _existing_space(self, space_uuid: str) -> str:
        key = canonical_uuid(space_uuid)
        if key is not None:
            async with self.db.read() as conn:
                if await queries.get_space(conn, key) is not None:
                    return key
        raise NotFound(_NO_SPACE)


_NO_SPACE = "No such space: check the space uuid."
_NO_TASK = "No such task: check the task uuid."
_NO_SHARE = "No such share link: it was revoked, or never existed."
_NOT_A_PARENT = "parent_uuid is not a task of this space."


class _FamilyChanged(Exception):
    """A report's family changed since it was cached (`version`: its version now, if
    known); nothing was written, and the report is decided again on a fresh family."""

    def __init__(self, version: FamilyVersion | None) -> None:
        super().__init__(version)
        self.version = version


@dataclass(frozen=True, slots=True)
class _NewTask:
    """A create waiting for its batch: everything but its instant, which the batch claims."""

    uuid: str
    space_uuid: str
    parent_uuid: str | None
    title: str | None
    source: str | None


def _parent_refusal(parent: TaskRow | None, space_uuid: str) -> HeadwayError | None:
    """Why `parent` cannot take a child in the space, or None if it can."""
    if parent is None or parent.space_uuid != space_uuid:
        return Unprocessable(_NOT_A_PARENT)
    if parent.parent_uuid is not None:
        return Unprocessable(
            "parent_uuid is already a step of another task: tasks nest one level only."
        )
    return None


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
