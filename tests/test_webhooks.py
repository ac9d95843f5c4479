"""Completion notifications: webhook registration, the worker, signatures, once-only."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from standardwebhooks import Webhook

from headway.app import create_app
from headway.config import Settings
from headway.delivery import worker as worker_module
from headway.delivery.policy import CLAIM, GIVE_UP_S, MAX_ATTEMPTS, retry_delay_s
from headway.delivery.worker import Worker
from headway.storage.database import Database

from .receiver import Receiver


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1, so these tests allow private addresses."""
    return settings.with_(webhook_allow_private=True)


@pytest.fixture
async def worker(app, clock):
    worker = Worker(app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0)
    yield worker
    await worker.close()


async def register(client, space, url):
    response = await client.post(f"/spaces/{space}/webhooks", json={"url": url})
    assert response.status_code == 201, response.text
    return response.json()


def assert_signed(delivery, secret):
    """The delivery verifies under the Standard Webhooks scheme with the webhook's secret."""
    payload = Webhook(secret).verify(delivery.body, delivery.headers)
    assert payload["type"] == "task.completed"
    return payload


# --- Registration -------------------------------------------------------------------------


async def test_register_list_and_delete_webhook(client, space):
    created = await register(client, space, "https://93.184.216.34/hooks/headway")
    assert created["secret"].startswith("whsec_")
    assert set(created) == {"uuid", "url", "secret"}
    listed = (await client.get(f"/spaces/{space}/webhooks")).json()
    assert listed == [{"uuid": created["uuid"], "url": created["url"], "deliveries": []}]
    deleted = await client.delete(f"/spaces/{space}/webhooks/{created['uuid']}")
    assert deleted.status_code == 204
    again = await client.delete(f"/spaces/{space}/webhooks/{created['uuid']}")
    assert again.status_code == 404
    assert again.json()["error"]
    assert (await client.get(f"/spaces/{space}/webhooks")).json() == []


async def test_webhook_of_unknown_space_is_404(client):
    unknown = "00000000-0000-4000-8000-000000000000"
    for response in (
        await client.post(f"/spaces/{unknown}/webhooks", json={"url": "https://93.184.216.34/"}),
        await client.get(f"/spaces/{unknown}/webhooks"),
        await client.delete(f"/spaces/{unknown}/webhooks/{unknown}"),
    ):
        assert response.status_code == 404
        assert "error" in response.json()


@pytest.mark.parametrize(
    "body",
    [
        {"url": "ftp://93.184.216.34/x"},
        {"url": "not a url"},
        {"url": "/relative/path"},
        {"url": 5},
        {"url": "https://93.184.216.34/", "extra": 1},
        {},
    ],
)
async def test_bad_webhook_body_is_422(client, space, body):
    response = await client.post(f"/spaces/{space}/webhooks", json=body)
    assert response.status_code == 422
    assert response.json()["error"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.0.0.1/hook",
        "http://[::1]/hook",
        "http://localhost:8080/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://192.168.1.10/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://224.0.0.1/hook",
        "http://[fec0::1]/hook",
        "http://[3fff::1]/hook",
        "http://192.88.99.1/hook",
        "http://[2606:4700:4700::1111%25eth0]/hook",
    ],
)
async def test_private_addresses_are_refused_by_default(tmp_path, clock, url):
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path}/refuse.db", run_worker=False), clock
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            space = (await client.post("/spaces", json={})).json()["uuid"]
            response = await client.post(f"/spaces/{space}/webhooks", json={"url": url})
            assert response.status_code == 422
            error = response.json()["error"]
            assert "refused" in error and "HEADWAY_ALLOW_PRIVATE_TARGETS=true" in error
            if "localhost" in url:  # named, without the address it resolves to
                assert "the host localhost resolves to a non-public address" in error
                assert "127.0.0.1" not in error
            assert (await client.get(f"/spaces/{space}/webhooks")).json() == []


# --- Delivery: exactly one event per completion -----------------------------------------


async def test_put_done_delivers_one_signed_event(client, space, make_task, receiver, worker):
    hook = await register(client, space, receiver.url)
    task = await make_task(title="build")
    await client.put(f"/tasks/{task}", json={"current": 3, "end": 10})
    finished = (await client.put(f"/tasks/{task}", json={"done": True})).json()

    assert await worker.run_once() == 1
    assert len(receiver.deliveries) == 1
    payload = assert_signed(receiver.deliveries[0], hook["secret"])
    assert payload["data"] == finished
    assert payload["data"]["progress"]["current"] == 3
    assert receiver.deliveries[0].headers["webhook-id"].startswith("msg_")

    # Later writes to the finished task send nothing more.
    await client.put(f"/tasks/{task}", json={"current": 1})
    await client.put(f"/tasks/{task}", json={"done": True})
    await client.get(f"/tasks/{task}/report?done=true")
    assert await worker.run_once() == 0
    assert len(receiver.deliveries) == 1


async def test_get_report_done_delivers_one_event(client, space, make_task, receiver, worker):
    await register(client, space, receiver.url)
    task = await make_task()
    await client.get(f"/tasks/{task}/report?done=true")
    await client.get(f"/tasks/{task}/report?done=true")
    await worker.run_once()
    assert len(receiver.deliveries) == 1
    assert json.loads(receiver.deliveries[0].body)["data"]["uuid"] == task


async def test_current_reaching_end_delivers_one_event(client, space, make_task, receiver, worker):
    await register(client, space, receiver.url)
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"current": 9, "end": 10})
    await worker.run_once()
    assert receiver.deliveries == []
    await client.put(f"/tasks/{task}", json={"current": 10, "end": 10})
    await client.put(f"/tasks/{task}", json={"current": 11, "end": 10})
    await worker.run_once()
    assert len(receiver.deliveries) == 1
    assert json.loads(receiver.deliveries[0].body)["data"]["progress"]["ratio"] == 1


async def test_last_child_finishing_gives_parent_its_own_event(
    client, space, make_task, receiver, worker
):
    hook = await register(client, space, receiver.url)
    parent = await make_task(title="deploy")
    first = await make_task(title="step 1", parent_uuid=parent)
    second = await make_task(title="step 2", parent_uuid=parent)
    await client.put(f"/tasks/{first}", json={"done": True})
    await worker.run_once()
    assert [json.loads(d.body)["data"]["uuid"] for d in receiver.deliveries] == [first]

    await client.put(f"/tasks/{second}", json={"current": 1, "end": 1})
    await worker.run_once()
    events = [assert_signed(d, hook["secret"])["data"] for d in receiver.deliveries]
    assert sorted(e["uuid"] for e in events[1:]) == sorted([second, parent])
    parent_event = next(e for e in events if e["uuid"] == parent)
    assert parent_event["progress"]["aggregated"] is True
    assert parent_event["progress"]["current"] == 2
    assert len(set(receiver.ids())) == 3


async def test_fifty_concurrent_completions_deliver_one_event(
    client, space, make_task, receiver, worker
):
    await register(client, space, receiver.url)
    task = await make_task()
    answers = await asyncio.gather(
        *(client.put(f"/tasks/{task}", json={"current": 5, "end": 5}) for _ in range(50))
    )
    assert {a.status_code for a in answers} == {200}
    while await worker.run_once():
        pass
    assert len(receiver.deliveries) == 1


async def test_every_webhook_of_the_space_gets_the_event(client, space, make_task, worker):
    receivers = [Receiver().start() for _ in range(2)]
    try:
        hooks = [await register(client, space, r.url) for r in receivers]
        task = await make_task()
        await client.put(f"/tasks/{task}", json={"done": True})
        await worker.run_once()
        for r, hook in zip(receivers, hooks, strict=True):
            assert len(r.deliveries) == 1
            assert_signed(r.deliveries[0], hook["secret"])
        assert receivers[0].ids() == receivers[1].ids()
    finally:
        for r in receivers:
            r.stop()


# --- Retries ------------------------------------------------------------------------------


async def test_failed_delivery_is_retried_with_backoff_and_the_same_id(
    client, space, make_task, receiver, worker, clock
):
    hook = await register(client, space, receiver.url)
    receiver.statuses = [500, 503]
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})

    assert await worker.run_once() == 1  # attempt 1: 500
    clock.advance(retry_delay_s(1) - 1)
    assert await worker.run_once() == 0  # not yet due
    clock.advance(1)
    assert await worker.run_once() == 1  # attempt 2: 503
    clock.advance(retry_delay_s(2) - 1)
    assert await worker.run_once() == 0
    clock.advance(1)
    assert await worker.run_once() == 1  # attempt 3: 200
    clock.advance(7 * 24 * 3600)
    assert await worker.run_once() == 0  # delivered: nothing more

    assert len(receiver.deliveries) == 3
    assert len(set(receiver.ids())) == 1
    for delivery in receiver.deliveries:
        assert_signed_at(delivery, hook["secret"])


def assert_signed_at(delivery, secret):
    """Verify the signature of a delivery whose timestamp is the test clock's, not now."""
    headers = delivery.headers
    moment = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=UTC)
    expected = Webhook(secret).sign(headers["webhook-id"], moment, delivery.body)
    assert headers["webhook-signature"] == expected


def test_backoff_doubles_and_spans_about_a_day():
    delays = [retry_delay_s(n) for n in range(1, MAX_ATTEMPTS)]
    assert delays[:3] == [10, 20, 40]
    assert all(b >= a for a, b in itertools.pairwise(delays))
    assert 20 * 3600 <= sum(delays) <= 30 * 3600


async def test_delivery_gives_up_after_the_last_attempt(
    client, space, make_task, receiver, worker, clock, sql
):
    await register(client, space, receiver.url)
    receiver.statuses = [500] * MAX_ATTEMPTS
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert await worker.run_once() == 1
        clock.advance(retry_delay_s(attempt) + 1)
    assert await worker.run_once() == 0
    assert len(receiver.deliveries) == MAX_ATTEMPTS
    assert await sql("SELECT count(*) FROM outbox") == [(0,)]


async def test_redirects_are_not_followed(client, space, make_task, receiver, worker):
    await register(client, space, receiver.url)
    receiver.statuses = [302]
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})
    await worker.run_once()
    assert len(receiver.deliveries) == 1  # one POST, the 302 counted as a failure
    assert await worker.run_once() == 0  # retried later, not now


async def test_delivery_time_guard_refuses_private_address(
    client, space, make_task, receiver, app, clock
):
    await register(client, space, receiver.url)  # allowed at registration in this app
    guarded = Worker(app.state.service.db, clock, allow_private=False, jitter=lambda: 1.0)
    try:
        task = await make_task()
        await client.put(f"/tasks/{task}", json={"done": True})
        assert await guarded.run_once() == 1
        assert receiver.deliveries == []
    finally:
        await guarded.close()


# --- Crashes and several workers -------------------------------------------------------


async def test_worker_stopped_mid_delivery_is_redelivered_with_same_id(
    client, space, make_task, receiver, app, clock
):
    await register(client, space, receiver.url)
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})
    receiver.hang_s = 1.0
    first = Worker(app.state.service.db, clock, allow_private=True)
    attempt = asyncio.create_task(first.run_once())
    while receiver.hang_s != 0.0:  # the request has reached the receiver
        await asyncio.sleep(0.01)
    attempt.cancel()  # the worker dies while the receiver is still answering
    with pytest.raises(asyncio.CancelledError):
        await attempt
    first.attempts._cut.clear()  # it died: nothing is handed back, as a stop would
    await first.close()

    restarted = Worker(app.state.service.db, clock, allow_private=True)
    try:
        assert await restarted.run_once() == 0  # the dead worker's claim still holds
        clock.advance(CLAIM.seconds)
        assert await restarted.run_once() == 1
    finally:
        await restarted.close()
    await asyncio.sleep(1.1)  # let the hanging first request finish being recorded
    ids = receiver.ids()
    assert len(ids) == 2 and len(set(ids)) == 1


async def test_a_stopping_worker_hands_back_what_it_cut_short(
    client, space, make_task, receiver, app, clock, sql
):
    await register(client, space, receiver.url)
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})
    receiver.hang_s = 1.0
    first = Worker(app.state.service.db, clock, allow_private=True)
    stopping = asyncio.create_task(first.run())
    while receiver.hang_s != 0.0:  # the request has reached the receiver
        await asyncio.sleep(0.01)
    stopping.cancel()  # SIGTERM: the attempt in flight is cut short, and handed back
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await first.close()
    assert await sql("SELECT attempts FROM deliveries") == [(0,)]

    other = Worker(app.state.service.db, clock, allow_private=True)
    try:
        [claim] = await other.claim()  # at once, not once the lease lapses
        assert claim.attempt == 1  # the cut attempt is not counted
        await other.record(claim, await other.attempt(claim))
    finally:
        await other.close()
    await asyncio.sleep(1.1)  # let the hanging first request finish
    ids = receiver.ids()
    assert len(ids) == 2 and len(set(ids)) == 1


async def test_two_workers_deliver_each_event_once_per_webhook(
    client, space, make_task, settings, clock
):
    receivers = [Receiver().start() for _ in range(2)]
    databases = [Database(settings.database_url) for _ in range(2)]
    workers = [Worker(db, clock, allow_private=True, batch=3) for db in databases]
    try:
        for r in receivers:
            await register(client, space, r.url)
        tasks = [await make_task(title=f"t{i}") for i in range(12)]
        for task in tasks:
            await client.put(f"/tasks/{task}", json={"done": True})
        for _ in range(6):
            await asyncio.gather(*(w.run_once() for w in workers))
        for r in receivers:
            assert len(r.deliveries) == 12
            assert len(set(r.ids())) == 12
    finally:
        for w in workers:
            await w.close()
        for db in databases:
            await db.close()
        for r in receivers:
            r.stop()


# --- Outbox housekeeping and health ---------------------------------------------------------


async def test_delivered_and_unwatched_events_leave_the_outbox(
    client, space, make_task, receiver, worker, sql
):
    unwatched = await make_task()
    await client.put(f"/tasks/{unwatched}", json={"done": True})
    await register(client, space, receiver.url)
    watched = await make_task()
    await client.put(f"/tasks/{watched}", json={"done": True})
    assert await sql("SELECT count(*) FROM outbox") == [(2,)]
    await worker.run_once()
    assert await sql("SELECT task_uuid FROM outbox") == [(unwatched,)]
    await worker.sweep()
    assert await sql("SELECT count(*) FROM outbox") == [(0,)]


async def test_up_reports_worker_heartbeat_without_failing(client, worker, clock):
    body = (await client.get("/up")).json()
    assert body["checks"]["worker"]["status"] == "absent"
    await worker.heartbeat()
    clock.advance(2)
    response = await client.get("/up")
    assert response.status_code == 200
    assert response.json()["checks"]["worker"] == {"status": "ok", "heartbeat_age_s": 2.0}
    clock.advance(worker_module.STALE_AFTER_S)
    response = await client.get("/up")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["checks"]["worker"]["status"] == "stale"


async def test_in_process_worker_delivers_under_serve(tmp_path, receiver):
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path}/live.db",
            webhook_allow_private=True,
            run_worker=True,
        )
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            space = (await client.post("/spaces", json={})).json()["uuid"]
            await register(client, space, receiver.url)
            task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
            await client.put(f"/tasks/{task}", json={"done": True})
            for _ in range(100):
                if receiver.deliveries:
                    break
                await asyncio.sleep(0.05)
            assert len(receiver.deliveries) == 1
            worker_check = (await client.get("/up")).json()["checks"]["worker"]
            assert worker_check["status"] == "ok"


# --- Signing ------------------------------------------------------------------------------


def test_signature_matches_standard_webhooks_example_vector():
    from headway.delivery.webhooks import signed_headers

    headers = signed_headers(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        '{"test": 2432232314}',
    )
    assert headers["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert headers["webhook-id"] == "msg_p5jXN8AQM9LWM0D4loKWxJek"
    assert headers["webhook-timestamp"] == "1614265330"


async def test_an_attempt_is_bounded_as_a_whole_even_by_a_trickling_receiver(
    client, space, make_task, app, clock
):
    """httpx's timeout bounds each read; the attempt's bound covers all of it."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def trickle() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(600):  # a header byte every 0.1 s: never a read timeout, for 60 s
            time.sleep(0.1)
            try:
                connection.sendall(b"X")
            except OSError:
                break
        connection.close()

    threading.Thread(target=trickle, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    await register(client, space, url)
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})
    worker = Worker(
        app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0, attempt_timeout_s=0.5
    )
    try:
        started = time.monotonic()
        assert await worker.run_once() == 1
        # Ended by its 0.5 s bound, long before the trickle's 60 s (late on a busy machine,
        # never that late).
        assert time.monotonic() - started < 30
        # Not delivered: it is due again after the first backoff.
        clock.advance(retry_delay_s(1))
        assert await worker.run_once() == 1
    finally:
        await worker.close()
        listener.close()


async def test_a_delivery_whose_webhook_is_gone_is_never_claimed_and_given_up_by_age(
    client, space, make_task, worker, sql, app, clock
):
    """A delivery with no webhook left (a database from before each webhook counted its
    own) has nothing to deliver to: it is never claimed, and it goes with its event once
    it is as old as any undelivered event may be."""
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"done": True})
    (event_id,) = (await sql("SELECT id FROM outbox"))[0]
    async with app.state.service.db.write() as st:
        await st.many(
            "INSERT INTO deliveries (event_id, webhook_uuid, attempts, next_attempt_at_us, "
            "created_at_us) VALUES (?, ?, 0, 0, ?)",
            [(event_id, str(uuid.uuid4()), clock.now_us())],
        )
    assert await worker.run_once() == 0
    assert await worker.sweep() == 0
    clock.advance(GIVE_UP_S)
    assert await worker.sweep() == 1
    assert await sql("SELECT count(*) FROM deliveries") == [(0,)]
    assert await sql("SELECT count(*) FROM outbox") == [(0,)]


@pytest.mark.parametrize(
    ("url", "address", "sent_to", "host", "extensions"),
    [
        (
            "https://hooks.example.com:8443/x?y=1",
            "93.184.216.34",
            "https://93.184.216.34:8443/x?y=1",
            "hooks.example.com:8443",
            {"sni_hostname": "hooks.example.com"},
        ),
        (
            "http://hooks.example.com/x",
            "2606:2800:220:1::1",
            "http://[2606:2800:220:1::1]/x",
            "hooks.example.com",
            {},
        ),
    ],
)
def test_delivery_connects_to_the_address_it_checked(url, address, sent_to, host, extensions):
    """A name that resolves elsewhere after the check cannot redirect the delivery: it is
    sent to the checked address, with the original Host and TLS server name."""
    import ipaddress

    from headway.delivery.webhooks import pinned

    pinned_url, headers, sent_extensions = pinned(httpx.URL(url), ipaddress.ip_address(address))
    assert str(pinned_url) == sent_to
    assert headers == {"host": host}
    assert sent_extensions == extensions


async def test_the_worker_survives_an_unexpected_error_in_a_step_and_delivers(
    app, clock, client, space, make_task, receiver, caplog
):
    """An error the worker does not know is logged and counted; the loop goes on."""
    from headway.ops import metrics

    worker = Worker(app.state.service.db, clock, allow_private=True, poll_s=0.05)
    claim, failures = worker.claim, []

    async def failing_once():
        if not failures:
            failures.append(1)
            raise ValueError("an unexpected error in a step")
        return await claim()

    worker.claim = failing_once
    registry = metrics.instruments().registry

    def failed() -> float:
        found = registry.get_sample_value("headway_loop_failures_total", {"loop": "worker"})
        return found or 0.0

    before = failed()
    await register(client, space, receiver.url)
    task = await make_task()
    running = asyncio.create_task(worker.run())
    try:
        assert (await client.put(f"/tasks/{task}", json={"done": True})).status_code == 200
        async with asyncio.timeout(10):
            while not receiver.deliveries:
                await asyncio.sleep(0.02)
        assert not running.done()
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await worker.close()
    assert failures and "worker: a look failed" in caplog.text
    assert failed() == before + 1
