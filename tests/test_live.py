"""Live messages through the whole service: a channel with `live` keeps one message per
task on its service (local stand-ins written to each service's API), created at the
task's first report, edited at most once per interval plus at each change of state, left
showing its end; on every backend pair, and once across two instances."""

from __future__ import annotations

import asyncio
import re

import pytest

from headway.app import create_app
from headway.background.loops import stop
from headway.notify.live import LiveWatch

from . import live_standins
from .conftest import pairs, running
from .live_standins import TelegramStandIn

ntfy_standin = live_standins.ntfy_standin
telegram_standin = live_standins.telegram_standin
discord_standin = live_standins.discord_standin
slack_standin = live_standins.slack_standin

INTERVAL = 15
UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)


@pytest.fixture
def settings(settings, ntfy_standin, telegram_standin, discord_standin, slack_standin):
    endpoints = (
        ("discord", discord_standin.base_url),
        ("ntfy", ntfy_standin.base_url),
        ("slack", slack_standin.base_url),
        ("telegram", telegram_standin.base_url),
    )
    return settings.with_(
        webhook_allow_private=True,
        progress_ttl=86_400,
        live_endpoints=endpoints,
        live_edit_interval=INTERVAL,
        live_messages=3,
    )


@pytest.fixture
async def watch(app) -> LiveWatch:
    """The app's own watch, its loop stopped: the test looks when it wants."""
    await stop(app.state.loops["live"])
    return app.state.live_watch


async def live_channel(client, space, url: str, **more) -> dict:
    body = {"url": url, "events": ["completed"], "live": True, **more}
    answer = await client.post(f"/spaces/{space}/channels", json=body)
    assert answer.status_code == 201, answer.text
    assert answer.json()["live"] is True
    return answer.json()


async def report(client, task: str, **body) -> None:
    answer = await client.put(f"/tasks/{task}", json=body)
    assert answer.status_code == 200, answer.text


def sends(stand_in, *paths: str) -> list:
    return [call for call in stand_in.calls if any(p in call.path for p in paths)]


@pytest.mark.parametrize("backend", pairs(), indirect=True)
async def test_one_message_per_task_created_at_its_first_report_edited_and_left_finished(
    client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    await live_channel(client, space, telegram_standin.url())
    task = await make_task(title="Nightly build")
    assert await watch.run_once() == 0  # created, never reported: nothing yet
    await report(client, task, current=10, end=100, values={"log": "compiling"})
    assert await watch.run_once() == 1
    created = sends(telegram_standin, "sendMessage")
    assert len(created) == 1
    (shown,) = telegram_standin.messages.values()
    assert "Nightly build: 10%" in shown and "▓░░░░░░░░░ 10%" in shown
    assert "Log: compiling" in shown

    clock.advance(INTERVAL / 3)
    await report(client, task, current=40, end=100)
    assert await watch.run_once() == 0  # within the interval: waits
    clock.advance(INTERVAL)
    assert await watch.run_once() == 1
    (shown,) = telegram_standin.messages.values()
    assert "Nightly build: 40%" in shown and "▓▓▓▓░░░░░░ 40%" in shown
    assert await watch.run_once() == 0  # unchanged: not sent again
    clock.advance(INTERVAL)
    assert await watch.run_once() == 0

    await report(client, task, current=100, end=100, done=True)
    assert await watch.run_once() == 1  # a change of state: at once
    (shown,) = telegram_standin.messages.values()
    assert "✓ Nightly build finished" in shown and "▓▓▓▓▓▓▓▓▓▓ 100%" in shown
    clock.advance(INTERVAL)
    assert await watch.run_once() == 0  # the message is left as it ended
    assert len(sends(telegram_standin, "sendMessage")) == 1
    assert len(sends(telegram_standin, "editMessageText")) == 2
    assert not UUID.search(" ".join(telegram_standin.messages.values()))
    channels = (await client.get(f"/spaces/{space}/channels")).json()
    logged = [(d["event"], d["outcome"]) for d in channels[0]["deliveries"]]
    assert logged == [("live", "delivered"), ("live", "delivered")]


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
@pytest.mark.parametrize("service", ["ntfy", "discord", "slack"])
async def test_each_service_shows_the_last_text_of_one_message(
    request, service, client, space, make_task, clock, watch
):
    stand_in = request.getfixturevalue(f"{service}_standin")
    await live_channel(client, space, stand_in.url())
    task = await make_task(title="Deploy <b>*prod*</b> & `api` @everyone")
    for current in (20, 70):
        await report(client, task, current=current, end=100)
        assert await watch.run_once() == 1
        clock.advance(INTERVAL)
    await report(client, task, done=True)
    assert await watch.run_once() == 1
    assert len(stand_in.messages) == 1, stand_in.messages
    (shown,) = stand_in.messages.values()
    if service == "ntfy":
        (title,) = stand_in.titles.values()
        shown = f"{title}\n{shown}"
    assert "✓ Deploy <b>*prod*</b> & `api` @everyone finished" in shown, shown
    assert "▓▓▓▓▓▓▓▓▓▓ 100%" in shown
    assert not UUID.search(shown)


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_a_stall_and_its_end_are_each_sent_at_once(
    client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    await live_channel(client, space, telegram_standin.url(), stalled_after=60)
    task = await make_task(title="Import")
    await report(client, task, current=3, end=10)
    assert await watch.run_once() == 1
    clock.advance(59)
    assert await watch.run_once() == 0  # nothing new to show
    clock.advance(2)
    assert await watch.run_once() == 1  # silent for its stalled_after: at once
    (shown,) = telegram_standin.messages.values()
    assert "⏸ Import: 30% (stalled)" in shown and "No report for 1 min" in shown
    clock.advance(1)
    await report(client, task, current=4, end=10)
    assert await watch.run_once() == 1  # moving again: at once, within the interval
    (shown,) = telegram_standin.messages.values()
    assert "⏳ Import: 40%" in shown and "stalled" not in shown


@pytest.mark.parametrize("backend", pairs(), indirect=True)
async def test_a_late_run_and_a_failure_each_edit_the_message_at_once(
    client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    for _ in range(5):  # runs of a minute: the job's usual duration is a minute
        run = await make_task(title="Nightly ETL")
        clock.advance(60)
        await report(client, run, done=True)
    await live_channel(client, space, telegram_standin.url())
    task = await make_task(title="Nightly ETL")
    await report(client, task, current=1, end=100)
    assert await watch.run_once() == 1
    (shown,) = telegram_standin.messages.values()
    assert "⏳ Nightly ETL: 1%" in shown
    clock.advance(130)  # beyond max(1.2 x p95, p50 + 60 s): late
    await report(client, task, current=2, end=100)
    assert await watch.run_once() == 1
    (shown,) = telegram_standin.messages.values()
    assert "⏰ Nightly ETL: 2% (running late)" in shown and "usually 1 min" in shown
    clock.advance(1)
    await report(client, task, done=True, values={"error": "exit code 3"})
    assert await watch.run_once() == 1  # within the interval: a change of state
    (shown,) = telegram_standin.messages.values()
    assert "✗ Nightly ETL failed: exit code 3" in shown, shown
    assert len(sends(telegram_standin, "sendMessage")) == 1


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_urls_that_cannot_edit_are_refused_naming_those_that_can(client, space):
    for url in ("json://127.0.0.1:9/hook", "slack://T1ABCD2EF/B1ABCD2EF/abcdefghijklmnopqrstuvwx"):
        answer = await client.post(f"/spaces/{space}/channels", json={"url": url, "live": True})
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert "Slack" in error and ("ntfy" in error or "bot token" in error), error
    assert (await client.get(f"/spaces/{space}/channels")).json() == []


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_a_channel_keeps_at_most_its_cap_and_a_deleted_task_drops_its_message(
    client, space, make_task, clock, watch, sql, telegram_standin: TelegramStandIn
):
    await live_channel(client, space, telegram_standin.url())
    tasks = [await make_task(title=f"Shard {n}") for n in range(5)]
    for task in tasks:
        await report(client, task, current=1, end=10)
    assert await watch.run_once() == 1  # one channel: its sends go one after the other
    assert len(telegram_standin.messages) == 3  # HEADWAY_LIVE_MESSAGES, the oldest first
    assert len(await sql("SELECT task_uuid FROM live_messages")) == 3
    assert (await client.delete(f"/tasks/{tasks[0]}")).status_code == 204
    assert not await sql("SELECT 1 FROM live_messages WHERE task_uuid = ?", tasks[0])
    clock.advance(INTERVAL)
    await watch.run_once()  # the room it left goes to the next task
    assert len(telegram_standin.messages) == 4
    assert "Shard 3" in " ".join(telegram_standin.messages.values())


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_in_a_space_of_ten_thousand_running_tasks_those_that_report_get_the_messages(
    app, client, space, clock, watch, sql, telegram_standin: TelegramStandIn
):
    """Ten thousand tasks that never reported (written straight into the database), then
    five that report: the channel's messages go to the oldest three of those five."""
    at = clock.now_us() - 20_000_000
    async with app.state.service.db.write() as st:
        await st.rows(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000) "
            "INSERT INTO tasks (uuid, space_uuid, title, created_at_us) SELECT "
            "printf('%08x-0000-4000-8000-%012x', i, i), ?, 'silent ' || i, ? + i FROM n",
            (space, at),
        )
    assert (await sql("SELECT count(*) FROM tasks WHERE space_uuid = ?", space))[0][0] == 10_000
    await live_channel(client, space, telegram_standin.url())
    reporting = [f"{n:08x}-0000-4000-8000-{n:012x}" for n in range(9_996, 10_001)]
    for task in reporting:
        await report(client, task, current=1, end=2)
    assert await watch.run_once() == 1
    assert len(telegram_standin.messages) == 3  # HEADWAY_LIVE_MESSAGES here
    shown = " ".join(telegram_standin.messages.values())
    assert all(f"silent {n}" in shown for n in (9_996, 9_997, 9_998)), shown
    clock.advance(INTERVAL)
    assert await watch.run_once() == 0  # full, unchanged: nothing read, nothing sent


@pytest.mark.parametrize("backend", pairs(database="postgres"), indirect=True)
async def test_a_deleted_channel_or_space_drops_its_messages_references(
    client, space, make_task, watch, sql, telegram_standin: TelegramStandIn
):
    first = await live_channel(client, space, telegram_standin.url())
    await live_channel(client, space, telegram_standin.url())
    task = await make_task(title="Deploy")
    await report(client, task, current=1, end=3)
    await watch.run_once()
    assert len(await sql("SELECT ref FROM live_messages WHERE ref IS NOT NULL")) == 2
    gone = await client.delete(f"/spaces/{space}/channels/{first['uuid']}")
    assert gone.status_code == 204
    assert await sql("SELECT 1 FROM live_messages WHERE channel_uuid = ?", first["uuid"]) == []
    assert len(await sql("SELECT 1 FROM live_messages")) == 1
    assert (await client.delete(f"/spaces/{space}")).status_code == 204
    assert await sql("SELECT 1 FROM live_messages") == []
    assert await watch.run_once() == 0  # nothing left to keep up to date
    assert len(sends(telegram_standin, "sendMessage")) == 2


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_a_task_reporting_all_the_time_makes_a_few_edits_a_minute(
    client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    await live_channel(client, space, telegram_standin.url())
    task = await make_task(title="Hot loop")
    reports = 0
    for second in range(60):  # a minute of reports, 20 a second, looked at every second
        for n in range(20):
            await report(client, task, current=second * 20 + n, end=2000)
            reports += 1
            clock.advance(0.05)
        await watch.run_once()
    calls = len(telegram_standin.calls)
    assert reports == 1200
    assert 4 <= calls <= 5, calls  # created, then one edit per 15 s


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_a_429_is_waited_out_and_refused_credentials_give_the_message_up(
    client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    await live_channel(client, space, telegram_standin.url())
    task = await make_task(title="Backup")
    telegram_standin.rate_limit(times=1, retry_after=40)
    await report(client, task, current=1, end=10)
    await watch.run_once()
    assert telegram_standin.messages == {}
    clock.advance(30)
    assert await watch.run_once() == 0  # still within its retry_after
    clock.advance(11)
    assert await watch.run_once() == 1
    assert len(telegram_standin.messages) == 1

    telegram_standin.refuse_credentials()
    clock.advance(INTERVAL)
    await report(client, task, current=5, end=10)
    await watch.run_once()
    before = len(telegram_standin.calls)
    for _ in range(3):
        clock.advance(3600)
        await report(client, task, current=6, end=10)
        await watch.run_once()
    assert len(telegram_standin.calls) == before  # given up: never tried again
    channels = (await client.get(f"/spaces/{space}/channels")).json()
    outcomes = [(d["event"], d["outcome"]) for d in channels[0]["deliveries"]]
    assert outcomes[0] == ("live", "given_up") and ("live", "failed") in outcomes
    assert "Unauthorized" in channels[0]["deliveries"][0]["detail"]
    assert "AAHeadway" not in str(channels)  # no token in what is shown


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_a_service_down_mid_run_is_retried_and_the_same_message_goes_on(
    client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    await live_channel(client, space, telegram_standin.url())
    task = await make_task(title="Restore")
    await report(client, task, current=1, end=4)
    assert await watch.run_once() == 1
    telegram_standin.go_down()
    clock.advance(INTERVAL)
    await report(client, task, current=2, end=4)
    await watch.run_once()
    channels = (await client.get(f"/spaces/{space}/channels")).json()
    failed = channels[0]["deliveries"][0]
    assert (failed["event"], failed["outcome"]) == ("live", "failed"), failed
    assert "could not connect" in failed["detail"] and "127.0.0.1" not in failed["detail"]
    await report(client, task, current=3, end=4)
    clock.advance(5)
    assert await watch.run_once() == 0  # waits for its retry (10 s at first)
    telegram_standin.come_back()
    clock.advance(10)
    assert await watch.run_once() == 1
    await report(client, task, done=True)
    assert await watch.run_once() == 1
    assert len(sends(telegram_standin, "sendMessage")) == 1  # the same message, edited on
    (shown,) = telegram_standin.messages.values()
    assert "✓ Restore finished" in shown


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="redis"), indirect=True)
async def test_a_scheme_the_operator_no_longer_allows_gives_the_message_up(
    settings, client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    """An instance started with HEADWAY_CHANNEL_SCHEMES narrowed since the channel was
    added (on the same database and Redis) gives its live message up."""
    narrowed = create_app(settings.with_(channel_schemes=("json", "jsons")), clock)
    async with running(narrowed):
        await stop(narrowed.state.loops["live"])
        later = narrowed.state.live_watch
        await live_channel(client, space, telegram_standin.url())
        task = await make_task(title="Sync")
        await report(client, task, current=1, end=2)
        await later.run_once()
        clock.advance(3600)
        await report(client, task, current=2, end=2)
        assert await later.run_once() == 0  # given up: never tried again
    assert telegram_standin.calls == []
    (channel,) = (await client.get(f"/spaces/{space}/channels")).json()
    given_up = channel["deliveries"][0]
    assert (given_up["event"], given_up["outcome"]) == ("live", "given_up")
    assert "not allowed" in given_up["detail"], given_up


@pytest.mark.parametrize("backend", pairs(database="postgres", progress="redis"), indirect=True)
async def test_two_instances_make_one_message_per_task(
    app, settings, client, space, make_task, clock, watch, telegram_standin: TelegramStandIn
):
    other = create_app(settings, clock)
    async with running(other):
        await stop(other.state.loops["live"])
        await live_channel(client, space, telegram_standin.url())
        tasks = [await make_task(title=f"Job {n}") for n in range(2)]
        for task in tasks:
            await report(client, task, current=1, end=4)
        await asyncio.gather(watch.run_once(), other.state.live_watch.run_once())
        clock.advance(INTERVAL + 1)
        for task in tasks:
            await report(client, task, done=True)
        await asyncio.gather(watch.run_once(), other.state.live_watch.run_once())
        await asyncio.gather(watch.run_once(), other.state.live_watch.run_once())
    assert len(sends(telegram_standin, "sendMessage")) == 2
    assert len(telegram_standin.messages) == 2
    assert all("finished" in text for text in telegram_standin.messages.values())


@pytest.fixture(scope="module")
def synapse():
    from .synapse import synapse_server

    yield from synapse_server()


@pytest.mark.parametrize("backend", pairs(database="sqlite", progress="memory"), indirect=True)
async def test_matrix_shows_one_message_replaced_until_it_shows_the_end(
    client, space, make_task, clock, watch, synapse
):
    await live_channel(client, space, synapse.url())
    task = await make_task(title="Nightly <b>build</b> *fast*")
    for current in (25, 75):
        await report(client, task, current=current, end=100, values={"log": f"at {current}"})
        assert await watch.run_once() == 1
        clock.advance(INTERVAL)
    await report(client, task, done=True)
    assert await watch.run_once() == 1
    shown = await asyncio.to_thread(synapse.shown)
    originals = [
        e for e in await asyncio.to_thread(synapse.messages) if "m.relates_to" not in e["content"]
    ]
    assert len(shown) == len(originals) == 1  # one message, replaced twice
    (text,) = shown.values()
    assert text.startswith("✓ Nightly <b>build</b> *fast* finished"), text
    assert "▓▓▓▓▓▓▓▓▓▓ 100%" in text and "Log: at 75" in text
    assert not UUID.search(text)
