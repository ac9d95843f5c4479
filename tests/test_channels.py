"""Notification channels through the API: registration (checked, redacted, capped),
finishes and failures reaching real receivers (json, SMTP, ntfy, Gotify) through
Apprise's own plugins, digests, the hour's cap, outages with `Retry-After` (503, 429),
a hanging channel, a private receiver refused at delivery, and the test message."""

from __future__ import annotations

import asyncio
import re

import pytest

from headway.delivery.worker import Worker
from headway.notify.deliver import DIGEST_S, ChannelSender

from .conftest import pairs
from .receivers import GOTIFY_TOKEN, NTFY_TOPIC, HTTPReceiver

pytestmark = pytest.mark.parametrize("backend", pairs(), indirect=True)

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1: these tests allow private addresses."""
    return settings.with_(webhook_allow_private=True, public_url="https://progress.example")


@pytest.fixture
async def sender(app, clock):
    sender = ChannelSender(
        app.state.service.db,
        clock,
        allow_private=True,
        messages_per_hour=60,
        link=app.state.service.channels.link,
        timeout_s=2.0,
    )
    yield sender
    await sender.close()


async def add(client, space, url, **body):
    answer = await client.post(f"/spaces/{space}/channels", json={"url": url, **body})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def finish(client, make_task, title, **values):
    task = await make_task(title=title)
    body = {"done": True, **({"values": values} if values else {})}
    assert (await client.put(f"/tasks/{task}", json=body)).status_code == 200
    return task


async def send_all(sender, clock) -> None:
    """Send everything queued, moving the clock past each digest window."""
    for _ in range(10):
        clock.advance(DIGEST_S + 1)
        if not await sender.run_once():
            return


# --- Registration ---------------------------------------------------------------------------


async def test_a_channel_is_registered_listed_redacted_and_removed(client, space):
    url = "ntfy://user:s3cretpass@127.0.0.1:9/topic"
    made = await add(client, space, url, events=["failed", "completed"], stalled_after=120)
    assert set(made) == {
        "uuid",
        "url",
        "events",
        "steps",
        "stalled_after",
        "share_uuid",
        "created_at",
        "live",
    }
    assert made["live"] is False
    assert "s3cretpass" not in made["url"] and made["url"].startswith("ntfy://")
    assert made["events"] == ["completed", "failed"] and made["stalled_after"] == 120
    listed = (await client.get(f"/spaces/{space}/channels")).json()
    assert [c["uuid"] for c in listed] == [made["uuid"]]
    assert listed[0]["deliveries"] == [] and "s3cretpass" not in str(listed)
    gone = await client.delete(f"/spaces/{space}/channels/{made['uuid']}")
    assert gone.status_code == 204
    assert (await client.get(f"/spaces/{space}/channels")).json() == []
    again = await client.delete(f"/spaces/{space}/channels/{made['uuid']}")
    assert again.status_code == 404 and "error" in again.json()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"url": "file:///etc/passwd"}, "scheme"),
        ({"url": "windows://"}, "scheme"),
        ({"url": "not a url"}, "url"),
        ({"url": "json://127.0.0.1:9/x", "events": ["done"]}, "events"),
        ({"url": "json://127.0.0.1:9/x", "events": []}, "events"),
        ({"url": "json://127.0.0.1:9/x", "stalled_after": 59}, "stalled_after"),
        ({"url": "json://127.0.0.1:9/x", "stalled_after": 604_801}, "stalled_after"),
        (
            {"url": "json://127.0.0.1:9/x", "share_uuid": "0" * 8 + "-0000-4000-8000-" + "0" * 12},
            "share",
        ),
        ({"url": "json://127.0.0.1:9/x", "colour": "red"}, "colour"),
    ],
)
async def test_bad_channels_are_422_naming_why(client, space, body, says):
    answer = await client.post(f"/spaces/{space}/channels", json=body)
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["error"]
    assert (await client.get(f"/spaces/{space}/channels")).json() == []


async def test_a_channel_of_an_unknown_space_is_404(client):
    unknown = "00000000-0000-4000-8000-000000000000"
    answer = await client.post(f"/spaces/{unknown}/channels", json={"url": "json://1.2.3.4/x"})
    assert answer.status_code == 404
    assert (await client.get(f"/spaces/{unknown}/channels")).status_code == 404


async def test_private_hosts_are_refused_unless_allowed(app, client, space):
    app.state.service.channels.rules = app.state.service.channels.rules.__class__(
        None, False, 20, None
    )
    answer = await client.post(f"/spaces/{space}/channels", json={"url": "json://127.0.0.1:9/x"})
    assert answer.status_code == 422 and "public" in answer.json()["error"]


async def test_a_space_holds_at_most_its_cap_of_channels(app, client, space):
    app.state.service.channels.rules = app.state.service.channels.rules.__class__(
        None, True, 2, None
    )
    for _ in range(2):
        await add(client, space, "json://127.0.0.1:9/x")
    answer = await client.post(f"/spaces/{space}/channels", json={"url": "json://127.0.0.1:9/x"})
    assert answer.status_code == 422 and "at most 2" in answer.json()["error"]


# --- Delivery -----------------------------------------------------------------------------


async def test_a_finish_reaches_the_channel_once_with_no_uuid(
    client, space, make_task, json_receiver, sender, clock
):
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    await add(client, space, json_receiver.url(), share_uuid=share)
    task = await finish(client, make_task, "Deploy", log="all green")
    await send_all(sender, clock)
    assert len(json_receiver.arrivals) == 1
    arrival = json_receiver.arrivals[0]
    assert arrival.title.startswith("✓ Deploy finished")
    text = json_receiver.texts()
    assert "all green" in text and "Test space" in text
    assert f"https://progress.example/shared/{share}" in text
    assert task not in text and space not in text
    assert not [u for u in UUID.findall(text) if u != share]
    listed = (await client.get(f"/spaces/{space}/channels")).json()[0]["deliveries"]
    assert [(d["event"], d["outcome"]) for d in listed] == [("completed", "delivered")]
    await send_all(sender, clock)
    assert len(json_receiver.arrivals) == 1  # once


async def test_failed_channels_hear_only_failures_and_completed_ones_every_finish(
    client, space, make_task, sender, clock
):
    with HTTPReceiver("json") as failed, HTTPReceiver("json") as every:
        await add(client, space, failed.url(), events=["failed"])
        await add(client, space, every.url(), events=["completed"])
        await finish(client, make_task, "Build")
        await send_all(sender, clock)
        await finish(client, make_task, "Deploy", error="exit code 3", exit_code=3)
        await send_all(sender, clock)
        assert [a.title for a in failed.arrivals] == ["✗ Deploy failed: exit code 3"]
        assert [a.title.split(" ")[0] for a in every.arrivals] == ["✓", "✗"]


async def test_steps_are_heard_only_where_asked(client, space, make_task, sender, clock):
    with HTTPReceiver("json") as top, HTTPReceiver("json") as steps:
        await add(client, space, top.url())
        await add(client, space, steps.url(), steps=True)
        parent = await make_task(title="Release")
        child = await make_task(title="Migrate", parent_uuid=parent)
        await client.put(f"/tasks/{child}", json={"done": True})  # finishes the parent too
        await send_all(sender, clock)
        assert "Release" in top.texts() and "Migrate" not in top.texts().split("\n")[0]
        assert "Migrate" in steps.texts() and "Release" in steps.texts()


async def test_a_burst_of_finishes_becomes_a_few_digests(
    client, space, make_task, json_receiver, sender, clock
):
    await add(client, space, json_receiver.url())
    # Three times the lines a digest lists (MAX_DIGEST_LINES), finished in bursts.
    tasks = [await make_task(title=f"job {n}") for n in range(60)]
    for start in range(0, 60, 15):
        await asyncio.gather(
            *(client.put(f"/tasks/{t}", json={"done": True}) for t in tasks[start : start + 15])
        )
        await sender.run_once()  # the worker looks as finishes come
    await send_all(sender, clock)
    assert 1 <= len(json_receiver.arrivals) <= 3
    assert "60" in json_receiver.texts() or len(json_receiver.arrivals) > 1
    assert not UUID.findall(json_receiver.texts())


async def test_beyond_the_hours_cap_what_waits_goes_as_one_digest(
    app, client, space, make_task, json_receiver, clock
):
    sender = ChannelSender(
        app.state.service.db, clock, allow_private=True, messages_per_hour=2, link=lambda _: None
    )
    await add(client, space, json_receiver.url())
    for n in range(5):
        await finish(client, make_task, f"job {n}")
        await send_all(sender, clock)
    assert len(json_receiver.arrivals) == 2  # the cap
    clock.advance(3600)
    await send_all(sender, clock)
    assert len(json_receiver.arrivals) == 3  # the other three in one digest
    assert "3" in json_receiver.arrivals[-1].title
    await sender.close()


async def test_an_outage_with_retry_after_delivers_every_message_once(
    client, space, make_task, json_receiver, sender, clock
):
    await add(client, space, json_receiver.url())
    json_receiver.refuse(2, status=503, retry_after="120")
    await finish(client, make_task, "Backup")
    await sender.run_once()
    assert json_receiver.arrivals == [] and json_receiver.requests == 1
    clock.advance(60)
    await sender.run_once()  # Retry-After not yet passed: nothing tried
    assert json_receiver.requests == 1
    clock.advance(61)
    await sender.run_once()  # refused again (429 this time would be the same)
    clock.advance(121)
    await sender.run_once()
    assert len(json_receiver.arrivals) == 1
    await send_all(sender, clock)
    assert len(json_receiver.arrivals) == 1
    log = (await client.get(f"/spaces/{space}/channels")).json()[0]["deliveries"]
    assert [d["outcome"] for d in log] == ["delivered", "failed", "failed"]


async def test_a_hanging_channel_delays_no_other(
    client, space, make_task, json_receiver, sender, clock
):
    with HTTPReceiver("json") as stuck:
        stuck.hang()
        await add(client, space, stuck.url())
        await add(client, space, json_receiver.url())
        await finish(client, make_task, "Index")
        started = await sender.start_due()
        assert len(started) == 2
        async with asyncio.timeout(1.5):
            while not json_receiver.arrivals:
                await asyncio.sleep(0.02)
        assert stuck.arrivals == []
        await asyncio.gather(*started)  # the stuck one times out (2 s) and is retried later
        log = (await client.get(f"/spaces/{space}/channels")).json()
        outcomes = {c["url"].split(":")[2]: c["deliveries"][0]["outcome"] for c in log}
        assert sorted(outcomes.values()) == ["delivered", "failed"]


async def test_a_stopping_worker_hands_back_the_channels_it_was_sending_to(
    app, client, space, make_task, json_receiver, clock
):
    """A send cut short by a stop lets its channel go: the next worker sends at once,
    without waiting for the lease to lapse."""
    with HTTPReceiver("json") as stuck:
        stuck.hang()
        await add(client, space, stuck.url())
        await finish(client, make_task, "Index")
        clock.advance(DIGEST_S + 1)
        db = app.state.service.db
        sending = ChannelSender(
            db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
        )
        stopping = Worker(db, clock, allow_private=True, channels=sending)
        [started] = await sending.start_due()
        async with asyncio.timeout(5):
            while not stuck.requests:
                await asyncio.sleep(0.02)
        await stopping.close()  # SIGTERM while the message is on its way
        assert started.cancelled()
    next_one = ChannelSender(
        db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )
    try:
        assert len(await next_one.start_due()) == 1  # at once: the channel was handed back
    finally:
        await next_one.close()


async def test_the_test_message_is_sent_now_and_logged(client, space, ntfy_receiver):
    made = await add(client, space, ntfy_receiver.url())
    answer = await client.post(f"/spaces/{space}/channels/{made['uuid']}/test")
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "delivered" and answer.json()["event"] == "test"
    assert len(ntfy_receiver.arrivals) == 1
    log = (await client.get(f"/spaces/{space}/channels")).json()[0]["deliveries"]
    assert [(d["event"], d["outcome"]) for d in log] == [("test", "delivered")]
    unknown = "00000000-0000-4000-8000-000000000000"
    assert (await client.post(f"/spaces/{space}/channels/{unknown}/test")).status_code == 404


async def test_a_finish_reaches_mail_ntfy_and_gotify_with_their_urls_redacted(
    client, space, make_task, smtp_receiver, ntfy_receiver, gotify_receiver, sender, clock
):
    ntfy = f"ntfy://alice:n7fyS3cret@127.0.0.1:{ntfy_receiver.port}/{NTFY_TOPIC}"
    secrets = {"mailto": "", "ntfy": "n7fyS3cret", "gotify": GOTIFY_TOKEN}
    made = {
        "mailto": await add(client, space, smtp_receiver.url()),
        "ntfy": await add(client, space, ntfy),
        "gotify": await add(client, space, gotify_receiver.url()),
    }
    task = await finish(client, make_task, "Nightly backup", log="412 files copied")
    await send_all(sender, clock)
    listed = {c["uuid"]: c for c in (await client.get(f"/spaces/{space}/channels")).json()}
    receivers = {"mailto": smtp_receiver, "ntfy": ntfy_receiver, "gotify": gotify_receiver}
    for kind, receiver in receivers.items():
        assert len(receiver.arrivals) == 1, kind
        arrival = receiver.arrivals[0]
        assert arrival.title.startswith("✓ Nightly backup finished"), (kind, arrival.title)
        assert "412 files copied" in arrival.message, kind
        assert not UUID.findall(receiver.texts()), kind
        assert task not in receiver.texts() and space not in receiver.texts()
        channel = listed[made[kind]["uuid"]]
        assert channel["url"] == made[kind]["url"] and channel["url"].startswith(f"{kind}://")
        if secrets[kind]:
            assert secrets[kind] not in str(channel), kind
        assert [(d["event"], d["outcome"]) for d in channel["deliveries"]] == [
            ("completed", "delivered")
        ]


async def test_an_outage_answered_429_then_recovering_delivers_each_message_once(
    client, space, make_task, json_receiver, sender, clock
):
    await add(client, space, json_receiver.url())
    json_receiver.refuse(2, status=429, retry_after="30")
    await finish(client, make_task, "Backup A")
    await sender.run_once()
    assert json_receiver.arrivals == [] and json_receiver.requests == 1
    await finish(client, make_task, "Backup B")  # during the outage: they wait their turn
    await finish(client, make_task, "Backup C")
    clock.advance(20)
    await sender.run_once()  # within the Retry-After: not tried
    assert json_receiver.requests == 1
    clock.advance(11)
    await sender.run_once()  # 429 again, all three together
    assert json_receiver.requests == 2 and json_receiver.arrivals == []
    clock.advance(31)
    await sender.run_once()  # recovered
    await finish(client, make_task, "Backup D")
    await send_all(sender, clock)
    await send_all(sender, clock)
    text = json_receiver.texts()
    for name in ("Backup A", "Backup B", "Backup C", "Backup D"):
        assert text.count(f"✓ {name} finished") == 1, (name, text)
    assert len(json_receiver.arrivals) == 2  # the three as one digest, then D
    assert json_receiver.arrivals[0].title == "3 tasks finished"
    assert json_receiver.requests == 4
    log = (await client.get(f"/spaces/{space}/channels")).json()[0]["deliveries"]
    assert [(d["event"], d["outcome"]) for d in log] == [
        ("completed", "delivered"),
        ("digest", "delivered"),
        ("digest", "failed"),
        ("completed", "failed"),
    ]
    assert "429" in log[-1]["detail"] and "30" in log[-1]["detail"]


async def test_a_private_receiver_is_refused_at_delivery_once_private_addresses_are_off(
    app, client, space, make_task, json_receiver, clock
):
    """Registered while private addresses were allowed; the setting then turned off (a
    worker started with it off): the message is not sent, and the refusal is logged."""
    made = await add(client, space, json_receiver.url())
    strict = ChannelSender(
        app.state.service.db, clock, allow_private=False, messages_per_hour=60, link=lambda _: None
    )
    try:
        await finish(client, make_task, "Report")
        assert await strict.run_once() == 1
        clock.advance(3600)
        await strict.run_once()  # tried again later, refused again
    finally:
        await strict.close()
    assert json_receiver.requests == 0 and json_receiver.arrivals == []
    listed = (await client.get(f"/spaces/{space}/channels")).json()
    log = listed[0]["deliveries"]
    assert [(d["event"], d["outcome"]) for d in log] == [("completed", "failed")] * 2
    assert all("refused" in d["detail"] for d in log), log
    assert listed[0]["url"] == made["url"]
