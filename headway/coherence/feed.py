"""The change feed: who is told that a task of a space changed. It carries no state, only
which task changed (the state is read from the stores); a watcher that misses a change
on a dropped connection is told to start over (`RESYNC`).

`LocalFeed` tells the watchers of this process, at once and in the publisher's call.
With Redis (`coherence.redis_feed`), changes also cross to every other instance.
What a unit of work changed becomes the feed's messages in one place, `messages`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Container, Sequence
from typing import NamedTuple, Protocol

from ..domain.tasks import Changed
from ..ops.dependencies import unavailable

log = logging.getLogger("headway")

TASK = "task"  # a task was created, reported or finished
REVOKED = "revoked"  # a share link of the space was revoked: `task_uuid` names the share
RESYNC = "resync"  # changes may have been missed: read everything again
# A top-level task (with its steps) was removed to make room for a new one (the cap on
# tasks per space): `task_uuid` names it, `parent_uuid` the new task that took its place.
# Only the streams left showing it once the new one is sent start over (`headway.live.streams`).
PRUNED = "pruned"
DROPPED = "dropped"  # the space was deleted: its streams end


class Told(NamedTuple):
    """One change, as a unit of work collects it (see `service.unit`): `kind` of
    `task_uuid` in the space. `other`: the task's parent (a create, a report, a finish, a
    delete), or the new task that took its place (a prune). `announced`: the write told
    the other instances' feeds already, in the same round trip (see `Coherence.put`)."""

    kind: Changed
    space_uuid: str
    task_uuid: str
    other: str | None = None
    announced: bool = False


class Change(NamedTuple):
    kind: str
    space_uuid: str
    task_uuid: str
    parent_uuid: str | None = None


Listener = Callable[[Change], None]


class ChangeFeed(Protocol):
    """Announces changes to the listeners of a space, on every instance."""

    def publish(self, change: Change, *, announced: bool = False) -> None:
        """Announce `change`; never waits, never raises. `announced`: the other instances
        were told already (the store published `announcement(change)` with its write)."""

    def announcement(self, change: Change) -> tuple[str, str] | None:
        """What a store that writes to the other instances' feed may publish with its
        write, as (channel, message); None where there are no other instances."""

    def subscribe(self, space_uuid: str, listener: Listener) -> Callable[[], None]:
        """Call `listener` (in the event loop, without waiting on it) for every change of
        the space from now on; returns the function that ends this."""

    async def ready(self, space_uuid: str) -> None:
        """Wait until changes of the space made on any instance reach this feed's
        listeners (after `subscribe`): a snapshot read after it misses no change."""

    def loops(self) -> dict[str, asyncio.Task[None]]:
        """Its long-lived tasks, by name (see `api.health`)."""

    async def close(self) -> None:
        """Drop every listener and stop; a publish afterwards reaches nobody and does not
        raise."""


class LocalFeed:
    """Fan-out within one process: a publish calls each listener of the space, which only
    notes the change (a listener must never wait)."""

    def __init__(self) -> None:
        self._listeners: dict[str, dict[int, Listener]] = {}
        # The spaces with listeners here (`in` it, never changed through it).
        self.listened: Container[str] = self._listeners
        self._next = 0

    def publish(self, change: Change, *, announced: bool = False) -> None:
        listeners = self._listeners.get(change.space_uuid)
        if listeners:
            for listener in tuple(listeners.values()):
                listener(change)

    def announcement(self, change: Change) -> tuple[str, str] | None:
        return None

    def subscribe(self, space_uuid: str, listener: Listener) -> Callable[[], None]:
        key = self._next = self._next + 1
        listeners = self._listeners.setdefault(space_uuid, {})
        listeners[key] = listener
        if len(listeners) == 1:
            self._first_listener(space_uuid)

        def unsubscribe() -> None:
            listeners = self._listeners.get(space_uuid)
            if listeners is not None and listeners.pop(key, None) is not None and not listeners:
                del self._listeners[space_uuid]
                self._last_listener_gone(space_uuid)

        return unsubscribe

    def loops(self) -> dict[str, asyncio.Task[None]]:
        return {}  # none: a publish is a call

    async def ready(self, space_uuid: str) -> None:
        """At once: a publish reaches this process's listeners in the publisher's call."""

    def _first_listener(self, space_uuid: str) -> None:
        """A space gained its first listener here (Redis subscribes to it)."""

    def _last_listener_gone(self, space_uuid: str) -> None:
        """A space lost its last listener here (Redis unsubscribes)."""

    async def close(self) -> None:
        self._listeners.clear()


def messages(told: Sequence[Told]) -> list[tuple[Change, bool]]:
    """The feed's messages for what a unit changed, each with whether the write announced
    it already: a task changed (`TASK`), a share link revoked (`REVOKED`), a task removed
    to make room (`PRUNED`, with the task in its place), the space's streams to start
    over after a delete (`RESYNC`, once a space) or to end with their space (`DROPPED`)."""
    found: list[tuple[Change, bool]] = []
    resynced: set[str] = set()
    for each in told:
        kind = each.kind
        if kind in _OF_A_TASK:
            change = Change(TASK, each.space_uuid, each.task_uuid, each.other)
            found.append((change, each.announced))
        elif kind is Changed.REVOKE:
            found.append((Change(REVOKED, each.space_uuid, each.task_uuid), False))
        elif kind is Changed.DROP:
            found.append((Change(DROPPED, each.space_uuid, ""), False))
        elif kind is Changed.DELETE:
            if each.space_uuid not in resynced:
                resynced.add(each.space_uuid)
                found.append((Change(RESYNC, each.space_uuid, ""), False))
        elif kind is Changed.PRUNE and each.other is not None:  # a top-level task
            found.append((Change(PRUNED, each.space_uuid, each.task_uuid, each.other), False))
    return found


# The changes the feed tells as `TASK`.
_OF_A_TASK = frozenset({Changed.CREATE, Changed.REPORT, Changed.FINISH})


def tell(feed: ChangeFeed, told: Sequence[Told]) -> None:
    """Publish what a unit changed; if the feed fails, the spaces' watchers here start
    over from a snapshot. Never raises."""
    try:
        for change, announced in messages(told):
            feed.publish(change, announced=announced)
    except Exception as exc:
        if unavailable(exc):
            log.warning("a change could not be announced (%s); watchers resync", exc)
        else:
            log.exception("a change could not be announced; watchers resync")
        with contextlib.suppress(Exception):
            for space_uuid in dict.fromkeys(each.space_uuid for each in told):
                feed.publish(Change(RESYNC, space_uuid, ""))
