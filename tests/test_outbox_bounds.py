"""Bounded delivery: claiming costs the same whatever the backlog and holds the write lock
briefly, each webhook and channel holds a bounded number of undelivered events for a
bounded time (counted, and shown in its deliveries), and a delivery's name lookup runs on
threads of its own, inside its attempt's timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import ThreadingHTTPServer

import pytest

from headway.delivery.policy import CLAIM
from headway.delivery.worker import Worker
from headway.notify.deliver import channel_sender
from headway.ops import metrics
from headway.storage import deliveries
from headway.storage.database import Database

from .receiver import Receiver


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1; the tests register faster than the rates allow."""
    return settings.with_(webhook_allow_private=True, rate_limits=False)


@pytest.fixture
def dead_url():
    """A URL on 127.0.0.1 where nothing listens: every attempt is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/dead"


async def register(client, space, url):
    answer = await client.post(f"/spaces/{space}/webhooks", json={"url": url})
    assert answer.status_code == 201, answer.text
    return answer.json()["uuid"]


async def finish(client, task):
    answer = await client.put(f"/tasks/{task}", json={"done": True})
    assert answer.status_code == 200, answer.text


def counted(name: str, **labels: str) -> float:
    found = metrics.instruments().registry.get_sample_value(name, labels)
    return found or 0.0


# --- Claims cost the same whatever the backlog -------------------------------------------
# What a claim takes with 10 or 1,000,000 pending, and creates and finishes beside a worker
# churning that backlog, are the benchmark's (bench/scenarios/outbox.py: against its
# smallest backlog, in the same run). Here, what makes them so: every statement reads by
# an index.


async def test_claims_and_give_ups_read_by_index(app):
    """No statement of a claim, a give-up or the sweep scans a table (SQLite's plans)."""
    db = app.state.service.db
    if not db.is_sqlite:
        pytest.skip("the plans checked are SQLite's")
    turn = (
        "SELECT event_id, webhook_uuid FROM (SELECT event_id, webhook_uuid FROM deliveries "
        "WHERE webhook_uuid = ? AND next_attempt_at_us <= ? ORDER BY next_attempt_at_us "
        "LIMIT ?) AS turn0"
    )
    claim = (
        f"WITH turns AS MATERIALIZED ({turn}) UPDATE deliveries SET next_attempt_at_us = ?, "
        "attempts = attempts + 1 WHERE next_attempt_at_us <= ? AND (event_id, webhook_uuid) "
        "IN (SELECT event_id, webhook_uuid FROM turns)"
    )
    statements = [
        (deliveries._WINDOW, (0, 64)),
        (claim, ("w", 0, 4, 0, 0)),
        (
            "SELECT event_id FROM deliveries WHERE created_at_us <= ? "
            "ORDER BY created_at_us LIMIT ?",
            (0, 200),
        ),
        ("SELECT id FROM outbox WHERE webhooks = 0 ORDER BY created_at_us LIMIT ?", (200,)),
        (
            "SELECT event_id FROM deliveries WHERE webhook_uuid = ? AND event_id <> ? "
            "ORDER BY created_at_us LIMIT ?",
            ("w", "e", 1),
        ),
        ("SELECT min(next_due_at_us) FROM webhooks", ()),
        (
            "SELECT min(next_attempt_at_us) FROM deliveries WHERE deliveries.webhook_uuid = ?",
            ("w",),
        ),
    ]
    for sql, params in statements:
        plan = " / ".join(
            str(row[-1]) for row in await db.fetch(f"EXPLAIN QUERY PLAN {sql}", params)
        )
        for table in ("deliveries", "webhooks", "outbox"):
            assert f"SCAN {table}" not in plan.replace(f"SCAN {table} USING", ""), (sql, plan)
        assert "TEMP B-TREE" not in plan, (sql, plan)


async def test_webhooks_held_back_by_a_full_space_do_not_hide_others_beyond_the_window(
    app, client, space, make_task, dead_url, clock
):
    """A claim reads a bounded window of due webhooks; those it passes over (their space
    has all its attempts in flight) go behind, so a claim soon reaches past them."""
    db = app.state.service.db
    for n in range(20):
        await register(client, space, f"{dead_url}?n={n}")
    await finish(client, await make_task())  # 20 deliveries, due first
    clock.advance(1)
    other = (await client.post("/spaces", json={})).json()["uuid"]
    await register(client, other, f"{dead_url}?other")
    await finish(client, await make_task(other))

    claimed = []
    for _ in range(5):
        clock.advance(1)
        now = clock.now_us()
        found = await deliveries.claim_due(
            db,
            now,
            CLAIM.until_us(now),
            4,
            per_space=8,
            per_receiver=64,
            space_load={space: 8},  # the busy space has all its attempts in flight
            window=8,
        )
        claimed.extend(found.claims)
        if claimed:
            break
    assert [claim.space_uuid for claim in claimed] == [other]


# --- A cap per endpoint, and a give-up age ------------------------------------------------


async def test_a_full_webhook_gives_up_its_oldest_events_for_new_ones(
    app, client, space, make_task, dead_url, clock, sql
):
    app.state.service.families.outbox_per_endpoint = 3
    hook = await register(client, space, dead_url)
    before = counted("headway_deliveries_given_up_total", endpoint="webhook", reason="cap")
    tasks = []
    for _ in range(5):
        tasks.append(await make_task())
        await finish(client, tasks[-1])
        clock.advance(1)

    kept = await sql(
        "SELECT outbox.task_uuid FROM deliveries JOIN outbox ON outbox.id = deliveries.event_id "
        "ORDER BY deliveries.created_at_us"
    )
    assert [row[0] for row in kept] == tasks[2:]  # the three newest
    assert await sql("SELECT undelivered FROM webhooks WHERE uuid = ?", hook) == [(3,)]
    assert await sql("SELECT count(*) FROM outbox") == [(3,)]  # the given up are gone
    listed = (await client.get(f"/spaces/{space}/webhooks")).json()
    assert [(d["event"], d["outcome"]) for d in listed[0]["deliveries"]] == [
        ("task.completed", "given_up")
    ] * 2
    assert "more than 3 events undelivered" in listed[0]["deliveries"][0]["detail"]
    after = counted("headway_deliveries_given_up_total", endpoint="webhook", reason="cap")
    assert after - before == 2


async def test_deleted_tasks_leave_their_webhooks_count(
    app, client, space, make_task, dead_url, clock, sql
):
    """A webhook's count follows its deliveries when their tasks are deleted, so the cap
    gives up nothing it need not."""
    app.state.service.families.outbox_per_endpoint = 3
    hook = await register(client, space, dead_url)
    tasks = []
    for _ in range(3):
        tasks.append(await make_task())
        await finish(client, tasks[-1])
        clock.advance(1)
    assert (await client.delete(f"/tasks/{tasks[0]}")).status_code == 204
    assert await sql("SELECT undelivered FROM webhooks WHERE uuid = ?", hook) == [(2,)]
    await finish(client, await make_task())
    assert await sql("SELECT undelivered FROM webhooks WHERE uuid = ?", hook) == [(3,)]
    assert await sql("SELECT count(*) FROM deliveries") == [(3,)]
    listed = (await client.get(f"/spaces/{space}/webhooks")).json()
    assert listed[0]["deliveries"] == []  # nothing given up


async def test_an_event_undelivered_for_the_give_up_age_is_given_up_whatever_its_attempts(
    app, client, space, make_task, clock, sql
):
    receiver = Receiver(statuses=[500] * 10).start()
    worker = Worker(
        app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0, give_up_s=3600
    )
    before = counted("headway_deliveries_given_up_total", endpoint="webhook", reason="age")
    try:
        hook = await register(client, space, receiver.url)
        await finish(client, await make_task())
        assert await worker.run_once() == 1  # attempt 1: 500
        clock.advance(1800)
        assert await worker.run_once() == 1  # attempt 2: 500, of 15
        assert await worker.sweep() == 0
        clock.advance(1800)
        assert await worker.sweep() == 1  # an hour after its creation
    finally:
        await worker.close()
        receiver.stop()
    assert await sql("SELECT count(*) FROM deliveries") == [(0,)]
    assert await sql("SELECT count(*) FROM outbox") == [(0,)]
    assert await sql("SELECT undelivered FROM webhooks WHERE uuid = ?", hook) == [(0,)]
    listed = (await client.get(f"/spaces/{space}/webhooks")).json()[0]["deliveries"]
    assert [d["outcome"] for d in listed] == ["given_up", "failed", "failed"]
    assert listed[0]["detail"] == "undelivered 1 h after it was created: given up"
    assert listed[1]["detail"] == "HTTP 500"
    after = counted("headway_deliveries_given_up_total", endpoint="webhook", reason="age")
    assert after - before == 1


async def test_the_give_up_age_and_the_cap_are_settings(app, settings, clock):
    custom = settings.with_(outbox_per_endpoint=7, delivery_give_up=5400)
    assert channel_sender(custom, app.state.service.db, clock).give_up_us == 5400 * 1_000_000
    from headway.config import Settings

    read = Settings.from_env(
        {"HEADWAY_OUTBOX_PER_ENDPOINT": "7", "HEADWAY_DELIVERY_GIVE_UP": "90m"}
    )
    assert (read.outbox_per_endpoint, read.delivery_give_up) == (7, 5400)
    defaults = Settings.from_env({})
    assert (defaults.outbox_per_endpoint, defaults.delivery_give_up) == (10_000, 86_400)


# --- Channels: the same bounds --------------------------------------------------------------


async def test_a_full_channel_gives_up_its_oldest_messages(
    app, client, space, make_task, clock, sql
):
    app.state.service.families.outbox_per_endpoint = 2
    made = await client.post(f"/spaces/{space}/channels", json={"url": "json://127.0.0.1:9/x"})
    assert made.status_code == 201, made.text
    channel = made.json()["uuid"]
    before = counted("headway_deliveries_given_up_total", endpoint="channel", reason="cap")
    tasks = []
    for _ in range(4):
        tasks.append(await make_task())
        await finish(client, tasks[-1])
        clock.advance(1)

    kept = await sql("SELECT task_uuid FROM channel_deliveries ORDER BY created_at_us")
    assert [row[0] for row in kept] == tasks[2:]
    assert await sql("SELECT queued FROM channels WHERE uuid = ?", channel) == [(2,)]
    listed = (await client.get(f"/spaces/{space}/channels")).json()[0]["deliveries"]
    assert [(d["event"], d["outcome"]) for d in listed] == [("completed", "given_up")] * 2
    assert "more than 2 messages queued" in listed[0]["detail"]
    after = counted("headway_deliveries_given_up_total", endpoint="channel", reason="cap")
    assert after - before == 2


async def test_channel_messages_are_given_up_at_the_configured_age(
    app, client, space, make_task, clock, sql, settings
):
    made = await client.post(f"/spaces/{space}/channels", json={"url": "json://127.0.0.1:9/x"})
    channel = made.json()["uuid"]
    sender = channel_sender(settings.with_(delivery_give_up=120), app.state.service.db, clock)
    before = counted("headway_deliveries_given_up_total", endpoint="channel", reason="age")
    try:
        await finish(client, await make_task())
        clock.advance(121)
        assert await sender.run_once() == 1
    finally:
        await sender.close()
    assert await sql("SELECT count(*) FROM channel_deliveries") == [(0,)]
    assert await sql("SELECT queued FROM channels WHERE uuid = ?", channel) == [(0,)]
    listed = (await client.get(f"/spaces/{space}/channels")).json()[0]["deliveries"]
    assert [d["outcome"] for d in listed] == ["given_up"]
    after = counted("headway_deliveries_given_up_total", endpoint="channel", reason="age")
    assert after - before == 1


# --- Name lookups: inside the attempt, on threads of their own ------------------------------


@pytest.fixture
def hanging_resolver(monkeypatch):
    """The system's resolver, except that names under `.hang.test` hang until released,
    then resolve to 127.0.0.1: `(release, names asked)`."""
    release, asked = threading.Event(), []
    system = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else str(host)  # anyio passes bytes
        if name.endswith(".hang.test"):
            asked.append(name)
            release.wait(30)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port)))]
        return system(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield release, asked
    release.set()


async def test_a_hanging_resolver_holds_neither_up_nor_an_attempt_past_its_timeout(
    app, client, make_task, clock, settings, hanging_resolver, monkeypatch
):
    """40 deliveries whose names hang (more than the default executor's threads): `/up`
    stays 200, each attempt ends at its timeout, well within its lease, and once the
    names resolve every event is delivered exactly once to each webhook by two workers."""
    release, asked = hanging_resolver
    # 40 connections at once: more than socketserver's backlog of 5 would let through.
    monkeypatch.setattr(ThreadingHTTPServer, "request_queue_size", 64)
    receiver = Receiver().start()
    port = receiver.server.server_address[1]
    databases = [Database(settings.database_url) for _ in range(2)]
    workers = [
        Worker(db, clock, allow_private=True, attempt_timeout_s=1.0, batch=64) for db in databases
    ]
    first, second = workers
    try:
        for n in range(5):
            space = (await client.post("/spaces", json={})).json()["uuid"]
            for k in range(8):
                await register(client, space, f"http://h{n}-{k}.hang.test:{port}/hook")
            await finish(client, await make_task(space))

        attempts = asyncio.create_task(first.run_once())
        async with asyncio.timeout(30):
            while len(asked) < 6:  # lookups hang: at least a default executor's worth
                await asyncio.sleep(0.01)
        up = await client.get("/up")
        assert up.status_code == 200, up.text
        # The lookups hang until released: each attempt that ends, ends at its own 1 s (the
        # bound here only guards against a hang, on a machine as busy as it may be).
        async with asyncio.timeout(30):
            assert await attempts == 40
        assert receiver.deliveries == []
        assert await second.run_once() == 0  # retried later, not left to a lapsing lease

        release.set()
        clock.advance(CLAIM.seconds)
        # Two workers with an attempt's usual 10 s: 40 posts at once to one receiver can take
        # a busy machine more than the 1 s above.
        workers += [Worker(db, clock, allow_private=True, batch=64) for db in databases]
        async with asyncio.timeout(60):
            made = await asyncio.gather(workers[2].run_once(), workers[3].run_once())
        assert sum(made) == 40
        await asyncio.sleep(0.2)  # a hung lookup's late answer would have posted by now
        delivered = [(d.headers["webhook-id"], d.headers["host"]) for d in receiver.deliveries]
        assert len(delivered) == 40 and len(set(delivered)) == 40
    finally:
        release.set()
        for worker in workers:
            await worker.close()
        for db in databases:
            await db.close()
        receiver.stop()


async def test_a_registration_whose_name_hangs_is_refused_in_time(
    app, client, space, settings, monkeypatch, hanging_resolver
):
    """Registration looks the name up on the webhooks' threads too, for at most a while."""
    from headway.service import webhooks as webhook_service

    app.state.service.webhooks.allow_private = False
    monkeypatch.setattr(webhook_service, "LOOKUP_TIMEOUT_S", 0.5)
    async with asyncio.timeout(30):  # the lookup hangs until released: a hang guard
        answer = await client.post(
            f"/spaces/{space}/webhooks", json={"url": "https://slow.hang.test/hook"}
        )
    assert answer.status_code == 422
    assert "did not resolve within 0.5 s" in answer.json()["error"]
    assert (await client.get("/up")).status_code == 200


# --- The migration -------------------------------------------------------------------------


async def test_upgrading_counts_the_backlog_that_is_there(tmp_path):
    """A database with undelivered events from before 0009: each webhook's count and
    next due time, each delivery's creation, each channel's count and each event's
    webhooks are filled in, so caps, claims and give-ups go on from there."""
    import sqlite3

    from alembic import command
    from alembic.config import Config

    from headway.storage.database import MIGRATIONS

    path = tmp_path / "old.db"
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0008")
    engine.dispose()
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            INSERT INTO spaces (uuid, created_at_us) VALUES ('s', 1);
            INSERT INTO webhooks (uuid, space_uuid, url, secret, created_at_us, receiver)
                VALUES ('w', 's', 'https://a.example/', 'k', 1, 'https://a.example:443');
            INSERT INTO outbox (id, space_uuid, task_uuid, type, payload, created_at_us)
                VALUES ('e1', 's', 't', 'task.completed', '{}', 100),
                       ('e2', 's', 't', 'task.completed', '{}', 200),
                       ('e3', 's', 't', 'task.completed', '{}', 300);
            INSERT INTO deliveries (event_id, webhook_uuid, attempts, next_attempt_at_us)
                VALUES ('e1', 'w', 3, 5000), ('e2', 'w', 0, 250);
            INSERT INTO channels (uuid, space_uuid, url, redacted, on_completed, on_failed,
                on_stalled, steps, stalled_after_s, created_at_us)
                VALUES ('c', 's', 'json://x', 'json://x', 1, 1, 1, 0, 60, 1);
            INSERT INTO channel_deliveries (id, channel_uuid, kind, payload, created_at_us,
                next_attempt_at_us) VALUES ('e1:c', 'c', 'completed', '{}', 100, 100);
            """
        )
    db = Database(f"sqlite:///{path}")
    try:
        await db.migrate()
        assert await db.fetch("SELECT undelivered, next_due_at_us FROM webhooks", ()) == [(2, 250)]
        created = await db.fetch("SELECT event_id, created_at_us FROM deliveries ORDER BY 1", ())
        assert [tuple(row) for row in created] == [("e1", 100), ("e2", 200)]
        watched = await db.fetch("SELECT id, webhooks FROM outbox ORDER BY id", ())
        assert [tuple(row) for row in watched] == [("e1", 1), ("e2", 1), ("e3", 0)]
        assert await db.fetch("SELECT queued FROM channels", ()) == [(1,)]
    finally:
        await db.close()
