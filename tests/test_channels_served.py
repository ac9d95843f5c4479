"""Channels hearing real clients of a served app: `headway run` (a command exiting 0,
then 3) and a Python client's task ended by an exception reach a `failed` channel as
failures, while a `completed` channel hears every finish. The server runs in a thread on
a moved clock; the channels' sends are made step by step, as the worker makes them."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import pytest

from headway.app import create_app
from headway.client import Client
from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.storage.database import Database

from .conftest import pairs
from .live_server import environment, serving
from .receivers import HTTPReceiver

pytestmark = pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)


@pytest.fixture
def settings(settings):
    return settings.with_(webhook_allow_private=True)


async def headway_run(url: str, space: str, title: str, *command: str) -> int:
    """`headway run` as a user runs it, against the served app; its exit code."""
    env = environment(HEADWAY_URL=url, HEADWAY_SPACE=space)
    done = await asyncio.to_thread(
        subprocess.run,
        ["headway", "run", "--title", title, "--", *command],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    return done.returncode


async def test_run_and_client_failures_reach_a_failed_channel_and_every_finish_a_completed_one(
    settings, clock
):
    app = create_app(settings, clock)
    database = Database(settings.database_url)
    sender = ChannelSender(
        database, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )

    async def send() -> None:
        clock.advance(DIGEST_S + 1)
        await sender.run_once()

    with (
        serving(settings, app=app) as (host, port),
        HTTPReceiver("json") as failed,
        HTTPReceiver("json") as every,
    ):
        url = f"http://{host}:{port}"
        with Client(url) as client:
            space = client.create_space("Pipelines").uuid
            channels = f"{url}/spaces/{space}/channels"
            for receiver, events in ((failed, ["failed"]), (every, ["completed"])):
                answer = httpx.post(channels, json={"url": receiver.url(), "events": events})
                assert answer.status_code == 201, answer.text
        try:
            assert await headway_run(url, space, "Build", sys.executable, "-c", "pass") == 0
            await send()
            code = "import sys; sys.exit(3)"
            assert await headway_run(url, space, "Migrate", sys.executable, "-c", code) == 3
            await send()
            with (
                Client(url, space=space) as client,
                pytest.raises(ValueError),
                client.task("Train model"),
            ):
                raise ValueError("loss is nan")
            await send()
            await send()
        finally:
            await sender.close()
            await database.close()
    assert [a.title for a in failed.arrivals] == [
        "✗ Migrate failed: exit code 3",
        "✗ Train model failed: ValueError: loss is nan",
    ]
    assert [a.title.split(" in ")[0] for a in every.arrivals] == [
        "✓ Build finished",
        "✗ Migrate failed: exit code 3",
        "✗ Train model failed: ValueError: loss is nan",
    ]
