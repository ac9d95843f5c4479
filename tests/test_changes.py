"""The one change point: every cache the service holds hears it, and every write calls
it exactly once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from headway.domain import Changed
from headway.service import Changes

# Objects of the service that hold entries but are no cache of spaces or tasks, and why.
NOT_CACHES = {
    "Changes": "the change point itself: the caches it tells",
    "LocalFeed": "the change feed: Changes publishes every change to it",
    "RedisFeed": "the change feed: Changes publishes every change to it",
    "Live": "the open streams: each space's watch hears changes through the feed",
    "Holdings": "the streams each client and network holds: counts, no copy of a task",
    "MemoryProgressStore": "the progress store: the live state itself, not a copy of it",
    "Coalesced": "script calls of the Redis store waiting to share one round trip",
    "Activity": "spaces used lately, to be written: a note about a deleted space updates nothing",
    "Caps": "tasks removed to make room, held only until their commit is told to Changes",
}
CONTAINERS = (dict, set, list)


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    yield from getattr(obj, "__dict__", {}).items()
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if hasattr(obj, slot):
                yield slot, getattr(obj, slot)


def holders(*roots: Any) -> list[Any]:
    """Every object of Headway's own classes reachable from `roots` through attributes
    (and lists of them) that holds a container: what could keep stale entries."""
    found, seen, stack = [], set(), list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or not type(obj).__module__.startswith("headway"):
            continue
        seen.add(id(obj))
        holds = False
        for _name, value in _attributes(obj):
            if isinstance(value, CONTAINERS):
                holds = True
            if isinstance(value, list | tuple):
                stack.extend(value)
            else:
                stack.append(value)
        if holds:
            found.append(obj)
    return found


def unregistered(app: Any) -> list[str]:
    """The classes of the objects reachable from the service and the streams that hold
    entries and are neither registered with the change point nor known not to be caches."""
    changes: Changes = app.state.service.changes
    return [
        type(obj).__qualname__
        for obj in holders(app.state.service, app.state.live)
        if type(obj).__qualname__ not in NOT_CACHES
        and not any(obj is cache for cache in changes.caches)
    ]


async def test_every_cache_the_service_holds_is_registered_with_the_change_point(app):
    assert unregistered(app) == []
    assert {type(cache).__qualname__ for cache in app.state.service.changes.caches} >= {
        "FamilyCache",
        "SpaceHeads",
    }


async def test_a_cache_added_without_registering_it_is_found(app):
    class Answers:
        def __init__(self) -> None:
            self.held: dict[str, bytes] = {}

    Answers.__module__ = "headway.service.tasks"
    app.state.service.tasks.answers = Answers()
    assert unregistered(app) == [
        "test_a_cache_added_without_registering_it_is_found.<locals>.Answers"
    ]


@pytest.fixture
def heard(app, monkeypatch) -> Callable[[], dict[Changed, tuple[int, int]]]:
    """What the service's change point was told, by kind: how many times this process's
    caches were told to `forget`, and how many times the change was `announce`d to the
    other instances and the feed (each write must do both once)."""
    changes: Changes = app.state.service.changes
    forgotten: Counter = Counter()
    announced: Counter = Counter()
    forget, announce = changes.forget, changes.announce

    def counted_forget(kind: Changed, *args: Any) -> None:
        forgotten[kind] += 1
        forget(kind, *args)

    async def counted_announce(kind: Changed, *args: Any, **options: Any) -> None:
        announced[kind] += 1
        await announce(kind, *args, **options)

    monkeypatch.setattr(changes, "forget", counted_forget)
    monkeypatch.setattr(changes, "announce", counted_announce)

    def told() -> dict[Changed, tuple[int, int]]:
        return {kind: (forgotten[kind], announced[kind]) for kind in forgotten | announced}

    told.clear = lambda: (forgotten.clear(), announced.clear())  # type: ignore[attr-defined]
    return told


async def test_each_write_tells_the_change_point_once(client, space, heard):
    parent = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    child = (await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})).json()
    assert heard() == {Changed.CREATE: (2, 2)}
    await client.put(f"/tasks/{child['uuid']}", json={"current": 1, "end": 2})
    assert heard() == {Changed.CREATE: (2, 2), Changed.REPORT: (1, 1)}
    await client.put(f"/tasks/{child['uuid']}", json={"done": True})  # the parent finishes too
    assert heard() == {Changed.CREATE: (2, 2), Changed.REPORT: (1, 1), Changed.FINISH: (1, 1)}
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    await client.delete(f"/spaces/{space}/shares/{share}")
    assert heard()[Changed.REVOKE] == (1, 1)


async def test_reads_and_refused_writes_tell_the_change_point_nothing(client, space, heard):
    task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    heard.clear()
    await client.get(f"/tasks/{task}")
    await client.get(f"/spaces/{space}")
    refused = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": space})
    assert refused.status_code == 422
    assert heard() == {}
