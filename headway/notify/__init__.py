"""Notification channels' parts that need no database: Apprise URLs checked and shown
without their tokens (`urls`), sending with the name lookups pinned to checked addresses
(`send`, on the threads of `guard`), and the messages' text (`messages`).

Importing this package does not load Apprise; the first check or send does.
"""

from __future__ import annotations

from .messages import (
    Message,
    digest,
    duration_text,
    failure,
    finished,
    recovered,
    share_link,
    stalled,
    test_message,
)
from .send import SendOutcome, deliver, parse_retry_after, send, send_test
from .urls import (
    DEFAULT_SCHEMES,
    NEVER_SCHEMES,
    ChannelURL,
    Target,
    check_channel_hosts,
    check_channel_url,
    parse_schemes,
)

__all__ = [
    "DEFAULT_SCHEMES",
    "NEVER_SCHEMES",
    "ChannelURL",
    "Message",
    "SendOutcome",
    "Target",
    "check_channel_hosts",
    "check_channel_url",
    "deliver",
    "digest",
    "duration_text",
    "failure",
    "finished",
    "parse_retry_after",
    "parse_schemes",
    "recovered",
    "send",
    "send_test",
    "share_link",
    "stalled",
    "test_message",
]
