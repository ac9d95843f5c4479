"""The outbox's contract, the same for each of its queues (a webhook's deliveries, a
channel's messages) on SQLite and on PostgreSQL: a message due is sent once and logged
delivered; a refused one is retried when the one policy says, logged failed; one past
the give-up age is given up, logged; beyond an endpoint's cap the oldest are given up in
one log line; and a send that a stop cuts short is handed back, due at once for the next
worker. Each runs a real receiver, the real worker or channel sender, and reads the
endpoint's log through the API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from headway.delivery.policy import GIVE_UP_S, retry_delay_s
from headway.delivery.worker import Worker
from headway.notify.deliver import DIGEST_S, ChannelSender

from .conftest import pairs
from .receiver import Receiver
from .receivers import HTTPReceiver

pytestmark = pytest.mark.parametrize("backend", pairs(progress="memory"), indirect=True)


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1; an endpoint holds at most 2 messages."""
    return settings.with_(webhook_allow_private=True, outbox_per_endpoint=2)


@dataclass
class Endpoint:
    """One queue of the outbox, as the contract drives it."""

    kind: str  # "webhooks" or "channels": the route that registers and lists it
    url: str
    app: Any
    clock: Any
    webhook: Receiver | None = None
    channel: HTTPReceiver | None = None

    def sender(self) -> Worker:
        """A worker that sends this queue (a channel's through its sender)."""
        db = self.app.state.service.db
        if self.kind == "webhooks":
            return Worker(db, self.clock, allow_private=True, jitter=lambda: 1.0)
        channels = ChannelSender(
            db, self.clock, allow_private=True, messages_per_hour=60, link=lambda _: None
        )
        return Worker(db, self.clock, channels=channels)

    async def send(self, worker: Worker) -> int:
        """One look of `worker` at this queue, every send it starts awaited."""
        self.clock.advance(DIGEST_S + 1)  # past a channel's digest window
        if self.kind == "webhooks":
            return await worker.run_once()
        assert worker.channels is not None
        return await worker.channels.run_once()

    def arrived(self) -> int:
        """Requests that reached the receiver, refused ones too."""
        if self.webhook is not None:
            return len(self.webhook.deliveries)
        assert self.channel is not None
        return self.channel.requests

    def hang(self) -> None:
        """The receiver keeps the next request waiting."""
        if self.webhook is not None:
            self.webhook.hang_s = 3.0
        else:
            assert self.channel is not None
            self.channel.hang()

    def reached(self) -> bool:
        """Whether the request kept waiting has reached the receiver."""
        if self.webhook is not None:
            return self.webhook.hang_s == 0.0
        assert self.channel is not None
        return self.channel.requests > 0

    def release(self) -> None:
        if self.channel is not None:
            self.channel.release()

    def refuse(self, times: int) -> None:
        if self.webhook is not None:
            self.webhook.statuses = [500] * times
        else:
            assert self.channel is not None
            self.channel.refuse(times, status=500, retry_after=None)


@pytest.fixture(params=["webhooks", "channels"])
async def endpoint(request, app, clock, receiver, json_receiver, client, space):
    kind = request.param
    url = receiver.url if kind == "webhooks" else json_receiver.url()
    answer = await client.post(f"/spaces/{space}/{kind}", json={"url": url})
    assert answer.status_code == 201, answer.text
    if kind == "webhooks":
        return Endpoint(kind, url, app, clock, webhook=receiver)
    return Endpoint(kind, url, app, clock, channel=json_receiver)


async def finish(client, make_task) -> str:
    task = await make_task()
    assert (await client.put(f"/tasks/{task}", json={"done": True})).status_code == 200
    return task


async def outcomes(client, space, endpoint: Endpoint) -> list[str]:
    """The endpoint's log, oldest first: `outcome` of each line."""
    listed = (await client.get(f"/spaces/{space}/{endpoint.kind}")).json()
    return [line["outcome"] for line in reversed(listed[0]["deliveries"])]


async def test_a_message_due_is_sent_once_and_logged_delivered(
    client, space, make_task, endpoint: Endpoint
):
    await finish(client, make_task)
    worker = endpoint.sender()
    try:
        assert await endpoint.send(worker) == 1
        assert await endpoint.send(worker) == 0
    finally:
        await worker.close()
    assert endpoint.arrived() == 1
    assert await outcomes(client, space, endpoint) == ["delivered"]


async def test_a_refused_message_is_retried_when_the_policy_says(
    client, space, make_task, endpoint: Endpoint
):
    await finish(client, make_task)
    endpoint.refuse(1)
    worker = endpoint.sender()
    try:
        await endpoint.send(worker)
        assert await outcomes(client, space, endpoint) == ["failed"]
        assert await endpoint.send(worker) == 0  # not due before its backoff
        endpoint.clock.advance(retry_delay_s(1))
        assert await endpoint.send(worker) == 1
    finally:
        await worker.close()
    assert endpoint.arrived() == 2
    assert await outcomes(client, space, endpoint) == ["failed", "delivered"]


async def test_a_message_past_the_give_up_age_is_given_up_and_logged(
    client, space, make_task, endpoint: Endpoint
):
    await finish(client, make_task)
    endpoint.refuse(1_000)
    worker = endpoint.sender()
    try:
        await endpoint.send(worker)
        endpoint.clock.advance(GIVE_UP_S + 1)
        await worker.sweep()  # webhooks' deliveries are given up by age here
        await endpoint.send(worker)  # a channel's, as it is taken
        arrived = endpoint.arrived()
        endpoint.clock.advance(GIVE_UP_S)
        await endpoint.send(worker)
    finally:
        await worker.close()
    assert endpoint.arrived() == arrived  # nothing is left to send
    assert await outcomes(client, space, endpoint) == ["failed", "given_up"]


async def test_beyond_its_cap_an_endpoint_gives_up_its_oldest_in_one_log_line(
    client, space, make_task, endpoint: Endpoint
):
    for _ in range(3):
        await finish(client, make_task)
    listed = (await client.get(f"/spaces/{space}/{endpoint.kind}")).json()
    (line,) = listed[0]["deliveries"]
    assert line["outcome"] == "given_up" and line["detail"].startswith("more than 2 ")
    worker = endpoint.sender()
    try:
        while await endpoint.send(worker):
            pass
    finally:
        await worker.close()
    # Two left: two deliveries of a webhook, one digest of a channel.
    assert endpoint.arrived() == (2 if endpoint.kind == "webhooks" else 1)
    assert (await outcomes(client, space, endpoint))[0] == "given_up"


async def test_a_send_a_stop_cuts_short_is_handed_back_and_due_at_once(
    client, space, make_task, endpoint: Endpoint
):
    await finish(client, make_task)
    endpoint.hang()
    stopping = endpoint.sender()
    sending = asyncio.create_task(endpoint.send(stopping))
    async with asyncio.timeout(20):
        while not endpoint.reached():
            await asyncio.sleep(0.01)
    await stopping.close()  # the send in flight is cut short, and handed back
    sending.cancel()
    await asyncio.gather(sending, return_exceptions=True)
    endpoint.release()
    next_worker = endpoint.sender()
    try:
        # Due at once: no lease to wait for (the clock moves only a digest window).
        assert await endpoint.send(next_worker) == 1
    finally:
        await next_worker.close()
    assert (await outcomes(client, space, endpoint))[-1] == "delivered"
