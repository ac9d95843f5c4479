"""A slow host holds up only its own channels: another space's many channels aimed at a
receiver that does not answer leave a healthy channel's events and live messages
delivered at their first attempt, and what was queued for a space deleted meanwhile never
reaches the slow host. Real receivers (the slow one on 127.0.0.2, the healthy ones on
127.0.0.1: two hosts), on every backend pair."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from headway.notify.deliver import ChannelSender

from . import live_standins
from .conftest import pairs
from .live_standins import TelegramStandIn
from .receivers import HTTPReceiver

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

telegram_standin = live_standins.telegram_standin

SLOW_HOST = "127.0.0.2"
# Longer than any wait below: the slow host's sends hold their sending threads throughout
# (the host answered after 9 s of a 10 s timeout; here it answers when released).
SLOW_TIMEOUT_S = 60.0
WAIT_S = 20.0  # a generous bound for what takes milliseconds


@pytest.fixture
def settings(settings, telegram_standin):
    return settings.with_(
        webhook_allow_private=True,
        rate_limits=False,  # one address registers many channels
        progress_ttl=86_400,
        live_endpoints=(("telegram", telegram_standin.base_url),),
    )


@pytest.fixture
async def watch(app):
    """The app's live watch, its loop stopped (the test looks when it wants), giving the
    slow host's sends all the time they ask for."""
    from headway.background.loops import stop

    await stop(app.state.loops["live"])
    watch = app.state.live_watch
    watch.timeout_s = SLOW_TIMEOUT_S
    return watch


@pytest.fixture
def slow():
    """An ntfy server that takes every request and answers none until released."""
    receiver = HTTPReceiver("ntfy", host=SLOW_HOST)
    receiver.hang()
    try:
        yield receiver
    finally:
        receiver.stop()


def sender(app, clock, timeout_s: float) -> ChannelSender:
    return ChannelSender(
        app.state.service.db,
        clock,
        allow_private=True,
        messages_per_hour=60,
        link=lambda _: None,
        timeout_s=timeout_s,
    )


async def new_space(client) -> str:
    answer = await client.post("/spaces", json={"title": "A space"})
    assert answer.status_code == 201, answer.text
    return answer.json()["uuid"]


async def add(client, space: str, url: str, **body) -> dict:
    answer = await client.post(f"/spaces/{space}/channels", json={"url": url, **body})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def report(client, task: str, **body) -> None:
    answer = await client.put(f"/tasks/{task}", json=body)
    assert answer.status_code == 200, answer.text


async def until(what: Callable[[], object], timeout_s: float = WAIT_S) -> None:
    async with asyncio.timeout(timeout_s):
        while not what():
            await asyncio.sleep(0.02)


async def outcomes(client, space: str) -> list[list[tuple[str, str]]]:
    """Each channel's deliveries, oldest first: (event, outcome)."""
    found = (await client.get(f"/spaces/{space}/channels")).json()
    return [[(d["event"], d["outcome"]) for d in reversed(c["deliveries"])] for c in found]


async def settle(tasks: list[asyncio.Task[None]]) -> None:
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_slow_host_holds_up_no_event_of_another_space(
    app, client, make_task, clock, slow, json_receiver
):
    """12 channels of one space aimed at a host that never answers, their messages due
    first: a healthy channel of another space is sent to at once and delivered at its
    first attempt, while the slow host sees only a few sends at a time (test messages
    included: one beyond is not sent)."""
    attacker = await new_space(client)
    added = [await add(client, attacker, slow.url()) for _ in range(12)]
    await report(client, await make_task(attacker, title="Flood"), done=True)
    clock.advance(1)
    victim = await new_space(client)
    await add(client, victim, json_receiver.url())
    await report(client, await make_task(victim, title="Nightly"), done=True)
    sending = sender(app, clock, SLOW_TIMEOUT_S)
    started = await sending.start_due()
    try:
        await until(lambda: json_receiver.arrivals)
        await until(lambda: slow.requests >= 4)
        test = await client.post(f"/spaces/{attacker}/channels/{added[0]['uuid']}/test")
        assert test.json()["detail"].startswith("not sent: "), test.json()
        assert slow.requests <= 4  # a few at a time: the rest wait, and are not attempted
    finally:
        slow.release()
        await settle(started)
        await sending.close()
    assert len(json_receiver.arrivals) == 1
    assert await outcomes(client, victim) == [[("completed", "delivered")]]
    attempted = [[o for o in log if o[0] != "test"] for log in await outcomes(client, attacker)]
    attempted = [log for log in attempted if log]
    assert len(attempted) == 4 and all(log == [("completed", "failed")] for log in attempted)


async def test_a_slow_host_holds_up_no_live_message_nor_event_of_another_space(
    app, client, make_task, clock, slow, watch, json_receiver, telegram_standin: TelegramStandIn
):
    """19 live channels of one space editing on a host that never answers: another
    space's live message is made and its event delivered, each at its first attempt
    (the event's send has 3 s: waiting for a sending thread is not part of them)."""
    victim = await new_space(client)
    await add(client, victim, telegram_standin.url(), live=True, events=["failed"])
    await add(client, victim, json_receiver.url())
    attacker = await new_space(client)
    for _ in range(19):
        await add(client, attacker, slow.url(), live=True)
    await report(client, await make_task(attacker, title="Flood"), current=1, end=9)
    flooding = await watch.step()
    try:
        await until(lambda: slow.requests >= 4)
        await report(client, await make_task(victim, title="Backup"), current=1, end=4)
        shown = await watch.step()
        await report(client, await make_task(victim, title="Nightly"), done=True)
        await sender(app, clock, 3.0).run_once()
        await until(lambda: telegram_standin.messages)
        await settle(shown)
        assert slow.requests <= 4
    finally:
        slow.release()
        await settle(flooding)
    assert len(json_receiver.arrivals) == 1
    (shown_text,) = telegram_standin.messages.values()
    assert "Backup" in shown_text
    assert sorted(await outcomes(client, victim)) == [
        [("completed", "delivered")],
        [("live", "delivered")],
    ]


async def test_sends_queued_for_a_deleted_space_never_reach_the_slow_host(
    client, make_task, clock, watch
):
    """Ten live channels keeping two messages each on a host that then stops answering;
    the space is deleted while the first edits hang: none of the edits it had queued
    starts after."""
    slow = live_standins.NtfyStandIn(host=SLOW_HOST)
    try:
        attacker = await new_space(client)
        for _ in range(10):
            await add(client, attacker, slow.url(), live=True)
        tasks = [await make_task(attacker, title=f"Step {n}") for n in range(2)]
        for task in tasks:
            await report(client, task, current=1, end=9)
        async with asyncio.timeout(WAIT_S):
            while len(slow.messages) < 20:
                await watch.run_once()
        clock.advance(60)
        for task in tasks:
            await report(client, task, current=5, end=9)
        slow.hang()
        before = slow.requests
        started = await watch.step()
        try:
            await until(lambda: slow.requests >= before + 4)
            assert (await client.delete(f"/spaces/{attacker}")).status_code == 204
            hung = slow.requests
        finally:
            slow.release()
            await settle(started)
        assert await watch.run_once() == 0
        assert slow.requests == hung
    finally:
        slow.stop()
