"""Webhook bounds: a cap on webhooks per space, a bounded completion event, and fair
delivery (one space's backlog or one slow receiver does not delay anyone else)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest

from headway.delivery.worker import Worker
from headway.domain.completion import MAX_EVENT_BYTES

from .receiver import Receiver

CAP = 20  # HEADWAY_WEBHOOKS_PER_SPACE's default


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1; registrations here come faster than the rate limit."""
    return settings.with_(webhook_allow_private=True, rate_limits=False)


class SlowReceiver:
    """A receiver on 127.0.0.1 that answers every POST with 200 after `delay_s` (or at
    `release`, if sooner), serving many at once; counts the requests that arrived and
    those answered."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.released = threading.Event()
        self.arrived = 0
        self.answered = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.arrived += 1
                receiver.released.wait(receiver.delay_s)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
                receiver.answered += 1

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow():
    # Slower than any wait of the tests, below an attempt's 10 s timeout: while it holds
    # its requests, whatever reaches another receiver went ahead of them.
    receiver = SlowReceiver(delay_s=9.0)
    yield receiver
    receiver.stop()


@pytest.fixture
def fast():
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
async def running_worker(app, clock):
    """A worker delivering in the background, woken by every new event, as in `serve`."""
    worker = Worker(
        app.state.service.db,
        clock,
        allow_private=True,
        jitter=lambda: 1.0,
        woken=app.state.events_queued,
    )
    loop = asyncio.create_task(worker.run())
    yield worker
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
    await worker.close()


async def register(client, space, url):
    return await client.post(f"/spaces/{space}/webhooks", json={"url": url})


async def finish(client, task):
    response = await client.put(f"/tasks/{task}", json={"done": True})
    assert response.status_code == 200, response.text
    return response.json()


async def wait_for(condition, within_s: float = 8.0) -> None:
    """Until `condition()` holds; fails if it did not within `within_s`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within_s, "not within the time allowed"
        await asyncio.sleep(0.01)


# --- Cap per space ------------------------------------------------------------------------


async def test_the_webhook_beyond_the_cap_is_refused_and_nothing_stored(client, space, sql):
    for n in range(CAP):
        response = await register(client, space, f"https://93.184.216.34/hook/{n}")
        assert response.status_code == 201, response.text

    refused = await register(client, space, "https://93.184.216.34/one-too-many")
    assert refused.status_code == 422
    assert refused.json() == {"error": f"A space holds at most {CAP} webhooks; delete one first."}
    listed = (await client.get(f"/spaces/{space}/webhooks")).json()
    assert len(listed) == CAP
    assert "https://93.184.216.34/one-too-many" not in {hook["url"] for hook in listed}
    assert await sql("SELECT count(*) FROM webhooks") == [(CAP,)]

    # The cap is per space, and deleting one makes room again.
    other = (await client.post("/spaces", json={})).json()["uuid"]
    assert (await register(client, other, "https://93.184.216.34/other")).status_code == 201
    await client.delete(f"/spaces/{space}/webhooks/{listed[0]['uuid']}")
    assert (await register(client, space, "https://93.184.216.34/again")).status_code == 201


async def test_concurrent_registrations_never_pass_the_cap(client, space, sql):
    answers = await asyncio.gather(
        *(register(client, space, f"https://93.184.216.34/hook/{n}") for n in range(2 * CAP))
    )
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [201] * CAP + [422] * CAP
    assert await sql("SELECT count(*) FROM webhooks") == [(CAP,)]


# --- A bounded completion event -----------------------------------------------------------


def large_values(tag: str) -> dict[str, str]:
    """About 60 KB of values: nearly as much as one report may carry."""
    return {f"{tag}{n}": "x" * 1000 for n in range(60)}


async def outbox_payload(sql, task):
    rows = await sql("SELECT payload FROM outbox WHERE task_uuid = ?", task)
    assert len(rows) == 1
    return rows[0][0]


async def test_a_parent_of_many_large_children_has_a_bounded_event(client, space, make_task, sql):
    await register(client, space, "https://93.184.216.34/hook")
    parent = await make_task(title="p" * 200)
    children = [await make_task(title="c" * 200, parent_uuid=parent) for _ in range(120)]
    await client.put(f"/tasks/{parent}", json={"values": {"note": "y" * 1000}})
    for n, child in enumerate(children[:10]):
        body = {"current": n, "end": 10, "values": large_values(f"k{n}")}
        assert (await client.put(f"/tasks/{child}", json=body)).status_code == 200
    small = await finish(client, children[-1])
    large = await finish(client, children[0])
    for child in children[1:-1]:
        await finish(client, child)
    await finish(client, parent)  # its own report held it open
    shown = (await client.get(f"/tasks/{parent}")).json()

    # Unchanged: a small task's event, and even a child's with ~60 KB of values.
    for task in (small, large):
        payload = await outbox_payload(sql, task["uuid"])
        assert json.loads(payload)["data"] == task
    assert len(json.dumps(shown).encode()) > 10 * MAX_EVENT_BYTES

    payload = await outbox_payload(sql, parent)
    assert len(payload.encode()) <= MAX_EVENT_BYTES
    event = json.loads(payload)
    assert event["type"] == "task.completed"
    data = event["data"]
    kept = data.pop("children")
    omitted = data.pop("children_omitted")
    assert kept and omitted > 0 and len(kept) + omitted == len(children)
    # The task itself as GET shows it, its own values included; the first children,
    # each as GET shows it but without values.
    assert data == {key: value for key, value in shown.items() if key != "children"}
    assert data["progress"]["values"] == {"note": "y" * 1000}
    expected = shown["children"][: len(kept)]
    for child in expected:
        child["progress"]["values"] = {}
    assert kept == expected


async def test_a_task_whose_own_values_do_not_fit_loses_them_in_its_event(
    client, space, make_task, sql
):
    """A report body is at most 64 KiB, so a task's own values can just overflow an event
    once the task's other members are added: they are left out, and marked so."""
    task = await make_task(title="t" * 200, source="s" * 200)
    values = {f"k{n:02}": "x" * 1012 for n in range(64)}  # a body just under 64 KiB
    response = await client.put(f"/tasks/{task}", json={"values": values})
    assert response.status_code == 200, response.text
    finished = await finish(client, task)
    whole = {"type": "task.completed", "timestamp": finished["finished_at"], "data": finished}
    assert len(msgspec.json.encode(whole)) > MAX_EVENT_BYTES

    payload = await outbox_payload(sql, task)
    assert len(payload.encode()) <= MAX_EVENT_BYTES
    data = json.loads(payload)["data"]
    assert data.pop("values_omitted") is True
    assert finished["progress"]["values"] == values
    finished["progress"]["values"] = {}
    assert data == finished


# --- Fair delivery --------------------------------------------------------------------------


async def test_a_space_backlog_does_not_delay_another_spaces_delivery(
    client, space, make_task, slow, fast, running_worker
):
    for n in range(CAP):  # 20 webhooks x 10 completions: 200 deliveries, held
        assert (await register(client, space, f"{slow.url}?n={n}")).status_code == 201
    for _ in range(10):
        await finish(client, await make_task())
    await wait_for(lambda: slow.arrived > 0)

    other = (await client.post("/spaces", json={})).json()["uuid"]
    assert (await register(client, other, fast.url)).status_code == 201
    await finish(client, await make_task(other))
    await wait_for(lambda: len(fast.deliveries) == 1)
    assert slow.answered == 0  # it went ahead of the whole backlog, none of it answered


async def test_a_slow_receiver_does_not_hold_up_a_fast_one(
    client, space, make_task, slow, fast, clock, app
):
    assert (await register(client, space, slow.url)).status_code == 201
    for _ in range(30):  # older than anything for the fast receiver
        await finish(client, await make_task())
        clock.advance(0.001)
    assert (await register(client, space, fast.url)).status_code == 201
    for _ in range(6):
        await finish(client, await make_task())
        clock.advance(0.001)

    worker = Worker(app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0)
    loop = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: len(fast.deliveries) == 6)
        assert slow.answered == 0  # each went ahead of the slow receiver's first answer
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
        await worker.close()


async def test_a_worker_cancelled_as_it_is_woken_stops(app, clock):
    """A cancellation that arrives in the same turn as a wake-up (a new event at
    shutdown) still stops the worker."""
    worker = Worker(app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0)
    for _ in range(5):
        loop = asyncio.create_task(worker.run())
        await asyncio.sleep(0.2)  # idle: waiting to be woken or to poll
        worker.wake()
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(5):
                await loop
    await worker.close()
