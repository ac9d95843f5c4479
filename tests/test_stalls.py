"""Stall clocks on a moved clock, on every backend pair: a silent task, a flat one, one
that never reported, a recovery, a finished task that never stalls, and two instances
looking at once that send one message per episode; the lease moving on when the
instance that holds it dies or shuts down."""

from __future__ import annotations

import asyncio

import pytest

from headway.background.loops import stop
from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.notify.stalls import StallWatch
from headway.progress.memory import MemoryProgressStore

from .conftest import pairs

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

AFTER = 600


@pytest.fixture
def settings(settings):
    """Progress outlives the stalls looked for (it expires after a day by default)."""
    return settings.with_(webhook_allow_private=True, progress_ttl=86_400)


@pytest.fixture
async def watch(app, clock):
    """The test's own look; the app's own is stopped, lest it hold the lease."""
    await stop(app.state.loops["stalls"])
    service = app.state.service
    return StallWatch(service.db, service.progress, clock, service.tasks.event_views)


@pytest.fixture
async def sender(app, clock):
    sender = ChannelSender(
        app.state.service.db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )
    yield sender
    await sender.close()


@pytest.fixture
async def channel(client, space, json_receiver):
    body = {"url": json_receiver.url(), "events": ["stalled"], "stalled_after": AFTER}
    answer = await client.post(f"/spaces/{space}/channels", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


async def look(watch, sender, clock, seconds: float) -> list[str]:
    """Move the clock, look for stalls, send what was queued; the titles sent."""
    clock.advance(seconds)
    await watch.step()
    clock.advance(DIGEST_S + 1)
    await sender.run_once()
    return []


def titles(receiver) -> list[str]:
    return [arrival.title for arrival in receiver.arrivals]


async def report(client, task, **body):
    answer = await client.put(f"/tasks/{task}", json=body)
    assert answer.status_code == 200, answer.text


async def test_a_silent_task_stalls_once_and_recovers_when_it_moves(
    client, make_task, channel, watch, sender, clock, json_receiver
):
    task = await make_task(title="Deploy")
    await report(client, task, current=80, end=100)
    await look(watch, sender, clock, AFTER - 30)
    assert titles(json_receiver) == []
    await look(watch, sender, clock, 40)
    assert len(json_receiver.arrivals) == 1
    assert titles(json_receiver)[0].startswith("⏸ Deploy stalled at 80%: no report for 10 min")
    await look(watch, sender, clock, 300)
    await look(watch, sender, clock, 300)
    assert len(json_receiver.arrivals) == 1  # one message per episode
    await report(client, task, current=85, end=100)
    await look(watch, sender, clock, 1)
    assert titles(json_receiver)[1].startswith("▶ Deploy")
    assert "85%" in titles(json_receiver)[1]


async def test_a_task_that_reports_without_moving_stalls_as_flat(
    client, make_task, channel, watch, sender, clock, json_receiver
):
    task = await make_task(title="Sync")
    for _ in range(7):  # a report every 100 s, `current` stuck at 3 of 4
        await report(client, task, current=3, end=4)
        await look(watch, sender, clock, 100)
    assert len(json_receiver.arrivals) == 1
    assert json_receiver.arrivals[0].title.startswith("⏸ Sync stalled at 75%: no progress for 10")


async def test_a_task_that_never_reported_stalls_from_its_creation(
    client, make_task, channel, watch, sender, clock, json_receiver
):
    await make_task(title="Import")
    await look(watch, sender, clock, AFTER + 1)
    assert len(json_receiver.arrivals) == 1
    assert "Import stalled" in json_receiver.arrivals[0].title


async def test_after_a_restart_a_task_silent_since_says_the_server_restarted(
    client, app, make_task, channel, sender, clock, json_receiver
):
    """Progress in process memory is lost with the process: a task that reported before
    the restart is silent since the restart, and the message says that, not that it never
    reported."""
    await stop(app.state.loops["stalls"])
    task = await make_task(title="Import")
    await report(client, task, current=3, end=10)
    clock.advance(3600)  # an hour on, the server restarts: its memory starts empty
    service = app.state.service
    restarted = MemoryProgressStore(86_400, clock)
    watch = StallWatch(service.db, restarted, clock, service.tasks.event_views)
    await look(watch, sender, clock, AFTER - 30)
    assert titles(json_receiver) == []  # silent since the restart, not for an hour
    await look(watch, sender, clock, 120)
    [title] = titles(json_receiver)
    assert title.startswith("⏸ Import stalled")
    assert "no report since the server restarted 11 min" in title, title
    assert "since it started" not in title


async def test_a_finished_task_never_stalls_and_a_finish_ends_an_episode(
    client, make_task, channel, watch, sender, clock, json_receiver
):
    done = await make_task(title="Done early")
    await report(client, done, done=True)
    stuck = await make_task(title="Stuck")
    await look(watch, sender, clock, AFTER + 1)
    assert [t.split(" stalled")[0] for t in titles(json_receiver)] == ["⏸ Stuck"]
    await report(client, stuck, done=True)
    await look(watch, sender, clock, 1)
    assert titles(json_receiver)[1].startswith("▶ Stuck")
    await look(watch, sender, clock, AFTER * 2)
    assert len(json_receiver.arrivals) == 2


async def test_a_parent_moves_with_its_children(
    client, make_task, channel, watch, sender, clock, json_receiver
):
    parent = await make_task(title="Release")
    first = await make_task(title="a", parent_uuid=parent)
    await make_task(title="b", parent_uuid=parent)
    for n in range(1, 8):  # a child moves every 100 s: the parent is not stalled
        await report(client, first, current=n, end=10)
        await look(watch, sender, clock, 100)
    assert titles(json_receiver) == []
    await look(watch, sender, clock, AFTER)
    assert [t.split(" stalled")[0] for t in titles(json_receiver)] == ["⏸ Release"]


async def test_two_instances_looking_send_one_message_per_episode(
    app, client, make_task, channel, sender, clock, json_receiver
):
    service = app.state.service
    await stop(app.state.loops["stalls"])  # the app's own look, which may hold the lease
    one = StallWatch(service.db, service.progress, clock, service.tasks.event_views)
    two = StallWatch(service.db, service.progress, clock, service.tasks.event_views)
    await make_task(title="Crawl")
    clock.advance(AFTER + 1)
    await one.step()
    two.lease.holder = one.lease.holder  # as if the lease were theirs too: the episode row decides
    await two.step()
    clock.advance(DIGEST_S + 1)
    await sender.run_once()
    assert len(json_receiver.arrivals) == 1
    # With the lease as it is, the second does not look at all.
    other = StallWatch(service.db, service.progress, clock, service.tasks.event_views)
    assert await other.step() == 0


async def test_another_instance_takes_over_within_two_looks_of_a_dead_one(
    app, make_task, channel, clock
):
    """The lease lasts two looks; an instance without it looks again when it lapses."""
    service = app.state.service
    await stop(app.state.loops["stalls"])  # the app's own look, which lets the lease go
    one = StallWatch(service.db, service.progress, clock, service.tasks.event_views, scan_s=15)
    two = StallWatch(service.db, service.progress, clock, service.tasks.event_views, scan_s=15)
    await make_task(title="Crawl")
    await one.step()
    await two.step()
    assert two.wait_s == 15  # the lease lapses in two looks (30 s)...
    clock.advance(20)
    await two.step()
    assert two.wait_s == pytest.approx(10, abs=0.1)  # ...and it looks again at that moment
    clock.advance(10)  # `one` died without looking again: its lease has lapsed
    await two.step()
    assert two.wait_s == 15  # it holds the lease now
    clock.advance(5)
    await one.step()  # back: the lease is another's, lapsing in 25 s
    assert not one.lease.held and one.wait_s == 15


async def test_an_instance_shutting_down_lets_the_lease_go(app, make_task, channel, clock):
    service = app.state.service
    await stop(app.state.loops["stalls"])
    one = StallWatch(service.db, service.progress, clock, service.tasks.event_views, scan_s=15)
    two = StallWatch(service.db, service.progress, clock, service.tasks.event_views, scan_s=15)
    await make_task(title="Crawl")
    looking = asyncio.create_task(one.run())
    async with asyncio.timeout(10):
        while not one.lease.held:
            await asyncio.sleep(0.01)
    await stop(looking)
    await two.step()  # no time has passed: the lease was given up, not lapsed
    assert two.lease.held and two.wait_s == 15


async def test_a_space_whose_look_fails_stops_no_other_spaces_stall(
    app, client, make_task, sender, clock, json_receiver, caplog
):
    """A fault in one space's look (here the view of its task) is skipped, logged once
    while it lasts with the space's uuid masked; the other spaces are looked at."""
    await stop(app.state.loops["stalls"])
    broken, victim = sorted([(await client.post("/spaces", json={})).json()["uuid"] for _ in "ab"])
    for space in (broken, victim):
        body = {"url": json_receiver.url(), "events": ["stalled"], "stalled_after": AFTER}
        assert (await client.post(f"/spaces/{space}/channels", json=body)).status_code == 201
    doomed = await make_task(broken, title="Doomed")
    await make_task(victim, title="Import")
    service = app.state.service

    async def views(task_uuids):
        if doomed in task_uuids:
            raise RuntimeError(f"no view of {doomed}")
        return await service.tasks.event_views(task_uuids)

    watch = StallWatch(service.db, service.progress, clock, views)
    await look(watch, sender, clock, AFTER + 1)
    await look(watch, sender, clock, 15)
    assert [title.split(" stalled")[0] for title in titles(json_receiver)] == ["⏸ Import"]
    failed = [r for r in caplog.records if "skipped, it failed" in r.getMessage()]
    assert len(failed) == 1 and broken not in caplog.text and doomed not in caplog.text
