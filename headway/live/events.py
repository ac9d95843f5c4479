"""The events of live streams after their snapshot (see `headway.live.streams`): a round of them,
encoded once for every stream, and what a stream with `limit` or `state` lets through and
shows, so that a task pruned to make room (see `service.caps`) starts over only the
streams it would leave wrong."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import msgspec

from ..domain.schemas import EstimateOut
from ..domain.share_ids import ShareView
from ..domain.tasks import TaskView

_encode = msgspec.json.Encoder().encode

Key = str | None  # None: the space's own view; else a share link's uuid


class Round:
    """The tasks one round rendered, in the order of their last change, and their events
    as each way of showing them encodes them, made once for every stream. `render`: its
    space's rounds begun up to its own (see `SpaceWatch.begun`)."""

    __slots__ = ("_events", "_joined", "estimates", "head", "render", "tasks")

    def __init__(
        self,
        tasks: list[TaskView],
        first_id: int,
        render: int = 0,
        estimates: Mapping[str, EstimateOut] | None = None,
    ) -> None:
        self.tasks = tasks
        self.head = first_id
        self.render = render
        self.estimates = estimates or {}  # of the running tasks, by uuid
        self._events: dict[Key, list[bytes]] = {}
        self._joined: dict[Key, bytes] = {}

    def events(self, key: Key, share: ShareView | None) -> list[bytes]:
        """Each task's event, with its estimate's (`estimates_event`) when it runs."""
        found = self._events.get(key)
        if found is None:
            estimates = self.estimates
            found = self._events[key] = [
                b"id: %d\nevent: task\ndata: " % (self.head + index)
                + _encode(task if share is None else share.task(task))
                + b"\n\n"
                + (
                    estimates_event({task.uuid: estimates[task.uuid]}, share)
                    if task.uuid in estimates
                    else b""
                )
                for index, task in enumerate(self.tasks)
            ]
        return found

    def joined(self, key: Key, share: ShareView | None) -> bytes:
        found = self._joined.get(key)
        if found is None:
            found = self._joined[key] = b"".join(self.events(key, share))
        return found


def estimates_event(estimates: Mapping[str, EstimateOut], share: ShareView | None) -> bytes:
    """`event: estimates`: running tasks' estimates, by uuid (by id through a share link),
    sent beside their tasks (after a snapshot, and after each task's event). No id: a
    reconnection starts over from a snapshot, which carries them again."""
    if share is not None:
        estimates = {share.task_id(uuid): found for uuid, found in estimates.items()}
    return b"event: estimates\ndata: " + _encode(estimates) + b"\n\n"


class StreamFilter:
    """Which events a stream with `limit` and `state` sends: those of the top-level tasks
    its snapshot's window holds (`floor`: the oldest `created_at` of a full window), in
    that state, and of their children. A task leaving `state="active"` sends its finish,
    then nothing more.

    It also keeps the stream's window: the top-level tasks its reader shows now, as the
    space read with the same `limit` and `state` would. With a limit, the newest `limit`
    of those it was sent (the snapshot's, then each new one pushing the oldest out);
    without, all of them. A pruned task the window holds is news the stream cannot send
    (a task event says nothing of a removal): the reader must start over, unless the
    new task that took its place pushes it out of the window, as a space read would (the
    pruned task was the oldest the window held, or the tasks older than it leave too)."""

    __slots__ = ("_by_age", "_pending", "_window", "floor", "limit", "passing", "state")

    def __init__(
        self, state: str | None, floor: str | None, shown: dict[str, str], limit: int | None
    ) -> None:
        """`shown`: the snapshot's top-level tasks, by uuid, with their `created_at`."""
        self.state = state
        self.floor = floor
        self.limit = limit
        self.passing = set(shown)  # top-level tasks whose events (and children's) are sent
        # With a limit: the tasks shown, with their `created_at`, and a heap of them oldest
        # first (entries of tasks no longer shown are skipped as they surface).
        self._window = dict(shown) if limit is not None else {}
        self._by_age = [(created_at, uuid) for uuid, created_at in self._window.items()]
        heapq.heapify(self._by_age)
        # Pruned tasks still in the window, each with the last round begun when it went.
        self._pending: dict[str, int] = {}

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
                self._window.pop(uuid, None)
                return True  # its finish is its last event here
            return False
        if self.state == "finished" and not finished:
            return False
        self.passing.add(uuid)
        if self.limit is not None and uuid not in self._window:
            self._enter(uuid, task.created_at)
        return True

    def pruned(self, task_uuid: str, begun: int) -> bool:
        """The task was pruned as the space's `begun`th round was the last begun: whether
        the reader must start over now, as it shows the task and, without a limit,
        nothing pushes it out. One in a limited window waits for the round that renders
        the new task (see `still_shows_pruned`)."""
        shown = task_uuid in self.passing
        self.passing.discard(task_uuid)  # no event of it comes any more
        if self.limit is None:
            return shown
        if task_uuid in self._window:
            self._pending[task_uuid] = begun
        return False

    def still_shows_pruned(self, render: int) -> bool:
        """Once the events of the rounds up to the `render`th are sent: whether the
        window still holds a task pruned before that round began (the reader shows it;
        the space read does not)."""
        if not self._pending:
            return False
        judged = [uuid for uuid, begun in self._pending.items() if begun < render]
        for uuid in judged:
            del self._pending[uuid]
        return any(uuid in self._window for uuid in judged)

    def _enter(self, uuid: str, created_at: str) -> None:
        """A task joins the window; beyond `limit`, the oldest leaves it."""
        window, by_age = self._window, self._by_age
        window[uuid] = created_at
        heapq.heappush(by_age, (created_at, uuid))
        while self.limit is not None and len(window) > self.limit:
            created, oldest = heapq.heappop(by_age)
            if window.get(oldest) == created:
                del window[oldest]
        if len(by_age) > 2 * len(window) + 64:  # mostly tasks that left: start afresh
            self._by_age = [(created, uuid) for uuid, created in window.items()]
            heapq.heapify(self._by_age)
