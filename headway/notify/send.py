"""Sending one message to one channel with Apprise: the URL checked, its hosts checked and
pinned, the whole attempt inside its timeout, and an outcome that holds no token."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from ..delivery.policy import held_retry_after_s
from ..delivery.webhooks import RefusedAddress
from ..domain.errors import Unprocessable
from . import guard, messages
from .messages import Level
from .schemes import DEFAULT_SCHEMES
from .urls import Address, ChannelURL, check_channel_hosts, check_channel_url, plugin_for


@dataclass(frozen=True)
class SendOutcome:
    """What one send did. `detail` is a sentence for the channel's deliveries list: it
    never holds the URL or a token. `retry_after_s` is the service's `Retry-After` on a
    refusal (429, 503...), clamped to 0-6 h, else None; `status` its last HTTP status."""

    delivered: bool
    detail: str
    retry_after_s: float | None = None
    status: int | None = None


async def send(
    url: str,
    title: str,
    body: str,
    *,
    allow_private: bool,
    timeout_s: float = 10.0,
    level: Level = "info",
    schemes: Collection[str] = DEFAULT_SCHEMES,
    wanted: Callable[[], Awaitable[bool]] | None = None,
) -> SendOutcome:
    """Send `title` and `body` to the channel at `url`; never raises for what the URL or
    the service does. `wanted`, asked once a thread is free to send on, may drop the send
    (`guard.Dropped` is raised: nothing was sent).

    Everything happens inside `timeout_s`: reading the URL, the public-address check of
    the hosts its owner picked (their lookups on the sending threads), and the send,
    whose connections go to the addresses checked (see `guard`). Waiting for a sending
    thread is not part of it. A URL that is no longer allowed (`schemes` changed since it
    was registered) or whose host is now refused is not sent to, and the outcome says why.
    """
    try:
        async with guard.Budget(timeout_s) as budget:
            channel = await guard.run(check_channel_url, url, schemes, budget=budget)
            resolve = functools.partial(guard.resolve, budget=budget)
            pins = await check_channel_hosts(channel, allow_private=allow_private, resolve=resolve)
            call = (_notify, channel, title, body, pins, not allow_private, level, budget)
            return await guard.run(*call, budget=budget, wanted=wanted)
    except TimeoutError:
        return SendOutcome(False, f"no answer within {timeout_s:g} s")
    except Unprocessable as exc:
        return SendOutcome(False, exc.message)
    except RefusedAddress as exc:
        return SendOutcome(False, f"refused: {exc}")


async def deliver(
    channel: ChannelURL,
    title: str,
    body: str,
    *,
    pins: Mapping[str, Address],
    allow_private: bool,
    timeout_s: float = 10.0,
    level: Level = "info",
) -> SendOutcome:
    """Send to a channel whose hosts were checked already: each host of `pins` is reached
    at its address, any other name only if it resolves to public addresses. With
    `allow_private` nothing is pinned or refused. `send` is this after the checks."""
    try:
        async with guard.Budget(timeout_s) as budget:
            call = (_notify, channel, title, body, pins, not allow_private, level, budget)
            return await guard.run(*call, budget=budget)
    except TimeoutError:
        return SendOutcome(False, f"no answer within {timeout_s:g} s")
    except Unprocessable as exc:
        return SendOutcome(False, exc.message)


async def send_test(
    url: str,
    *,
    allow_private: bool,
    timeout_s: float = 10.0,
    schemes: Collection[str] = DEFAULT_SCHEMES,
    space_title: str | None = None,
    link: str | None = None,
) -> SendOutcome:
    """Send the test message (`messages.test_message`) to the channel at `url`."""
    message = messages.test_message(space_title=space_title, link=link)
    return await send(
        url,
        message.title,
        message.body,
        allow_private=allow_private,
        timeout_s=timeout_s,
        level=message.level,
        schemes=schemes,
    )


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: a number of seconds or an HTTP date,
    clamped to 0-6 h (`inf` is 6 h, a past date 0); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 64:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds):
        return None
    return held_retry_after_s(seconds)


def _notify(
    channel: ChannelURL,
    title: str,
    body: str,
    pins: Mapping[str, Address],
    guarded: bool,
    level: Level,
    budget: guard.Budget,
) -> SendOutcome:
    """One send, on a sending thread."""
    deadline = budget.deadline  # set as the thread was handed the call
    from apprise import NotifyFormat, NotifyType

    service = channel.service
    with guard.attempt(pins, guarded=guarded) as state:
        plugin = plugin_for(channel)
        # The plugin's own socket timeouts end the thread's work soon after the caller
        # gave up on it (the caller's timeout cannot stop a thread).
        left = max(deadline - time.monotonic(), 0.1)
        plugin.socket_connect_timeout = min(plugin.socket_connect_timeout, left)
        plugin.socket_read_timeout = min(plugin.socket_read_timeout, left)
        try:
            delivered = plugin.notify(
                body=body, title=title, notify_type=NotifyType(level), body_format=NotifyFormat.TEXT
            )
        except Exception as exc:  # a plugin's bug; its message may quote the URL
            return SendOutcome(False, f"{service} failed ({type(exc).__name__})")
    status = state.status
    if delivered:
        answered = f" (HTTP {status})" if status is not None else ""
        return SendOutcome(True, f"delivered to {service}{answered}", None, status)
    if state.failure is not None:
        return SendOutcome(False, f"{service}: {state.failure}", None, status)
    if state.refused:
        return SendOutcome(False, f"{service}: refused: {state.refused[-1]}", None, status)
    if status is not None and not 200 <= status < 300:
        wait = parse_retry_after(state.retry_after)
        asks = f"; it asks to retry after {wait:g} s" if wait is not None else ""
        return SendOutcome(False, f"{service} answered HTTP {status}{asks}", wait, status)
    return SendOutcome(False, f"{service} did not accept the message", None, status)
