"""Late runs told to channels, on a moved clock, on every backend pair: once a run, only
for a job with a usual duration, cleared when the run ends (so the next late run is told
again), steps only to channels that want them, and once across two instances."""

from __future__ import annotations

import pytest

from headway.background.loops import stop
from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.notify.late import LateWatch
from headway.notify.stalls import StallWatch

from .conftest import pairs

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)


@pytest.fixture
def settings(settings):
    return settings.with_(webhook_allow_private=True, progress_ttl=86_400)


def late_watch(app, clock) -> StallWatch:
    service = app.state.service
    late = LateWatch(service.db, service.estimates.of_tasks, service.tasks.event_views, cap=100)
    return StallWatch(
        service.db, service.progress, clock, service.tasks.event_views, also=late.step
    )


@pytest.fixture
async def watch(app, clock):
    """The test's own look; the app's own is stopped, lest it hold the lease."""
    await stop(app.state.loops["stalls"])
    return late_watch(app, clock)


@pytest.fixture
async def sender(app, clock):
    sender = ChannelSender(
        app.state.service.db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )
    yield sender
    await sender.close()


async def channel(client, space, receiver, events=("late",), **more):
    body = {"url": receiver.url(), "events": list(events), **more}
    answer = await client.post(f"/spaces/{space}/channels", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


async def history(client, make_task, clock, title: str = "Nightly ETL", runs: int = 5) -> None:
    """Runs of a minute each: the job's usual duration is a minute."""
    for _ in range(runs):
        task = await make_task(title=title)
        clock.advance(60)
        assert (await client.put(f"/tasks/{task}", json={"done": True})).status_code == 200


async def look(watch, sender, clock, seconds: float) -> int:
    clock.advance(seconds)
    queued = await watch.step()
    clock.advance(DIGEST_S + 1)
    await sender.run_once()
    return queued


def titles(receiver) -> list[str]:
    return [arrival.title for arrival in receiver.arrivals]


async def test_a_run_beyond_its_usual_duration_is_told_late_once(
    client, space, make_task, watch, sender, clock, json_receiver
):
    await channel(client, space, json_receiver)
    await history(client, make_task, clock)
    task = await make_task(title="Nightly ETL")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 100})
    assert await look(watch, sender, clock, 100) == 0  # 100 s: within max(72, 120) s
    assert await look(watch, sender, clock, 30) == 1  # 136 s (a look sends 6 s on)
    assert titles(json_receiver) == [
        "⏰ Nightly ETL is running late at 1%: 2 min 16 s so far, usually 1 min"
    ]
    assert await look(watch, sender, clock, 600) == 0  # once a run
    # It ends (failed: a failed run is never counted in the usual duration).
    await client.put(f"/tasks/{task}", json={"values": {"error": "timeout"}, "done": True})
    await look(watch, sender, clock, 1)
    again = await make_task(title="Nightly ETL")  # the next run: told again when late
    await client.put(f"/tasks/{again}", json={"current": 1, "end": 100})
    assert await look(watch, sender, clock, 200) == 1
    assert len(titles(json_receiver)) == 2


async def test_a_job_without_history_or_a_task_without_a_title_is_never_late(
    client, space, make_task, watch, sender, clock, json_receiver
):
    await channel(client, space, json_receiver)
    await history(client, make_task, clock, runs=4)  # one short of a usual duration
    await make_task(title="Nightly ETL")
    await make_task()
    assert await look(watch, sender, clock, 86_000) == 0
    assert titles(json_receiver) == []


async def test_a_late_step_is_told_only_to_channels_that_hear_steps(
    client, space, make_task, watch, sender, clock, json_receiver
):
    parent = await make_task(title="Release")
    for _ in range(5):
        step = await make_task(title="Build", parent_uuid=parent)
        clock.advance(10)
        await client.put(f"/tasks/{step}", json={"done": True})
    await channel(client, space, json_receiver)  # not steps
    late_step = await make_task(title="Build", parent_uuid=parent)
    await client.put(f"/tasks/{late_step}", json={"current": 1, "end": 10})
    assert await look(watch, sender, clock, 120) == 0
    await channel(client, space, json_receiver, steps=True)
    assert await look(watch, sender, clock, 1) == 1
    assert titles(json_receiver) == [
        "⏰ Build is running late at 10%: 2 min 7 s so far, usually 10 s"
    ]


async def test_two_instances_looking_send_one_message_per_late_run(
    app, client, space, make_task, clock, json_receiver, sender
):
    await stop(app.state.loops["stalls"])
    await channel(client, space, json_receiver)
    await history(client, make_task, clock)
    task = await make_task(title="Nightly ETL")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 100})
    clock.advance(200)
    one, other = late_watch(app, clock), late_watch(app, clock)
    # Both hold the lease in turn (the first lets it go): each looks at the same run.
    assert await one.step() == 1
    await one.let_go()
    assert await other.step() == 0
    clock.advance(DIGEST_S + 1)
    await sender.run_once()
    assert len(titles(json_receiver)) == 1


async def test_a_channel_lists_late_among_its_events(client, space, json_receiver):
    made = await channel(client, space, json_receiver, events=("completed", "late"))
    assert made["events"] == ["completed", "late"]
    listed = (await client.get(f"/spaces/{space}/channels")).json()
    assert listed[0]["events"] == ["completed", "late"]


async def test_a_finish_says_how_long_it_took_against_the_usual(
    client, space, make_task, watch, sender, clock, json_receiver
):
    await history(client, make_task, clock)  # before the channel: not told
    await channel(client, space, json_receiver, events=("completed",))
    task = await make_task(title="Nightly ETL")
    clock.advance(90)
    await client.put(f"/tasks/{task}", json={"done": True})
    failed = await make_task(title="Nightly ETL")
    clock.advance(30)
    await client.put(f"/tasks/{failed}", json={"values": {"error": "disk full"}, "done": True})
    fresh = await make_task(title="First of its kind")
    await client.put(f"/tasks/{fresh}", json={"done": True})
    await look(watch, sender, clock, 0)
    [digest] = json_receiver.arrivals  # three finishes at once: one digest
    assert "✓ Nightly ETL finished in 1 min 30 s, usually 1 min" in digest.message
    assert "✗ Nightly ETL failed: disk full after 30 s, usually 1 min" in digest.message
    assert "✓ First of its kind finished in under 0.1 s\n" in digest.message + "\n"


async def two_spaces(client) -> tuple[str, str]:
    """Two new spaces, the one the watch looks at first (by uuid) first."""
    made = [(await client.post("/spaces", json={})).json()["uuid"] for _ in range(2)]
    first, second = sorted(made)
    return first, second


async def test_a_task_with_a_huge_end_stops_no_late_alert(
    client, make_task, watch, sender, clock, json_receiver
):
    """A task whose pace would reach its `end` past year 9999, in the space looked at
    first, has no time left to say; the late run of another space is told on time."""
    attacker, victim = await two_spaces(client)
    await channel(client, attacker, json_receiver)
    await channel(client, victim, json_receiver)
    await history(client, lambda **body: make_task(victim, **body), clock)
    huge = await make_task(attacker, title="Nightly ETL")
    task = await make_task(victim, title="Nightly ETL")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 100})
    for current in (1, 2, 3):
        answer = await client.put(f"/tasks/{huge}", json={"current": current, "end": 1e308})
        assert answer.status_code == 200
        clock.advance(5.5)
    assert await look(watch, sender, clock, 89) == 0  # 105.5 s: within max(72, 120) s
    assert await look(watch, sender, clock, 30) == 1  # 141.5 s (a look sends 6 s on)
    assert titles(json_receiver) == [
        "⏰ Nightly ETL is running late at 1%: 2 min 21 s so far, usually 1 min"
    ]


async def test_a_space_whose_look_fails_is_skipped_and_logged_once(
    app, client, make_task, sender, clock, json_receiver, caplog
):
    """A fault in one space's look (here its estimates) stops no other space's late
    alert; it is logged once while it lasts, the space's uuid masked."""
    await stop(app.state.loops["stalls"])
    broken, victim = await two_spaces(client)
    await channel(client, broken, json_receiver)
    await channel(client, victim, json_receiver)
    await history(client, lambda **body: make_task(victim, **body), clock)
    doomed = await make_task(broken, title="Nightly ETL")
    task = await make_task(victim, title="Nightly ETL")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 100})
    service = app.state.service

    async def estimates(task_uuids):
        if doomed in task_uuids:
            raise RuntimeError(f"no estimate for {doomed} of {broken}")
        return await service.estimates.of_tasks(task_uuids)

    late = LateWatch(service.db, estimates, service.tasks.event_views, cap=100)
    watch = StallWatch(
        service.db, service.progress, clock, service.tasks.event_views, also=late.step
    )
    assert await look(watch, sender, clock, 136) == 1
    assert await look(watch, sender, clock, 15) == 0
    assert titles(json_receiver) == [
        "⏰ Nightly ETL is running late at 1%: 2 min 16 s so far, usually 1 min"
    ]
    failed = [r for r in caplog.records if "skipped, it failed" in r.getMessage()]
    assert len(failed) == 1 and "RuntimeError" in failed[0].getMessage()
    assert broken not in caplog.text and doomed not in caplog.text
