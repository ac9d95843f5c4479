"""The unit of work: every cache the service holds hears what units publish, and every
write runs in exactly one unit, published once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from headway.caches.bounded import Bounded
from headway.domain.tasks import Changed
from headway.service import Writes

# Objects of the service that hold entries but are no cache of spaces or tasks, and why.
NOT_CACHES = {
    "Writes": "where units are opened: the caches it tells",
    "LocalFeed": "the change feed: every unit publishes its changes to it",
    "RedisFeed": "the change feed: every unit publishes its changes to it",
    "Live": "the open streams: each space's watch hears changes through the feed",
    "Holdings": "the streams each client and network holds: counts, no copy of a task",
    "MemoryProgressStore": "the progress store: the live state itself, not a copy of it",
    "Coalesced": "script calls of the Redis store waiting to share one round trip",
    "Parts": "the parts of a look now failing, each logged once: names, no copy of a task",
    "Activity": "spaces used lately, to be written: a note about a deleted space updates nothing",
}
# What holds entries: a cache built on the bounded building block holds one.
CONTAINERS = (dict, set, list, Bounded)


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
        if (
            id(obj) in seen
            or not type(obj).__module__.startswith("headway")
            or isinstance(obj, Bounded)  # its cache holds it, and is found
        ):
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
    writes: Writes = app.state.service.writes
    return [
        type(obj).__qualname__
        for obj in holders(app.state.service, app.state.live)
        if type(obj).__qualname__ not in NOT_CACHES
        and not any(obj is cache for cache in writes.caches)
    ]


async def test_every_cache_the_service_holds_is_registered_with_the_change_point(app):
    assert unregistered(app) == []
    kinds = {
        kind.__qualname__
        for cache in app.state.service.writes.caches
        for kind in type(cache).__mro__
    }
    assert kinds >= {"FamilyCache", "SpaceHeads"}  # a VersionedFamilyCache among several


async def test_a_cache_added_without_registering_it_is_found(app):
    class Answers:
        def __init__(self) -> None:
            self.held: dict[str, bytes] = {}

    class Kept:
        def __init__(self) -> None:
            self.held: Bounded[str, bytes] = Bounded(count=10)

    Answers.__module__ = Kept.__module__ = "headway.service.tasks"
    app.state.service.tasks.answers = Answers()
    app.state.service.tasks.kept = Kept()
    assert sorted(unregistered(app)) == [
        "test_a_cache_added_without_registering_it_is_found.<locals>.Answers",
        "test_a_cache_added_without_registering_it_is_found.<locals>.Kept",
    ]


@pytest.fixture
def settings(settings):
    """A channel to 127.0.0.1 is among the writes: private addresses allowed."""
    return settings.with_(webhook_allow_private=True)


@pytest.fixture
def units(app, monkeypatch) -> Callable[[], list[list[Changed]]]:
    """The units of work published since the last call: for each, the kinds of change
    it told, in order."""
    writes: Writes = app.state.service.writes
    published: list[list[Changed]] = []
    publish = writes.publish

    async def counted(unit: Any) -> None:
        published.append([told.kind for told in unit.told])
        await publish(unit)

    monkeypatch.setattr(writes, "publish", counted)

    def since() -> list[list[Changed]]:
        found = list(published)
        published.clear()
        return found

    return since


async def test_each_write_runs_in_one_unit_published_once(client, space, units):
    units()
    parent = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    assert units() == [[Changed.CREATE]]
    child = (await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})).json()
    assert units() == [[Changed.CREATE]]
    await client.put(f"/tasks/{child['uuid']}", json={"current": 1, "end": 2})
    assert units() == [[Changed.REPORT]]
    # The parent finishes with its step: one unit tells of both (the step's change names it).
    await client.put(f"/tasks/{child['uuid']}", json={"done": True})
    assert units() == [[Changed.FINISH]]
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    assert units() == [[]]
    await client.delete(f"/spaces/{space}/shares/{share}")
    assert units() == [[Changed.REVOKE]]
    channel = await client.post(f"/spaces/{space}/channels", json={"url": "json://127.0.0.1:9/"})
    assert channel.status_code == 201
    assert units() == [[]]
    await client.delete(f"/spaces/{space}/channels/{channel.json()['uuid']}")
    assert units() == [[]]
    await client.delete(f"/tasks/{parent}")
    assert units() == [[Changed.DELETE, Changed.DELETE]]
    assert (await client.delete(f"/spaces/{space}")).status_code == 204
    assert units() == [[Changed.DROP]]


async def test_a_delete_that_finishes_the_parent_is_one_unit(client, space, units):
    parent = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    steps = [
        (await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})).json()["uuid"]
        for _ in range(2)
    ]
    await client.put(f"/tasks/{steps[0]}", json={"done": True})
    units()
    await client.delete(f"/tasks/{steps[1]}")
    assert units() == [[Changed.DELETE, Changed.FINISH]]
    assert (await client.get(f"/tasks/{parent}")).json()["finished_at"] is not None


async def test_a_create_that_makes_room_is_one_unit(app, client, space, units):
    app.state.service.caps.tasks_per_space = 1
    old = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    await client.put(f"/tasks/{old}", json={"done": True})
    units()
    new = await client.post(f"/spaces/{space}/tasks", json={})
    assert new.status_code == 201
    assert units() == [[Changed.PRUNE, Changed.CREATE]]
    assert (await client.get(f"/tasks/{old}")).status_code == 404


async def test_reads_and_refused_writes_tell_nothing(client, space, units):
    task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    units()
    await client.get(f"/tasks/{task}")
    await client.get(f"/spaces/{space}")
    refused = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": space})
    assert refused.status_code == 422
    assert [told for told in units() if told] == []
