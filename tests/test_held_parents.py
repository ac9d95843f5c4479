"""Parents held open by their own reporter, on every backend pair: a parent that received a
report of its own finishes only by its own `done`, however its steps end (finished,
deleted), also once that report's progress has expired; a parent nobody reports to
finishes with its last step, as before; a held parent whose `done` was forgotten is told
as a stall."""

from __future__ import annotations

import pytest

from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.notify.stalls import StallWatch

from .conftest import pairs
from .support import outbox_events
from .test_reports import put, read
from .test_stalls import stop

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

TTL = 600


@pytest.fixture
def settings(settings):
    """Progress that expires in ten minutes, so that a hold is shown to outlast it."""
    return settings.with_(webhook_allow_private=True, progress_ttl=TTL)


async def test_a_parent_that_reported_before_its_steps_waits_for_its_own_done(
    client, make_task, sql, clock
):
    parent = await make_task(title="Deploy")
    await put(client, parent, {})  # work started, nothing to count yet
    build = await make_task(title="Build", parent_uuid=parent)
    await put(client, build, {"done": True})  # the only step so far ends
    assert (await read(client, parent))["finished_at"] is None
    release = await make_task(title="Release", parent_uuid=parent)
    clock.advance(2)
    await put(client, release, {"current": 1, "end": 1})

    held = await read(client, parent)
    assert held["finished_at"] is None
    assert (held["progress"]["current"], held["progress"]["end"]) == (2, 2)
    assert held["progress"]["ratio"] == 1
    assert len(await outbox_events(sql, parent)) == 0

    clock.advance(1)
    done = await put(client, parent, {"done": True})
    assert done["finished_at"] is not None and done["duration"] == 3
    assert len(await outbox_events(sql, parent)) == 1


async def test_a_parent_that_reports_once_its_steps_exist_is_held_too(client, make_task, sql):
    parent = await make_task(title="Training")
    epochs = [await make_task(title=f"Epoch {n}", parent_uuid=parent) for n in range(2)]
    answer = await put(client, parent, {"current": 0, "end": 2, "values": {"unit": "it"}})
    assert answer["finished_at"] is None
    for epoch in epochs:
        await put(client, epoch, {"done": True})
    assert (await read(client, parent))["finished_at"] is None
    # Its own counts are ignored, even when they reach its end.
    assert (await put(client, parent, {"current": 2, "end": 2}))["finished_at"] is None
    assert len(await outbox_events(sql, parent)) == 0
    await put(client, parent, {"done": True})
    assert len(await outbox_events(sql, parent)) == 1


async def test_a_parent_nobody_reports_to_finishes_with_its_last_step(client, make_task, sql):
    parent = await make_task(title="Pipeline")
    steps = [await make_task(title=f"Stage {n}", parent_uuid=parent) for n in range(2)]
    await put(client, steps[0], {"done": True})
    assert (await read(client, parent))["finished_at"] is None
    last = await put(client, steps[1], {"done": True})
    assert (await read(client, parent))["finished_at"] == last["finished_at"]
    assert len(await outbox_events(sql, parent)) == 1


async def test_a_hold_outlasts_the_expiry_of_the_report_that_made_it(client, make_task, sql, clock):
    parent = await make_task(title="Nightly")
    await put(client, parent, {"values": {"log": "starting"}})
    step = await make_task(title="Long step", parent_uuid=parent)  # marks the parent held
    clock.advance(TTL + 60)  # the parent's own progress has expired
    await put(client, step, {"done": True})
    assert (await read(client, parent))["finished_at"] is None
    assert len(await outbox_events(sql, parent)) == 0


async def test_a_step_finishing_marks_a_parent_that_reported_after_its_steps(
    client, make_task, sql, clock
):
    parent = await make_task(title="Nightly")
    first, last = [await make_task(title=f"Step {n}", parent_uuid=parent) for n in range(2)]
    await put(client, parent, {})
    await put(client, first, {"done": True})  # marks the parent held
    clock.advance(TTL + 60)
    await put(client, last, {"done": True})
    assert (await read(client, parent))["finished_at"] is None


async def test_deleting_the_last_open_step_of_a_held_parent_leaves_it_open(client, make_task, sql):
    parent = await make_task(title="Deploy")
    await put(client, parent, {})
    done, dropped = [await make_task(title=f"Step {n}", parent_uuid=parent) for n in range(2)]
    await put(client, done, {"done": True})
    assert (await client.delete(f"/tasks/{dropped}")).status_code == 204
    family = await read(client, parent)
    assert family["finished_at"] is None
    assert (family["progress"]["current"], family["progress"]["end"]) == (1, 1)
    assert len(await outbox_events(sql, parent)) == 0


async def test_a_held_parent_whose_done_was_forgotten_is_told_as_a_stall(
    app, client, space, make_task, clock, json_receiver
):
    body = {"url": json_receiver.url(), "events": ["stalled"], "stalled_after": 300}
    assert (await client.post(f"/spaces/{space}/channels", json=body)).status_code == 201
    await stop(app.state.loops["stalls"])
    service = app.state.service
    watch = StallWatch(service.db, service.progress, clock, service.tasks.event_views)
    sender = ChannelSender(
        service.db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )
    try:
        parent = await make_task(title="Deploy")
        await put(client, parent, {})
        step = await make_task(title="Build", parent_uuid=parent)
        clock.advance(100)
        await put(client, step, {"done": True})  # every step done, the parent's `done` forgotten
        for _ in range(2):
            clock.advance(200)
            await watch.step()
        clock.advance(DIGEST_S + 1)
        await sender.run_once()
    finally:
        await sender.close()
    titles = [arrival.title for arrival in json_receiver.arrivals]
    assert len(titles) == 1 and titles[0].startswith("⏸ Deploy stalled"), titles
