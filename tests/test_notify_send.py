"""Sending to channels with Apprise's own plugins into real receivers on 127.0.0.1: what
arrives, refusals and Retry-After, timeouts, the address guard and its pins, and that no
token reaches an outcome or a log."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from headway.notify import guard, messages
from headway.notify.send import deliver, parse_retry_after, send, send_test
from headway.notify.urls import check_channel_url

from .receivers import GOTIFY_TOKEN, HTTPReceiver, SMTPReceiver

SPACE = str(uuid.uuid4())


def failed_deploy() -> dict[str, Any]:
    """A finished parent with a failed step, as `GET /tasks/{uuid}` shows it."""
    parent = str(uuid.uuid4())

    def step(title: str, values: dict[str, Any]) -> dict[str, Any]:
        return {
            "uuid": str(uuid.uuid4()),
            "space_uuid": SPACE,
            "parent_uuid": parent,
            "title": title,
            "source": None,
            "created_at": "2026-11-24T10:00:00.000000Z",
            "finished_at": "2026-11-24T10:01:00.000000Z",
            "duration": 60,
            "progress": {
                "current": None,
                "end": None,
                "ratio": 1,
                "values": values,
                "updated_at": "2026-11-24T10:01:00.000000Z",
                "aggregated": False,
            },
            "children": [],
        }

    return {
        "uuid": parent,
        "space_uuid": SPACE,
        "parent_uuid": None,
        "title": "Deploy",
        "source": None,
        "created_at": "2026-11-24T10:00:00.000000Z",
        "finished_at": "2026-11-24T10:03:12.000000Z",
        "duration": 192,
        "progress": {
            "current": 2,
            "end": 2,
            "ratio": 1,
            "values": {"log": "rolling back"},
            "updated_at": "2026-11-24T10:03:12.000000Z",
            "aggregated": True,
        },
        "children": [
            step("Build", {"log": "built"}),
            step("Run migrations", {"error": "exit code 3", "exit_code": 3}),
        ],
    }


KINDS = ["json", "form", "xml", "ntfy", "gotify", "smtp"]


@pytest.fixture(params=KINDS)
def receiver(request: pytest.FixtureRequest) -> Iterator[HTTPReceiver | SMTPReceiver]:
    found = SMTPReceiver() if request.param == "smtp" else HTTPReceiver(request.param)
    try:
        yield found
    finally:
        found.stop()


async def test_a_message_arrives_whole_with_no_uuid(receiver: HTTPReceiver | SMTPReceiver) -> None:
    task = failed_deploy()
    message = messages.finished(task, space_title="Releases", link="https://h.example/shared/x")
    outcome = await send(
        receiver.url(), message.title, message.body, allow_private=True, level=message.level
    )
    assert outcome.delivered, outcome.detail
    assert outcome.detail.startswith("delivered to ")
    [arrived] = receiver.arrivals
    assert arrived.title == "✗ Deploy failed: 1 of 2 steps failed (Run migrations: exit code 3)"
    assert arrived.message.replace("\r\n", "\n").strip() == message.body
    assert "Releases › Deploy" in arrived.message and "Log: rolling back" in arrived.message
    everything = arrived.raw.decode("utf-8", "replace").lower()
    ids = [task["uuid"], SPACE] + [child["uuid"] for child in task["children"]]
    for value in ids:
        assert value not in everything and value.replace("-", "") not in everything


async def test_a_private_receiver_is_refused_unless_private_addresses_are_allowed(
    receiver: HTTPReceiver | SMTPReceiver,
) -> None:
    outcome = await send(receiver.url(), "t", "b", allow_private=False)
    assert not outcome.delivered
    assert outcome.detail.startswith("refused: the host 127.0.0.1 resolves to a non-public")
    assert receiver.requests == 0
    outcome = await send(receiver.url(host="localhost"), "t", "b", allow_private=False)
    assert not outcome.delivered
    assert "the host localhost resolves to a non-public address" in outcome.detail
    assert "127.0.0.1" not in outcome.detail and "HEADWAY_ALLOW_PRIVATE_TARGETS" in outcome.detail
    assert receiver.requests == 0


@pytest.fixture
def two_loopbacks() -> Iterator[tuple[HTTPReceiver, HTTPReceiver]]:
    """Two receivers on one port: 127.0.0.1 (where `localhost` resolves) and 127.0.0.2."""
    first = HTTPReceiver("json")
    try:
        second = HTTPReceiver("json", host="127.0.0.2", port=first.port)
    except OSError:
        first.stop()
        pytest.skip("127.0.0.2 is not a loopback address here")
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


async def test_a_send_connects_to_the_checked_address_not_where_the_name_points_now(
    two_loopbacks: tuple[HTTPReceiver, HTTPReceiver],
) -> None:
    """DNS rebinding: `localhost` was checked at 127.0.0.2; by the time of the send the
    system resolves it to 127.0.0.1. The send goes to the address checked, by name
    (Host header), and the address the name points to now gets nothing."""
    now, checked = two_loopbacks
    channel = check_channel_url(f"json://localhost:{now.port}/hook")
    pins = {"localhost": ipaddress.ip_address("127.0.0.2")}
    outcome = await deliver(channel, "title", "body", pins=pins, allow_private=False)
    assert outcome.delivered, outcome.detail
    assert now.requests == 0
    [arrived] = checked.arrivals
    assert arrived.headers["host"] == f"localhost:{now.port}"


async def test_a_name_nobody_checked_is_refused_when_it_resolves_to_a_private_address(
    two_loopbacks: tuple[HTTPReceiver, HTTPReceiver],
) -> None:
    """A name the check did not pin (a hosted service's host, a server a plugin
    discovers) is looked up as it connects, and refused there unless public."""
    now, checked = two_loopbacks
    channel = check_channel_url(f"json://localhost:{now.port}/hook")
    pins = {"elsewhere.example": ipaddress.ip_address("127.0.0.2")}
    outcome = await deliver(channel, "title", "body", pins=pins, allow_private=False)
    assert not outcome.delivered
    assert outcome.detail == (  # the check of registration's, at connection time
        "JSON: refused: the host localhost resolves to a non-public address "
        "(HEADWAY_ALLOW_PRIVATE_TARGETS=true allows private targets)"
    )
    assert now.requests == 0 and checked.requests == 0


def test_threads_outside_a_send_resolve_as_before() -> None:
    guard.install()
    import socket

    assert socket.getaddrinfo is not guard._system_getaddrinfo
    assert {info[4][0] for info in socket.getaddrinfo("localhost", 80)} <= {"127.0.0.1", "::1"}
    pins = {"localhost": ipaddress.ip_address("127.0.0.2")}
    with guard.attempt(pins, guarded=True):
        assert {info[4][0] for info in socket.getaddrinfo("LOCALHOST.", 80)} == {"127.0.0.2"}
        with pytest.raises(socket.gaierror, match="refused"):
            socket.getaddrinfo("127.0.0.1", 80)
        seen: list[set[str]] = []
        other = threading.Thread(
            target=lambda: seen.append({i[4][0] for i in socket.getaddrinfo("localhost", 80)})
        )
        other.start()
        other.join()
        assert seen[0] <= {"127.0.0.1", "::1"}
    assert {info[4][0] for info in socket.getaddrinfo("localhost", 80)} <= {"127.0.0.1", "::1"}


@pytest.mark.parametrize("kind", ["json", "ntfy", "gotify"])
@pytest.mark.parametrize("status", [429, 503])
async def test_a_refusal_with_retry_after_is_not_delivered_and_says_when(
    kind: str, status: int
) -> None:
    receiver = HTTPReceiver(kind)  # type: ignore[arg-type]
    try:
        receiver.refuse(1, status=status, retry_after="120")
        outcome = await send(receiver.url(), "t", "b", allow_private=True)
        assert not outcome.delivered
        assert outcome.status == status and outcome.retry_after_s == 120.0
        assert f"answered HTTP {status}; it asks to retry after 120 s" in outcome.detail
        assert receiver.arrivals == []
        again = await send(receiver.url(), "t", "b", allow_private=True)
        assert again.delivered and again.retry_after_s is None
        assert len(receiver.arrivals) == 1
    finally:
        receiver.stop()


async def test_a_refusal_with_an_http_date_waits_until_it(json_receiver: HTTPReceiver) -> None:
    moment = datetime.now(UTC) + timedelta(seconds=90)
    json_receiver.refuse(1, status=503, retry_after=format_datetime(moment, usegmt=True))
    outcome = await send(json_receiver.url(), "t", "b", allow_private=True)
    assert outcome.retry_after_s is not None and 80 <= outcome.retry_after_s <= 90


async def test_a_refusal_with_garbage_retry_after_says_no_wait(json_receiver: HTTPReceiver) -> None:
    json_receiver.refuse(1, status=429, retry_after="soon, maybe")
    outcome = await send(json_receiver.url(), "t", "b", allow_private=True)
    assert not outcome.delivered and outcome.status == 429 and outcome.retry_after_s is None


async def test_a_refused_mail_is_not_delivered(smtp_receiver: SMTPReceiver) -> None:
    smtp_receiver.refuse(1, status=451)
    outcome = await send(smtp_receiver.url(), "t", "b", allow_private=True)
    assert not outcome.delivered and outcome.detail == "E-Mail did not accept the message"
    assert (await send(smtp_receiver.url(), "t", "b", allow_private=True)).delivered


@pytest.mark.parametrize("kind", ["json", "smtp"])
async def test_a_hanging_receiver_times_out_within_the_timeout(kind: str) -> None:
    receiver = SMTPReceiver() if kind == "smtp" else HTTPReceiver("json")
    try:
        receiver.hang()
        started = time.monotonic()
        outcome = await send(receiver.url(), "t", "b", allow_private=True, timeout_s=1)
        took = time.monotonic() - started
        assert not outcome.delivered and outcome.detail == "no answer within 1 s"
        # It waited its own timeout, not the 10 s default (the only bound above: a busy
        # machine can make it late, never early).
        assert 0.9 <= took < 10
    finally:
        receiver.stop()


async def test_a_send_never_waits_on_the_default_executor(json_receiver: HTTPReceiver) -> None:
    """With the loop's default executor full (requests and /up use it), a send (its
    check's lookups included) still goes out on the channels' own threads."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    release = threading.Event()
    blocker = loop.run_in_executor(None, release.wait, 30)
    try:
        outcome = await send(json_receiver.url(host="localhost"), "t", "b", allow_private=False)
        assert "non-public" in outcome.detail  # its lookup ran
        outcome = await send(json_receiver.url(), "t", "b", allow_private=True, timeout_s=5)
        assert outcome.delivered
    finally:
        release.set()
        await blocker


async def test_waiting_for_a_sending_thread_spends_none_of_the_timeout(
    json_receiver: HTTPReceiver,
) -> None:
    """Every sending thread busy for twice a send's timeout: the send waits for one (its
    timeout does not run meanwhile), then is delivered."""
    check_channel_url(json_receiver.url())  # Apprise loaded: its 0.4 s are not the send's
    release = threading.Event()
    busy = [asyncio.ensure_future(guard.run(release.wait, 30)) for _ in range(guard.POOL_THREADS)]
    url = json_receiver.url()
    waiting = asyncio.ensure_future(send(url, "t", "b", allow_private=True, timeout_s=2))
    try:
        done, _ = await asyncio.wait({waiting}, timeout=4)
        assert not done, waiting.result()  # still waiting for a thread, not "no answer"
        assert json_receiver.requests == 0
    finally:
        release.set()
        await asyncio.gather(*busy)
    outcome = await waiting
    assert outcome.delivered, outcome.detail
    assert json_receiver.requests == 1


async def test_a_scheme_no_longer_allowed_is_not_sent_to(json_receiver: HTTPReceiver) -> None:
    outcome = await send(json_receiver.url(), "t", "b", allow_private=True, schemes=["slack"])
    assert not outcome.delivered and "json:// (JSON) is not allowed" in outcome.detail
    assert json_receiver.requests == 0


async def test_no_token_reaches_an_outcome_or_a_log(
    gotify_receiver: HTTPReceiver,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = gotify_receiver.url().replace(GOTIFY_TOKEN, "WrongT0ken99")
    refused = await send(wrong, "t", "b", allow_private=True)
    assert not refused.delivered and refused.status == 401
    accepted = await send(gotify_receiver.url(), "t", "b", allow_private=True)
    assert accepted.delivered
    unreachable = await send(
        "jsons://user:passw0rd@127.0.0.1:1/hook/s3cr3tpath?+X-Token=t0k3n",
        "t",
        "b",
        allow_private=True,
        timeout_s=3,
    )
    assert not unreachable.delivered and unreachable.detail == "JSON: could not connect"
    out, err = capfd.readouterr()
    for secret in ("WrongT0ken99", GOTIFY_TOKEN, "passw0rd", "s3cr3tpath", "t0k3n"):
        for text in (refused.detail, accepted.detail, unreachable.detail, caplog.text, out, err):
            assert secret not in text
    assert not [r for r in caplog.records if r.name.startswith("apprise")]


async def test_the_test_message_arrives(ntfy_receiver: HTTPReceiver) -> None:
    outcome = await send_test(ntfy_receiver.url(), allow_private=True, space_title="Nightly")
    assert outcome.delivered
    [arrived] = ntfy_receiver.arrivals
    assert arrived.title == "Headway test message" and "Nightly" in arrived.message


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("-30", 0.0),
        ("99999999", 21_600.0),
        ("inf", 21_600.0),
        ("1e400", 21_600.0),
        ("nan", None),
        ("", None),
        (None, None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # past
        ("Tue, 24 Nov 2026 10:01:00 GMT", 60.0),
        ("Tue, 24 Nov 2026 11:01:00 +0100", 60.0),  # any zone
        ("Tue, 24 Nov 2099 10:01:00 GMT", 21_600.0),
        ("Tue, 99 Nov 2026 10:01:00 GMT", None),
        ("x" * 10_000, None),
    ],
)
def test_retry_after_is_read_safely(value: str | None, seconds: float | None) -> None:
    now = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    assert parse_retry_after(value, now=now) == seconds
