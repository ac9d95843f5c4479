"""What the server logs: deliveries (webhooks and channels: delivered, retrying, given
up), refusals (which limit, to whom, once a minute), the opt-in access log, and a real
`headway serve`'s first and last lines; never a whole uuid, a URL's path or a token."""

from __future__ import annotations

import logging
import re
import signal
import time

import httpx
import pytest

from headway.api.dispatch import HeadwayApp
from headway.delivery.policy import MAX_ATTEMPTS, retry_delay_s
from headway.delivery.worker import Worker
from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.ops.logs import endpoint, masked

from .live_server import LiveServer
from .receivers import GOTIFY_TOKEN

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1."""
    return settings.with_(webhook_allow_private=True)


def lines(caplog: pytest.LogCaptureFixture, logger: str = "headway") -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == logger or record.name.startswith(f"{logger}.")
    ]


def test_a_uuid_is_cut_to_four_characters_and_an_endpoint_to_its_host() -> None:
    assert masked("/spaces/ddda1b2c-0d7b-4c8e-9d0a-6b1f2c3d4e5f/tasks") == "/spaces/ddda…/tasks"
    assert masked("evt_5b2c3d4e0d7b4c8e9d0a6b1f2c3d4e5f") == "evt_5b2c…"
    hook = "https://user:pw@hooks.example.com:8443/services/T0/B0/s3cret?token=x"
    assert endpoint("webhook", "5b2c3d4e-0d7b-4c8e-9d0a-6b1f2c3d4e5f", hook) == (
        "webhook 5b2c… (https://hooks.example.com:8443)"
    )
    assert endpoint("channel", "3f9c0e5e-0d7b-4c8e-9d0a-6b1f2c3d4e5f", "tgram://123:tok/42") == (
        "channel 3f9c… (tgram)"
    )


async def test_webhook_deliveries_are_logged_delivered_retrying_and_given_up(
    client, space, make_task, receiver, clock, app, caplog
):
    caplog.set_level(logging.INFO, logger="headway")
    worker = Worker(app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0)
    try:
        hook = (await client.post(f"/spaces/{space}/webhooks", json={"url": receiver.url})).json()
        receiver.statuses = [502]
        task = await make_task()
        await client.put(f"/tasks/{task}", json={"done": True})
        assert await worker.run_once() == 1
        clock.advance(retry_delay_s(1))
        assert await worker.run_once() == 1
        where = f"webhook {hook['uuid'][:4]}… (http://127.0.0.1:{receiver.url.split(':')[2][:-5]})"
        said = lines(caplog)
        assert f"retrying task.completed to {where} in 10 s (attempt 1 failed: HTTP 502)" in said
        assert f"delivered task.completed to {where} (attempt 2)" in said

        receiver.statuses = [500] * MAX_ATTEMPTS
        await client.put(f"/tasks/{await make_task()}", json={"done": True})
        for attempt in range(1, MAX_ATTEMPTS + 1):
            assert await worker.run_once() == 1
            clock.advance(retry_delay_s(attempt) + 1)
        assert f"gave up task.completed to {where} after {MAX_ATTEMPTS} attempts: HTTP 500" in (
            lines(caplog)
        )
    finally:
        await worker.close()
    assert not any(UUID.search(line) or "/hook" in line for line in lines(caplog))


async def test_channel_deliveries_are_logged_without_the_url_or_its_token(
    client, space, make_task, app, clock, gotify_receiver, caplog
):
    caplog.set_level(logging.INFO, logger="headway")
    sender = ChannelSender(
        app.state.service.db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )
    try:
        body = {"url": gotify_receiver.url(), "events": ["completed"]}
        channel = (await client.post(f"/spaces/{space}/channels", json=body)).json()
        gotify_receiver.refuse(status=500, retry_after=None)
        await client.put(f"/tasks/{await make_task(title='Deploy')}", json={"done": True})
        await sender.run_once()
        clock.advance(3600)
        await sender.run_once()
        clock.advance(DIGEST_S + 1)
        await sender.run_once()
    finally:
        await sender.close()
    said = [line for line in lines(caplog) if "channel" in line]
    where = f"channel {channel['uuid'][:4]}… (gotify)"
    assert any(line.startswith(f"retrying a completed message to {where} in ") for line in said)
    assert f"delivered a completed message to {where}" in said
    assert not any(UUID.search(line) or GOTIFY_TOKEN in line for line in lines(caplog))


async def test_refusals_name_the_limit_and_the_address_once_a_minute(limited, caplog):
    caplog.set_level(logging.INFO, logger="headway")
    app = await limited(rate_spaces="2/minute")
    transport = httpx.ASGITransport(app, client=("203.0.113.9", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://headway") as client:
        answers = [(await client.post("/spaces", json={})).status_code for _ in range(6)]
    assert answers == [201, 201, 429, 429, 429, 429]
    refused = [line for line in lines(caplog) if line.startswith("refused")]
    assert len(refused) == 1, refused  # one line a minute per address and limit
    assert re.fullmatch(r"refused 429 to 203\.0\.113\.9: Too many spaces .*", refused[0])


async def test_the_access_log_is_off_by_default_and_costs_no_layer(app, client, caplog):
    caplog.set_level(logging.INFO, logger="headway")
    assert type(app) is HeadwayApp  # no access log to pass through
    await client.post("/spaces", json={})
    assert lines(caplog, "headway.access") == []


async def test_the_access_log_masks_uuids_in_paths(limited, caplog):
    caplog.set_level(logging.INFO, logger="headway")
    app = await limited(access_log=True)
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://headway") as client:
        space = (await client.post("/spaces", json={})).json()["uuid"]
        task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        assert (await client.put(f"/tasks/{task}", json={"current": 1})).status_code == 200
        assert (await client.get(f"/tasks/{task}/report?current=2")).status_code == 200
        assert (await client.get("/nowhere")).status_code == 404
    said = lines(caplog, "headway.access")
    assert [line.rsplit(" ", 2)[0] for line in said] == [
        "POST /spaces 201",
        f"POST /spaces/{space[:4]}…/tasks 201",
        f"PUT /tasks/{task[:4]}… 200",
        f"GET /tasks/{task[:4]}…/report 200",  # the query (values, counts) is not logged
        "GET /nowhere 404",
    ]
    assert all(re.search(r" \d+\.\d ms$", line) for line in said)
    assert not any(UUID.search(line) for line in lines(caplog))


def test_a_real_server_says_where_to_open_it_logs_requests_deliveries_and_its_shutdown(
    tmp_path, receiver
):
    server = LiveServer(
        tmp_path, HEADWAY_ACCESS_LOG="true", HEADWAY_WEBHOOK_ALLOW_PRIVATE="true"
    ).start()
    try:
        space = server.new_space("Logged")
        hook = httpx.post(
            f"{server.url}/spaces/{space}/webhooks", json={"url": receiver.url}, timeout=10
        ).json()
        task = httpx.post(f"{server.url}/spaces/{space}/tasks", json={}, timeout=10).json()
        httpx.put(f"{server.url}/tasks/{task['uuid']}", json={"done": True}, timeout=10)
        deadline = time.monotonic() + 20
        while "delivered task.completed" not in server.errors():
            assert time.monotonic() < deadline, server.errors()
            time.sleep(0.1)
    finally:
        assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    first = server.output().splitlines()[0]
    assert first.startswith(f"Headway listening on {server.url} — open it in a browser"), first
    errors = server.errors()
    assert f"PUT /tasks/{task['uuid'][:4]}… 200" in errors
    port = receiver.url.split(":")[2].split("/")[0]
    assert f"delivered task.completed to webhook {hook['uuid'][:4]}… (http://127.0.0.1:{port})" in (
        errors
    )
    assert "uvicorn" not in errors and '"PUT /tasks' not in errors  # uvicorn's own log is off
    assert "Headway shutting down" in errors
    assert not UUID.search(server.output() + errors)
    assert hook["secret"] not in errors and "/hook" not in errors
