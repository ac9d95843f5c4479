"""Stalls looked for by two instances of the service on one database (and one Redis, where
the pair has it), each an app of its own with its own `StallWatch`, on one moved clock:
one message per episode when both look at once, and a lease handed over when the
instance that looked stops, with no episode told twice."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from headway.app import create_app
from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.notify.stalls import LEASE_NAME

from .conftest import BACKENDS, running

# Several instances share their progress through Redis; on the SQLite file without it,
# the tasks here never report, so each instance's own memory has nothing to share.
pytestmark = pytest.mark.parametrize(
    "backend", [name for name in BACKENDS if name != "postgres+memory"], indirect=True
)

AFTER = 600
SCAN = 15  # the lease lasts three looks: 45 s on the moved clock


@pytest.fixture
def settings(settings):
    return settings.with_(webhook_allow_private=True, progress_ttl=86_400, stall_scan=SCAN)


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


@contextlib.asynccontextmanager
async def instance(settings, clock):
    """Another instance of the service on the same database and Redis; its own looks
    for stalls stopped, so that only the test's calls of `step()` look."""
    app = create_app(settings, clock)
    async with running(app):
        await quiet(app)
        yield app


async def quiet(app) -> None:
    """Stop the app's own stall loop (it looks every SCAN real seconds): the test steps."""
    loop = app.state.loops["stalls"]
    loop.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await loop


async def holder(sql) -> str:
    [(name,)] = await sql("SELECT holder FROM leases WHERE name = ?", LEASE_NAME)
    return name


async def sent(sender, clock) -> None:
    clock.advance(DIGEST_S + 1)
    await sender.run_once()


def titles(receiver) -> list[str]:
    return [arrival.title for arrival in receiver.arrivals]


async def test_two_instances_looking_at_once_send_one_message_per_episode(
    app, settings, make_task, channel, sender, clock, json_receiver
):
    await quiet(app)
    async with instance(settings, clock) as other:
        one, two = app.state.stalls, other.state.stalls
        assert one.lease.holder != two.lease.holder
        await make_task(title="Crawl")
        await make_task(title="Index")
        clock.advance(AFTER - 30)
        assert await asyncio.gather(one.step(), two.step()) == [0, 0]
        clock.advance(40)  # past both deadlines
        queued = await asyncio.gather(two.step(), one.step())
        assert sorted(queued) == [0, 2]  # one instance looked, and told both
        await sent(sender, clock)
        for _ in range(4):  # both go on looking, minutes apart: nothing more is told
            clock.advance(300)
            assert sum(await asyncio.gather(one.step(), two.step())) == 0
            await sent(sender, clock)
    assert titles(json_receiver) == ["2 tasks stalled"]  # told together, as one digest
    text = json_receiver.texts()
    assert text.count("⏸ Crawl stalled") == text.count("⏸ Index stalled") == 1, text


async def test_a_lapsed_lease_is_taken_over_and_no_episode_is_told_twice(
    app, settings, client, make_task, channel, sender, clock, json_receiver, sql
):
    await quiet(app)
    second = app.state.stalls
    early = await make_task(title="Early")
    async with instance(settings, clock) as first_app:
        first = first_app.state.stalls
        assert await first.step() == 0  # nothing due yet; the lease is the first's
        assert await second.step() == 0
        assert await holder(sql) == first.lease.holder
        clock.advance(10)
        await make_task(title="Late")  # due 10 s after Early
        clock.advance(AFTER - 9)
        assert await first.step() == 1  # Early told; Late not due yet
        assert await second.step() == 0  # the first holds the lease
        await sent(sender, clock)
    # The first instance has stopped looking (stopped altogether). Its lease runs on
    # until three of its looks' time has passed; Late falls due meanwhile.
    clock.advance(SCAN)
    assert await second.step() == 0
    assert await holder(sql) == first.lease.holder
    clock.advance(2 * SCAN + 1)
    assert await second.step() == 1  # taken over: Late told, Early not again
    assert await holder(sql) == second.lease.holder
    await sent(sender, clock)
    clock.advance(300)
    assert await second.step() == 0
    await client.put(f"/tasks/{early}", json={"done": True})
    assert await second.step() == 1  # Early's episode, opened by the first, ends here
    await sent(sender, clock)
    told = [t.split(" stalled")[0].split(" is moving")[0] for t in titles(json_receiver)]
    assert told == ["⏸ Early", "⏸ Late", "▶ Early"]
