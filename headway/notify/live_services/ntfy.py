"""ntfy: one notification per task, published again under the same sequence id to replace
it (ntfy 2.16 and later).

ntfy's documentation gives a message a sequence id of our choosing by publishing to
`/<topic>/<sequence_id>` (an `X-Sequence-ID` header does the same). The path is used: a
server older than 2.16 has no such route and answers 404, where it would ignore a header
it does not know and publish a new notification each time. The id is ours
(`headway-<key>`), so a retried first publish replaces rather than repeats.

Updates go at low priority (no sound, no vibration); the final text at the default. Before
the final text the sequence is cleared (`PUT /<topic>/<sequence_id>/clear`: the quiet
notification is dismissed and marked read), so that the final one arrives as a new
notification that alerts, rather than silently replacing the quiet one.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from .wire import Answer, Exchange, LiveOutcome, LiveText, cut, utf8_bytes

NAME = "ntfy"
REF_FIELDS = ("sequence_id",)  # what its reference must hold
CLOUD = "https://ntfy.sh"
MAX_MESSAGE_BYTES = 4000  # ntfy keeps up to 4,096 bytes as a message, more as an attachment


def unfit(plugin: Any) -> str | None:
    return None if plugin.topics else "An ntfy URL needs a topic to keep a live message."


def create(exchange: Exchange, plugin: Any, text: LiveText, key: str) -> LiveOutcome:
    return _publish(exchange, plugin, text, f"headway-{key}", "created", clear=False)


def edit(
    exchange: Exchange, plugin: Any, text: LiveText, key: str, ref: dict[str, Any]
) -> LiveOutcome:
    sequence_id = str(ref.get("sequence_id") or f"headway-{key}")
    return _publish(exchange, plugin, text, sequence_id, "edited", clear=text.final)


def _publish(
    exchange: Exchange, plugin: Any, text: LiveText, sequence_id: str, verb: str, *, clear: bool
) -> LiveOutcome:
    url = f"{_base(exchange, plugin)}/{quote(plugin.topics[0], safe='')}/{sequence_id}"
    auth, headers = _credentials(plugin)
    if clear:
        answer = exchange.call("PUT", f"{url}/clear", headers=headers, auth=auth)
        if answer.status in (401, 403, 429):
            return _failed(exchange, answer)
        # Any other failure to clear (a server without it) leaves the final text to come.
    title = " ".join(text.title.splitlines())
    message = cut("\n".join(text.lines) or title, MAX_MESSAGE_BYTES, utf8_bytes)
    headers |= {
        "Content-Type": "text/plain; charset=utf-8",
        "Title": _header_text(title),
        "Priority": "default" if text.final else "low",
    }
    answer = exchange.call("POST", url, data=message.encode(), headers=headers, auth=auth)
    if answer.success:
        return exchange.done({"service": "ntfy", "sequence_id": sequence_id}, answer, verb)
    return _failed(exchange, answer)


def _failed(exchange: Exchange, answer: Answer) -> LiveOutcome:
    reason = str(answer.fields.get("error") or "") or None
    if answer.status == 404:
        reason = "no such route: a server older than ntfy 2.16 cannot replace a notification"
    return exchange.failed(answer, reason, refused=answer.status in (401, 403, 404))


def _base(exchange: Exchange, plugin: Any) -> str:
    if exchange.endpoint:
        return exchange.endpoint
    if plugin.mode != "private":
        return CLOUD
    port = f":{plugin.port}" if isinstance(plugin.port, int) else ""
    return f"{'https' if plugin.secure else 'http'}://{plugin.host}{port}"


def _credentials(plugin: Any) -> tuple[tuple[str, str] | None, dict[str, str]]:
    """Basic auth or a bearer token, as Apprise's plugin reads the URL."""
    if plugin.auth == "token" and plugin.token:
        return None, {"Authorization": f"Bearer {plugin.token}"}
    if plugin.user:
        return (plugin.user, plugin.password or ""), {}
    return None, {}


def _header_text(value: str) -> str:
    """A header's value in ASCII: as it is when it can be, else one RFC 2047 encoded word,
    which ntfy decodes (its documented way to send UTF-8 in a header)."""
    if value.isascii() and value.isprintable() and "=?" not in value:
        return value
    return f"=?UTF-8?B?{base64.b64encode(value.encode()).decode()}?="
