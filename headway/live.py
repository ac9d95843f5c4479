"""Live streams of spaces: what `GET /spaces/{s}/events` sends after its snapshot.

Each space watched in this process has one `SpaceWatch`: it listens to the change feed,
notes which tasks changed, and renders each changed task once per round, whatever the
number of streams (the JSON is encoded once per way of showing it: the space's own, or
each share link's). Each `Stream` then holds, per task, only the latest event it has not
sent yet, so a slow reader never slows a reporter and holds at most one event per task;
a stream that falls further behind than that (`MAX_PENDING` tasks), or whose reader takes
nothing for `STALL_S` seconds, is ended, and its browser reconnects to a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from time import perf_counter
from typing import TYPE_CHECKING, Any

import msgspec

from . import metrics
from .domain import TaskView
from .errors import TooManyRequests, Unavailable
from .progress.feed import RESYNC, REVOKED, TASK, Change, ChangeFeed
from .shares import ShareView

if TYPE_CHECKING:
    from .service import Service

log = logging.getLogger("headway")

_encode = msgspec.json.Encoder().encode

# Distinct tasks with an unsent event a stream may hold before it is ended as too far
# behind (its reader reconnects and starts again from a snapshot).
MAX_PENDING = 2000
# Seconds a stream's reader may take nothing before the stream is ended.
STALL_S = 30.0
# A comment line at least this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
# A round of rendering waits at least this long after the previous one, and at least as
# long as that one took: changes coming faster are coalesced, and the renderer takes at
# most about half of the process's time however busy the space is.
ROUND_S = 0.05
# How often a share link's streams check that the link still exists, in case its
# revocation was announced while the feed was down.
SHARE_CHECK_S = 15.0
# A render that fails (a dependency down) is retried after this long.
RETRY_S = 1.0

Key = str | None  # None: the space's own view; else a share link's uuid


class StreamFilter:
    """Which events a stream with `limit` and `state` sends: those of the top-level tasks
    its snapshot's window holds (`floor`: the oldest `created_at` of a full window), in
    that state, and of their children. A task leaving `state="active"` sends its finish,
    then nothing more."""

    __slots__ = ("floor", "passing", "state")

    def __init__(self, state: str | None, floor: str | None, shown: set[str]) -> None:
        self.state = state
        self.floor = floor
        self.passing = shown  # top-level tasks whose events (and children's) are sent

    def admits(self, task: TaskView) -> bool:
        if task.parent_uuid is not None:
            return task.parent_uuid in self.passing
        uuid = task.uuid
        if self.floor is not None and task.created_at < self.floor:
            return False
        finished = task.finished_at is not None
        if self.state == "active" and finished:
            if uuid in self.passing:
                self.passing.discard(uuid)
                return True  # its finish is its last event here
            return False
        if self.state == "finished" and not finished:
            return False
        self.passing.add(uuid)
        return True


class Stream:
    """One open stream: its events not yet sent, latest per task, in the order of their
    last change."""

    __slots__ = ("_pending", "_wake", "client", "ended", "filter", "key", "share", "watch")

    def __init__(self, watch: SpaceWatch, share: ShareView | None, client: str) -> None:
        self.watch = watch
        self.share = share
        self.client = client
        self.key: Key = None if share is None else share.share_uuid
        self.filter: StreamFilter | None = None  # set once the snapshot is sent
        self._pending: dict[str, tuple[TaskView, bytes]] = {}
        self._wake = asyncio.Event()
        self.ended: str | None = None  # why it ended: "revoked", "behind", "shutdown"...

    def offer(self, task: TaskView, event: bytes) -> None:
        pending = self._pending
        pending.pop(task.uuid, None)
        pending[task.uuid] = (task, event)
        if len(pending) > MAX_PENDING:
            self.end("behind")
        self._wake.set()

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
        self._wake.set()

    async def next_events(self, timeout: float) -> bytes | None:
        """The events to send next, joined (b"" if none came within `timeout`), or None
        once the stream has ended."""
        if not self._pending and self.ended is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
        self._wake.clear()
        if self.ended is not None:
            return None
        pending, self._pending = self._pending, {}
        admits = None if self.filter is None else self.filter.admits
        return b"".join(event for task, event in pending.values() if admits is None or admits(task))

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
        self._sequence = 0
        self._unsubscribe = live.feed.subscribe(space_uuid, self._on_change)
        self._renderer = asyncio.create_task(self._render_loop(), name="headway-live-render")

    @property
    def last_id(self) -> int:
        return self._sequence

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
        elif change.kind == RESYNC:
            for stream in tuple(self.streams):
                stream.end("resync")

    def remove(self, stream: Stream) -> None:
        self.streams.discard(stream)
        if not self.streams:
            self.live.forget(self)
            self._unsubscribe()
            self._renderer.cancel()

    async def _render_loop(self) -> None:
        service = self.live.service
        while True:
            await self._wake.wait()
            self._wake.clear()
            started = perf_counter()
            dirty, self._dirty = self._dirty, {}
            try:
                for task_uuid in dirty:
                    task = await service.event_view(task_uuid)
                    if task is not None:
                        self._deliver(task)
            except self.live.dependency_errors as exc:
                log.warning("live: cannot read a changed task (%s)", type(exc).__name__)
                for task_uuid in dirty:
                    self._dirty.setdefault(task_uuid, None)
                self._wake.set()
                await asyncio.sleep(RETRY_S)
                continue
            await asyncio.sleep(max(ROUND_S, perf_counter() - started))

    def _deliver(self, task: TaskView) -> None:
        self._sequence += 1
        head = b"id: %d\nevent: task\ndata: " % self._sequence
        events: dict[Key, bytes] = {}
        for stream in self.streams:
            event = events.get(stream.key)
            if event is None:
                shown: Any = task if stream.share is None else stream.share.task(task)
                event = events[stream.key] = head + _encode(shown) + b"\n\n"
            stream.offer(task, event)


class Live:
    """Every stream open in this process, by space; at most `max_streams` at once, and
    `per_client` per client address (unless `per_client` is None)."""

    def __init__(
        self,
        service: Service,
        feed: ChangeFeed,
        *,
        max_streams: int,
        per_client: int | None,
        dependency_errors: tuple[type[BaseException], ...],
    ) -> None:
        self.service = service
        self.feed = feed
        self.max_streams = max_streams
        self.per_client = per_client
        self.dependency_errors = dependency_errors
        self._watches: dict[str, SpaceWatch] = {}
        self._open = 0
        self._by_client: dict[str, int] = {}

    def open(self, space_uuid: str, share: ShareView | None, client: str) -> Stream:
        """A new stream of the space, subscribed from now on; 503 if the process holds as
        many streams as it may, 429 if the client does."""
        if self._open >= self.max_streams:
            metrics.refused("streams")
            raise Unavailable(
                "The server holds as many live streams as it may; retry shortly.",
                headers={"retry-after": "5"},
            )
        held = self._by_client.get(client, 0)
        if self.per_client is not None and held >= self.per_client:
            metrics.refused("rate_streams")
            raise TooManyRequests(
                f"Your address holds {held} live streams, the most one may; close some first.",
                headers={"retry-after": "5"},
            )
        watch = self._watches.get(space_uuid)
        if watch is None:
            watch = self._watches[space_uuid] = SpaceWatch(self, space_uuid)
        stream = Stream(watch, share, client)
        watch.streams.add(stream)
        self._open += 1
        self._by_client[client] = held + 1
        metrics.stream_opened()
        return stream

    def closed(self, stream: Stream) -> None:
        self._open -= 1
        left = self._by_client[stream.client] - 1
        if left:
            self._by_client[stream.client] = left
        else:
            del self._by_client[stream.client]
        metrics.stream_closed()

    def forget(self, watch: SpaceWatch) -> None:
        if self._watches.get(watch.space_uuid) is watch:
            del self._watches[watch.space_uuid]

    @property
    def open_streams(self) -> int:
        return self._open

    def end_all(self, reason: str = "shutdown") -> None:
        """End every stream (at shutdown): each finishes its answer and closes."""
        for watch in tuple(self._watches.values()):
            for stream in tuple(watch.streams):
                stream.end(reason)
