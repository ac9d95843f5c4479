"""Live streams of spaces: what `GET /spaces/{s}/events` sends after its snapshot.

Each space watched in this process has one `SpaceWatch`: it listens to the change feed,
notes which tasks changed, and renders each changed task once per round, whatever the
number of streams (the JSON is encoded once per way of showing it: the space's own, or
each share link's). Each `Stream` then holds, per task, only the latest event it has not
sent yet, so a slow reader never slows a reporter and holds at most one event per task;
a stream that falls further behind than that (`MAX_PENDING` tasks), or whose reader takes
nothing for `STALL_S` seconds, is ended, and its browser reconnects to a fresh snapshot.
A task pruned to make room (`service.caps`) ends only the streams it would leave showing
a task the space no longer holds (see `live_events.StreamFilter`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING

from ..coherence.feed import DROPPED, PRUNED, RESYNC, REVOKED, TASK, Change, ChangeFeed
from ..domain.errors import Unavailable
from ..domain.share_ids import ShareView
from ..domain.tasks import TaskView
from ..ops import metrics
from ..ops.dependencies import unavailable
from .events import Key, Round, StreamFilter

if TYPE_CHECKING:
    from ..api.visitor import Visitor
    from ..service import Service

log = logging.getLogger("headway")

# Distinct tasks with an unsent event a stream may hold before it is ended as too far
# behind (its reader reconnects and starts again from a snapshot).
MAX_PENDING = 2000
# Seconds a stream's reader may take nothing before the stream is ended.
STALL_S = 30.0
# A comment line keeps proxies from closing an idle stream: sent once a stream has sent
# nothing for this long (checked every second, so at least every 15 s).
KEEPALIVE_S = 14.0
# A round of rendering waits at least ROUND_S after the previous one, and ROUND_COST_FACTOR
# times the CPU time that round and the sending of its events took (the wait on the stores
# not counted): changes coming faster are coalesced into the next round, so however busy
# the space and however many its streams, they take a bounded share of the process's CPU,
# and a busy space's streams lag by a bounded time (the sending is measured a little short
# of its whole cost: waking each stream is not in it).
ROUND_S = 0.1
ROUND_COST_FACTOR = 6
# How often this process asks the database whether the spaces and share links its
# streams show still exist. A revocation or a delete reaches the streams of every
# instance through the change feed at once; this ends them within a second all the same
# when nothing carries that news here (several instances without Redis, a feed that
# dropped it, a stream opened as the link went), and whether or not the space changes.
LINK_CHECK_S = 0.5
# A render that fails (a dependency down) is retried after this long.
RETRY_S = 1.0


class Stream:
    """One open stream: the rounds it has not sent yet, sent as they were joined for every
    stream. Rounds held past MAX_PENDING events are merged, keeping the latest event of
    each task in the order of their last change (and so are those of a filtered stream,
    which decides task by task)."""

    __slots__ = (
        "_pruned",
        "_rounds",
        "_skip",
        "_waiter",
        "abort",
        "ended",
        "filter",
        "held",
        "key",
        "sending_since",
        "sent_at",
        "share",
        "visitor",
        "watch",
        "woke",
    )

    def __init__(self, watch: SpaceWatch, share: ShareView | None, visitor: Visitor) -> None:
        self.watch = watch
        self.share = share
        self.visitor = visitor
        self.key: Key = None if share is None else share.share_uuid
        self.filter: StreamFilter | None = None  # set once the snapshot is sent
        # Tasks pruned while its snapshot was read and sent, judged once it is (`follow`).
        self._pruned: list[tuple[str, int]] | None = []
        self._skip: set[str] = set()  # pruned tasks whose held events are not sent
        self._rounds: list[Round] = []
        self.held = 0  # events in `_rounds`: at most MAX_PENDING, or one per task merged
        self._waiter: asyncio.Future[None] | None = None  # set while `next_events` waits
        self.ended: str | None = None  # why it ended: "revoked", "behind", "shutdown"...
        self.sent_at = 0.0  # loop time of its last send: `Live` wakes it for a keep-alive
        # When the send under way began (loop time), None between sends; a send that
        # waits on its reader longer than STALL_S ends the stream through `abort`, which
        # its answer sets (closing the connection).
        self.sending_since: float | None = None
        self.abort: Callable[[], None] = lambda: None
        self.woke = 0.0  # when it last took its rounds (perf_counter): what sending costs

    def offer(self, round_: Round) -> None:
        # Behind only if its reader had not taken the rounds before this one: one round
        # of many tasks, taken at once, is no sign of a slow reader.
        behind = bool(self._rounds)
        self._rounds.append(round_)
        self.held += len(round_.tasks)
        if self.held > MAX_PENDING:
            merged = self._merged()
            if len(merged) > MAX_PENDING and behind:
                self.end("behind")
        self.wake()

    def _merged(self) -> dict[str, tuple[TaskView, bytes]]:
        """The rounds held, merged into one: the latest event of each task. Kept as one
        round so that a stream far behind holds at most one event per task."""
        merged: dict[str, tuple[TaskView, bytes]] = {}
        for held in self._rounds:
            for task, event in zip(held.tasks, held.events(self.key, self.share), strict=True):
                merged.pop(task.uuid, None)
                merged[task.uuid] = (task, event)
        one = Round([task for task, _ in merged.values()], 0, self._rounds[-1].render)
        one._events[self.key] = [event for _, event in merged.values()]
        self._rounds, self.held = [one], len(merged)
        return merged

    def follow(self, filter_: StreamFilter | None) -> None:
        """Its snapshot is sent: from now on its events pass `filter_` (None: every
        event). The tasks pruned meanwhile are judged now, as they would have been."""
        self.filter = filter_
        early, self._pruned = self._pruned, None
        for task_uuid, begun in early or ():
            self.pruned(task_uuid, begun)

    def pruned(self, task_uuid: str, begun: int) -> None:
        """A top-level task was removed to make room for a new one (see `service.caps`)
        as the space's `begun`th round was the last begun. The stream starts over if its
        reader is left showing it (see `StreamFilter.pruned`): at once without a limit or
        state (it shows every task). Its events (and its steps') not yet sent never are."""
        if self.ended is not None:
            return
        if self._pruned is not None:  # its snapshot is under way: judged by `follow`
            self._pruned.append((task_uuid, begun))
            if len(self._pruned) > MAX_PENDING:
                self.end("resync")
            return
        if self.filter is None or self.filter.pruned(task_uuid, begun):
            self.end("resync")
        elif any(task_uuid in (t.uuid, t.parent_uuid) for held in self._rounds for t in held.tasks):
            self._skip.add(task_uuid)

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
        self.wake()

    def wake(self) -> None:
        """Let `next_events` return: there are rounds to send, the stream ended, or it is
        time for a keep-alive."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_events(self) -> bytes | None:
        """The events to send next, joined (b"" when woken for a keep-alive, or when none
        passed the filter), or None once the stream has ended."""
        if not self._rounds and self.ended is None:
            # A bare future: cheaper than an Event and a timer per wait, for a thousand
            # streams woken every round (keep-alives come from `Live`'s one timer).
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None
        self.woke = perf_counter()
        if self.ended is not None:
            return None
        if not self._rounds:
            return b""
        if self.filter is None:
            # Each round as joined for every stream; a task changed in several rounds
            # sends each state (merging costs more than sending them, and `offer` merges
            # once the rounds held pass MAX_PENDING events).
            rounds, self._rounds, self.held = self._rounds, [], 0
            return b"".join(held.joined(self.key, self.share) for held in rounds)
        render = self._rounds[-1].render
        merged = self._merged()
        self._rounds, self.held = [], 0
        admits, skip, self._skip = self.filter.admits, self._skip, set()
        events = b"".join(
            event
            for task, event in merged.values()
            if not (skip and {task.uuid, task.parent_uuid} & skip) and admits(task)
        )
        if self.filter.still_shows_pruned(render):
            self.end("resync")  # after these events: the next call ends it
        return events

    def close(self) -> None:
        """Unsubscribe, when its answer ends."""
        if self not in self.watch.streams:
            return
        self.end("closed")
        self.watch.remove(self)
        self.watch.live.closed(self)


class SpaceWatch:
    """The streams of one space in this process, fed by one subscription to the feed
    and one renderer."""

    def __init__(self, live: Live, space_uuid: str) -> None:
        self.live = live
        self.space_uuid = space_uuid
        self.streams: set[Stream] = set()
        self._dirty: dict[str, None] = {}
        self._wake = asyncio.Event()
        self.last_id = 0  # of the last event rendered
        self.begun = 0  # rounds begun
        # While a round reads its tasks: the tasks pruned meanwhile (see `_render`).
        self._pruning: set[str] | None = None
        # Seconds its streams spent sending since the last round (see `_render_loop`).
        self.sending_s = 0.0
        self._unsubscribe = live.feed.subscribe(space_uuid, self._on_change)
        self._renderer = asyncio.create_task(self._render_loop(), name="headway-live-render")
        self._renderer.add_done_callback(self._renderer_ended)

    def _on_change(self, change: Change) -> None:
        if change.kind == TASK:
            dirty = self._dirty
            dirty.pop(change.task_uuid, None)
            dirty[change.task_uuid] = None
            if change.parent_uuid is not None:  # after the child: its aggregate moved
                dirty.pop(change.parent_uuid, None)
                dirty[change.parent_uuid] = None
            self._wake.set()
        elif change.kind == REVOKED:
            for stream in tuple(self.streams):
                if stream.key == change.task_uuid:
                    stream.end("revoked")
        elif change.kind == PRUNED:
            self._pruned(change.task_uuid, change.parent_uuid)
        elif change.kind == RESYNC:
            self.end_all("resync")
        elif change.kind == DROPPED:
            self.end_all("deleted")

    def _pruned(self, task_uuid: str, new_uuid: str | None) -> None:
        """`task_uuid` was pruned to make room for `new_uuid`, which the next round begun
        renders (again, maybe): a stream whose window held the pruned task judges, once
        it has that round, whether the new task took its place (see `StreamFilter`)."""
        dirty = self._dirty
        dirty.pop(task_uuid, None)
        if new_uuid is not None:
            dirty.setdefault(new_uuid, None)
            self._wake.set()
        if self._pruning is not None:
            self._pruning.add(task_uuid)
        for stream in tuple(self.streams):
            stream.pruned(task_uuid, self.begun)

    def end_all(self, reason: str) -> None:
        for stream in tuple(self.streams):
            stream.end(reason)

    def remove(self, stream: Stream) -> None:
        self.streams.discard(stream)
        if not self.streams:
            self.live.forget(self)
            self._unsubscribe()
            self._renderer.cancel()

    @property
    def dead(self) -> bool:
        """Its renderer has ended: a new stream of the space needs a new watch."""
        return self._renderer.done()

    async def _render_loop(self) -> None:
        """Renders a round whenever tasks changed, then pauses for a multiple of the CPU
        time the round took (see ROUND_COST_FACTOR). Any failure is survived: a
        dependency that is down leaves the changes for the next try; anything else is
        logged and every stream starts over from a snapshot (it may have missed one)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, {}
            try:
                spent = await self._render(list(dirty))
            except Exception as exc:
                self._failed(exc, dirty)
                await asyncio.sleep(RETRY_S)
                continue
            await asyncio.sleep(max(ROUND_S, ROUND_COST_FACTOR * spent))

    async def _render(self, dirty: list[str]) -> float:
        """Render the changed tasks, read in one batch, and offer them to every stream
        as one round; the seconds of CPU this took, with its streams' sending since the
        last round, not counting the wait on the stores. Tasks pruned meanwhile may have
        been read before they went: left out, with their steps (the streams were told)."""
        self.begun += 1
        self._pruning = set()
        try:
            rendered = await self.live.service.tasks.event_views(dirty) if dirty else []
        finally:
            pruned, self._pruning = self._pruning, None
        if pruned:
            rendered = [t for t in rendered if not {t.uuid, t.parent_uuid} & pruned]
        # The running tasks' estimates (none if they cannot be read: the round goes out
        # without them, its tasks' next events carry them).
        running = [task.uuid for task in rendered if task.finished_at is None]
        estimates = await self.live.service.estimates.shown(running) if running else {}
        started = perf_counter()
        if rendered:
            round_ = Round(rendered, self.last_id + 1, self.begun, estimates)
            self.last_id += len(rendered)
            for stream in tuple(self.streams):
                stream.offer(round_)
        spent, self.sending_s = perf_counter() - started + self.sending_s, 0.0
        return spent

    def _failed(self, exc: Exception, dirty: dict[str, None]) -> None:
        if unavailable(exc):
            log.warning("live: cannot read a changed task (%s)", type(exc).__name__)
            for task_uuid in dirty:
                self._dirty.setdefault(task_uuid, None)
            self._wake.set()
            return
        log.error("live: a round failed; the space's streams start over", exc_info=exc)
        metrics.loop_failed("live_render")
        self.end_all("resync")

    def _renderer_ended(self, renderer: asyncio.Task[None]) -> None:
        """Its renderer ended other than by being cancelled: never reused (see `dead`);
        its streams start over on a new watch."""
        if renderer.cancelled():
            return
        log.error("live: a space's renderer ended", exc_info=renderer.exception())
        metrics.loop_failed("live_render")
        self.live.forget(self)
        self.end_all("resync")


class Live:
    """Every stream open in this process, by space; at most `max_streams` at once, and
    as many per client as its `Visitor` may hold."""

    def __init__(self, service: Service, feed: ChangeFeed, *, max_streams: int) -> None:
        self.service = service
        self.feed = feed
        self.max_streams = max_streams
        self._watches: dict[str, SpaceWatch] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._links: asyncio.Task[None] | None = None
        self.open_streams = 0

    def open(self, space_uuid: str, share: ShareView | None, visitor: Visitor) -> Stream:
        """A new stream of the space, subscribed from now on; 503 if the process holds as
        many streams as it may, 429 if the client, or its network, does."""
        if self.open_streams >= self.max_streams:
            metrics.refused("streams")
            raise Unavailable(
                "The server holds as many live streams as it may; retry shortly.",
                headers={"retry-after": "5"},
            )
        visitor.hold_stream()
        watch = self._watches.get(space_uuid)
        if watch is None or watch.dead:
            watch = self._watches[space_uuid] = SpaceWatch(self, space_uuid)
        if self._watchdog is None:
            self._watchdog = asyncio.create_task(self._end_stalled(), name="headway-live-stall")
            self._links = asyncio.create_task(self._check_links(), name="headway-live-links")
        stream = Stream(watch, share, visitor)
        watch.streams.add(stream)
        self.open_streams += 1
        metrics.stream_opened()
        return stream

    def closed(self, stream: Stream) -> None:
        self.open_streams -= 1
        stream.visitor.let_go_stream()
        metrics.stream_closed()

    def forget(self, watch: SpaceWatch) -> None:
        if self._watches.get(watch.space_uuid) is watch:
            del self._watches[watch.space_uuid]

    def loops(self) -> dict[str, asyncio.Task[None]]:
        """Its long-lived tasks, by name, once started: the watchdog of stalled streams,
        and the check that what they show still exists."""
        if self._watchdog is None or self._links is None:
            return {}
        return {"live_watchdog": self._watchdog, "live_links": self._links}

    async def _end_stalled(self) -> None:
        """Once a second, for every stream (one timer for all, rather than one per send or
        wait): ends each whose send has waited on its reader for more than STALL_S, and
        wakes each that has sent nothing for KEEPALIVE_S, for a keep-alive."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, STALL_S / 4, KEEPALIVE_S / 4))
            now = loop.time()
            for watch in tuple(self._watches.values()):
                for stream in tuple(watch.streams):
                    since = stream.sending_since
                    try:
                        if since is not None and now - since > STALL_S:
                            stream.end("stalled")
                            stream.abort()
                        elif since is None and now - stream.sent_at >= KEEPALIVE_S:
                            stream.wake()
                    except Exception:  # never dies: the next stream, the next second
                        log.exception("live: checking a stream failed")
                        metrics.loop_failed("live_watchdog")

    async def _check_links(self) -> None:
        """Every LINK_CHECK_S, `end_orphans`; never dies of a failure."""
        while True:
            await asyncio.sleep(LINK_CHECK_S)
            try:
                await self.end_orphans()
            except Exception as exc:  # the next check, in LINK_CHECK_S
                if not unavailable(exc):
                    log.exception("live: checking the streams' links failed")
                    metrics.loop_failed("live_links")

    async def end_orphans(self) -> int:
        """End the streams whose space was deleted, or whose share link was revoked, as
        the database now says; how many. One query for the spaces, one for the links."""
        watches = tuple(self._watches.values())
        if not watches:
            return 0
        links = {
            stream.key for watch in watches for stream in watch.streams if stream.key is not None
        }
        spaces, shown = await self.service.shares.still_shown(
            [watch.space_uuid for watch in watches], links
        )
        ended = 0
        for watch in watches:
            for stream in tuple(watch.streams):
                if watch.space_uuid not in spaces:
                    stream.end("deleted")
                elif stream.key is not None and stream.key not in shown:
                    stream.end("revoked")
                else:
                    continue
                ended += 1
        return ended

    def end_all(self, reason: str = "shutdown") -> None:
        """End every stream (at shutdown): each finishes its answer and closes."""
        for task in (self._watchdog, self._links):
            if task is not None:
                task.cancel()
        for watch in tuple(self._watches.values()):
            watch.end_all(reason)
