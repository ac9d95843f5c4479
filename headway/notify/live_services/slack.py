"""Slack, with a bot token: `chat.postMessage` once, then `chat.update` on the channel and
`ts` it returned. An incoming-webhook URL cannot edit what it posted.

Slack answers most errors with HTTP 200 and `{"ok": false, "error": ...}`. The text is
sent with `&`, `<` and `>` escaped as Slack documents, `parse: none` (no names or channels
linked), and the message's `mrkdwn: false` (no bold or italics made of `*` and `_`).
"""

from __future__ import annotations

import re
from typing import Any

from .wire import Answer, Exchange, LiveOutcome, LiveText, cut

NAME = "Slack"
REF_FIELDS = ("channel", "ts")  # what its reference must hold
API = "https://slack.com"
MAX_TEXT = 39000  # Slack truncates a message's text beyond 40,000 characters
_CHANNEL = re.compile(r"^(?P<channel>[+#@]?[A-Z0-9_-]{1,32})(:(?P<thread_ts>[0-9.]+))?$", re.I)
# Errors that will not change on a retry: the token, the channel or the message is gone or
# out of the bot's reach.
_REFUSED = frozenset(
    {
        "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
        "no_permission", "missing_scope", "not_allowed_token_type", "team_access_not_granted",
        "channel_not_found", "not_in_channel", "is_archived", "message_not_found",
        "cant_update_message", "edit_window_closed", "restricted_action",
    }
)  # fmt: skip


def unfit(plugin: Any) -> str | None:
    if plugin.mode != "bot":
        return (
            "A Slack webhook URL cannot edit the messages it sent: a live message needs a "
            "Slack bot token (slack://xoxb-.../#channel)."
        )
    if _channel(plugin) is None:
        return "A Slack bot URL needs a channel (slack://xoxb-.../#channel) for a live message."
    return None


def create(exchange: Exchange, plugin: Any, text: LiveText, key: str) -> LiveOutcome:
    found = _channel(plugin)
    if found is None:
        return exchange.failed(None, unfit(plugin), refused=True)
    channel, thread_ts = found
    payload = {"channel": channel, "unfurl_links": False, "unfurl_media": False} | _text(text)
    if thread_ts:
        payload["thread_ts"] = thread_ts
    answer = _call(exchange, plugin, "chat.postMessage", payload)
    fields = answer.fields
    if answer.success and fields.get("ok") and fields.get("channel") and fields.get("ts"):
        ref = {"service": "slack", "channel": fields["channel"], "ts": fields["ts"]}
        return exchange.done(ref, answer, "created")
    return _failed(exchange, answer)


def edit(
    exchange: Exchange, plugin: Any, text: LiveText, key: str, ref: dict[str, Any]
) -> LiveOutcome:
    payload = {"channel": ref["channel"], "ts": ref["ts"]} | _text(text)
    answer = _call(exchange, plugin, "chat.update", payload)
    if answer.success and answer.fields.get("ok"):
        return exchange.done(ref, answer, "edited")
    return _failed(exchange, answer)


def escape(text: str) -> str:
    """Slack's three control characters as the entities it documents."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _text(text: LiveText) -> dict[str, Any]:
    return {"text": escape(cut(text.whole(), MAX_TEXT)), "parse": "none", "mrkdwn": False}


def _call(exchange: Exchange, plugin: Any, method: str, payload: dict[str, Any]) -> Answer:
    headers = {
        "Authorization": f"Bearer {plugin.access_token}",
        "Content-Type": "application/json; charset=utf-8",
    }
    url = f"{exchange.endpoint or API}/api/{method}"
    return exchange.call("POST", url, json_body=payload, headers=headers)


def _channel(plugin: Any) -> tuple[str, str | None] | None:
    """The first channel of the URL as the API takes it (as Apprise's plugin reads it:
    `+ID` an id, `@name` a user, anything else a channel name), and its thread."""
    for target in plugin.channels or ():
        found = _CHANNEL.match(target or "")
        if found is None:
            return None  # an e-mail address, which Apprise looks up: not done here
        channel = found.group("channel")
        if channel[0] == "+":
            channel = channel[1:]
        elif channel[0] != "@" and channel[0] != "#":
            channel = f"#{channel}"
        return channel, found.group("thread_ts")
    return None


def _failed(exchange: Exchange, answer: Answer) -> LiveOutcome:
    error = str(answer.fields.get("error") or "")
    limited = error == "ratelimited" or answer.status == 429
    wait = 1.0 if limited and answer.retry_after_s is None else None  # else its Retry-After
    refused = error in _REFUSED or answer.status in (401, 403)
    return exchange.failed(answer, error or None, refused=refused, wait=wait)
