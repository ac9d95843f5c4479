"""Stall clocks: which active tasks stopped advancing, told once per episode.

An active task is stalled, for a channel that wants stalls, when nothing has been
reported for the channel's `stalled_after` seconds since its last report (or its
creation: never reported counts too), `silent`; or when reports come but `current` has
not changed for that long, `flat`. A parent is judged by its own reports and its
children's (a child's report or finish is activity; any child's `current` moving is
progress). A finished task never stalls.

One step looks at every space that has a channel wanting stalls: its active tasks'
rows (one query) and progress (one round trip). The report path pays nothing. Only one
instance looks at a time (a lease in the database, taken afresh each step); an episode
is a row keyed by channel and task, inserted only if absent, in the same transaction
as its message, so even two instances looking at once send one `stalled` message. A
`recovered` message follows when `current` changes or the task finishes.

Each `headway serve` looks every `HEADWAY_STALL_SCAN` seconds (`SCAN_S` by default,
at most 30), so a stall is told within `stalled_after` + that wait. The lease lasts two
looks; an instance that does not hold it looks again as soon as it lapses, so when the
instance that looks dies another takes over within two looks (30 s by default), and at
once when it shuts down (it lets the lease go). When `current` last
changed is known from this process's own looks: a `flat` stall is seen within
`stalled_after` + the wait of its last change, except just after the instance that
looks changed (a restart, the lease moving), when the flat clock starts again from the
first look. A space whose look fails is skipped (`loops.Parts`, logged once): the others
are looked at all the same, and its open episodes stay open.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import msgspec

from ..background.lease import NamedLease
from ..background.loops import Parts, repeat
from ..domain import tasks as domain
from ..domain.clock import Clock
from ..domain.tasks import Progress, TaskView
from ..ops import metrics
from ..progress import ProgressStore
from ..storage import channel_queue, channels
from ..storage.channels import Watcher
from ..storage.database import Database, Statements

log = logging.getLogger("headway")

SCAN_S = 15.0
LEASE_NAME = "stalls"
# The lease lasts this many looks; each look by its holder takes it afresh.
LEASE_LOOKS = 2
# Active tasks looked at per space (oldest first); beyond, newer ones are not watched.
MAX_WATCHED = 10_000

Views = Callable[[Sequence[str]], Awaitable[list[TaskView]]]
Mark = Callable[[Statements, str, str], Awaitable[bool]]


class Teller:
    """What the stall and the late watches share: their looks by space (`parts`), and the
    messages they queue, one per episode or late run."""

    def __init__(self, what: str, db: Database, views: Views, cap: int) -> None:
        self.db = db
        self.views = views
        self.cap = cap  # messages one channel holds queued (HEADWAY_OUTBOX_PER_ENDPOINT)
        self.parts = Parts(what)

    async def tell(
        self, mark: Mark, channel_uuid: str, task_uuid: str, kind: str, now: int, **extra: Any
    ) -> bool:
        """Queue the task's `task.<kind>` event to the channel in the transaction that
        `mark`s it told (False, nothing queued: another instance did, or the task is gone,
        whose episode a recovery closes all the same); counted, as what it pushed out."""
        views = await self.views([task_uuid])
        if not views and kind != "recovered":
            return False
        event = {"type": f"task.{kind}", "timestamp": domain.format_ts(now), **extra}
        async with self.db.write() as st:
            if not await mark(st, channel_uuid, task_uuid) or not views:
                return False
            pushed_out = await channel_queue.queue(
                st,
                f"{'late' if kind == 'late' else 'stall'}_{uuid.uuid4().hex}",
                channel_uuid,
                task_uuid,
                kind,
                msgspec.json.encode(event | {"data": views[0]}).decode(),
                now,
                cap=self.cap,
            )
        metrics.channel_delivery("given_up", pushed_out)
        metrics.given_up("channel", "cap", pushed_out)
        metrics.stall(kind)
        return True


class StallWatch(Teller):
    """Looks for stalled tasks, one `step` at a time."""

    def __init__(
        self,
        db: Database,
        progress: ProgressStore,
        clock: Clock,
        views: Views,
        *,
        scan_s: float = SCAN_S,
        on_queued: Callable[[], None] = lambda: None,
        outbox_per_endpoint: int = 10_000,
        also: Callable[[int], Awaitable[int]] | None = None,
    ) -> None:
        super().__init__("stalls", db, views, outbox_per_endpoint)
        self.progress = progress
        self.clock = clock
        self.scan_s = scan_s
        self.on_queued = on_queued
        holder = f"stalls-{uuid.uuid4().hex[:12]}"
        self.lease = NamedLease(db, LEASE_NAME, holder, scan_s * LEASE_LOOKS)
        self.let_go = self.lease.let_go  # at a shutdown, so that another instance looks at once
        # Per task: (what its `current` was, when this process first saw it so), µs.
        self._moved: dict[str, tuple[str, int]] = {}
        # Seconds until the next look: `scan_s`, or less when another's lease lapses sooner.
        self.wait_s = scan_s
        # Another look made under the same lease, at each look (`notify.late`).
        self.also = also

    async def run(self) -> None:
        """Look every `scan_s` until cancelled; a failed look is logged, counted, not fatal."""
        await repeat("stalls", self.step, self._next_look_s, self.let_go)

    def _next_look_s(self, looked: bool) -> float:
        return self.wait_s if looked else self.scan_s

    async def step(self) -> int:
        """One look; returns how many messages it queued. Does nothing unless this
        process holds the lease (`LEASE_LOOKS` looks: another instance takes over once it
        lapses, and looks again at that moment: see `wait_s`)."""
        now = self.clock.now_us()
        self.wait_s = self.scan_s
        if not await channels.stalls_watched(self.db.fetch):
            self._moved.clear()
            return 0  # no channel wants stalls: nothing written, no lease taken
        if not await self.lease.take(now):
            self._moved.clear()  # another instance looks: its clocks are the ones kept
            # Look again as soon as the holder's lease lapses.
            lapses_s = (await self.lease.lapses_at() - now) / 1e6
            self.wait_s = min(self.scan_s, max(0.01, lapses_s + 0.01))
            return 0
        async with self.db.read() as fetch:
            watchers = await channels.stall_watchers(fetch)
            episodes = await channels.episodes(fetch, [w.uuid for w in watchers])
        by_space: dict[str, list[Watcher]] = defaultdict(list)
        for watcher in watchers:
            by_space[watcher.space_uuid].append(watcher)
        open_ = {(row[0], row[1]): row for row in episodes}
        moved: dict[str, tuple[str, int]] = {}
        queued = 0
        seen: set[str] = set()
        skipped: set[str] = set()  # the channels of spaces whose look failed
        for space_uuid, space_watchers in by_space.items():
            look = partial(self._space, space_uuid, space_watchers, open_, moved, seen, now)
            found = await self.parts.run(f"space {space_uuid}", look, None)
            if found is None:
                skipped.update(watcher.uuid for watcher in space_watchers)
            else:
                queued += found
        # Episodes of tasks no longer active: finished (recovered) or gone (forgotten);
        # those of a skipped space stay open, as they were.
        ended = [key for key in open_ if key[1] not in seen and key[0] not in skipped]
        if ended:
            queued += await self._ended(ended, now)
        self._moved = moved
        if self.also is not None:
            queued += await self.also(now)
        if queued:
            self.on_queued()
        return queued

    async def _space(
        self,
        space_uuid: str,
        watchers: list[Watcher],
        open_: dict[tuple[str, str], Any],
        moved: dict[str, tuple[str, int]],
        seen: set[str],
        now: int,
    ) -> int:
        async with self.db.read() as fetch:
            rows = await channels.active_tasks(fetch, space_uuid, MAX_WATCHED)
            finished_children = await channels.children_last_finished(fetch, space_uuid)
        if not rows:
            return 0
        found = await self.progress.get_many([row[0] for row in rows])
        children: dict[str, list[tuple[Any, Progress | None]]] = defaultdict(list)
        for row, progress in zip(rows, found, strict=True):
            if row[1] is not None:
                children[row[1]].append((row, progress))
        queued = 0
        for row, progress in zip(rows, found, strict=True):
            task_uuid, parent_uuid, created_at_us = row[0], row[1], int(row[2])
            seen.add(task_uuid)
            active_children = children.get(task_uuid, [])
            last_us, signature = _activity(progress, active_children)
            child_finish = finished_children.get(task_uuid)
            if child_finish is not None:
                last_us = max(last_us or 0, child_finish)
                signature += f"|{child_finish}"
            before = self._moved.get(task_uuid) or moved.get(task_uuid)
            since = before[1] if before is not None and before[0] == signature else now
            moved[task_uuid] = (signature, since)
            # Never reported, as far as the progress store knows: silent since the task's
            # creation, or since the store began if that is later (a restart emptied the
            # memory that held its reports, so the message says the clock restarted).
            began_us = self.progress.remembers_since_us
            restarted = last_us is None and began_us is not None and began_us > created_at_us
            silent_from = last_us if last_us is not None else created_at_us
            silent_us = now - (began_us if restarted and began_us is not None else silent_from)
            flat_us = now - since
            restart = {"since": "restart"} if restarted else {}  # told in the stall's message
            for watcher in watchers:
                if parent_uuid is not None and not watcher.steps:
                    continue
                after_us = watcher.stalled_after_s * 1_000_000
                episode = open_.get((watcher.uuid, task_uuid))
                if episode is not None:
                    if episode[3] != signature:  # `current` moved: recovered
                        queued += await self._recovered(watcher.uuid, task_uuid, now)
                        del open_[(watcher.uuid, task_uuid)]
                    continue
                if silent_us >= after_us:
                    reason, for_us = "silent", silent_us
                elif last_us is not None and flat_us >= after_us:
                    reason, for_us = "flat", flat_us
                else:
                    continue
                mark = partial(
                    channels.open_episode, reason=reason, current=signature, since_us=now - for_us
                )
                told = {"reason": reason, "for_s": for_us // 1_000_000, **restart}
                if await self.tell(mark, watcher.uuid, task_uuid, "stalled", now, **told):
                    open_[(watcher.uuid, task_uuid)] = (watcher.uuid, task_uuid, reason, signature)
                    queued += 1
        return queued

    async def _recovered(self, channel_uuid: str, task_uuid: str, now: int) -> int:
        return int(
            await self.tell(channels.close_episode, channel_uuid, task_uuid, "recovered", now)
        )

    async def _ended(self, ended: list[tuple[str, str]], now: int) -> int:
        async with self.db.read() as fetch:
            finished = await channels.task_states(fetch, list({task for _, task in ended}))
        queued = 0
        for channel_uuid, task_uuid in ended:
            if finished.get(task_uuid):
                queued += await self._recovered(channel_uuid, task_uuid, now)
            else:  # deleted, or its progress and row gone: nothing to tell
                async with self.db.write() as st:
                    await channels.close_episode(st, channel_uuid, task_uuid)
        return queued


def _activity(
    progress: Progress | None, children: list[tuple[Any, Progress | None]]
) -> tuple[int | None, str]:
    """When the task (with its active children) last reported, and a signature of its
    `current` (its children's, for a parent) that changes exactly when it moves."""
    last = None if progress is None else progress.updated_at_us
    if not children:
        return last, json.dumps(None if progress is None else progress.current)
    currents = []
    for _row, child in children:
        if child is not None:
            last = child.updated_at_us if last is None else max(last, child.updated_at_us)
        currents.append(None if child is None else child.current)
    return last, json.dumps(currents)
