"""Discord: a webhook's message (`?wait=true` returns it), then edited in place
(`PATCH /webhooks/{id}/{token}/messages/{message_id}`).

Discord renders Markdown, so every character that could start some (`*_~` and the rest)
is escaped with a backslash, which Discord drops as it shows the text; web addresses are
left as they are, to stay links. `allowed_mentions` with no `parse` pings no one, and
embeds (link previews) are suppressed.
"""

from __future__ import annotations

import re
from typing import Any

from .wire import Answer, Exchange, LiveOutcome, LiveText

NAME = "Discord"
REF_FIELDS = ("message_id",)  # what its reference must hold
API = "https://discord.com"
MAX_CONTENT = 2000
SUPPRESS_EMBEDS = 1 << 2
_NO_MENTIONS = {"allowed_mentions": {"parse": []}, "flags": SUPPRESS_EMBEDS}
_URL = re.compile(r"https?://[^\s<>]+")
_MARKUP = frozenset("\\*_~`|>#-[]()<@+:")
_NUMBERED = re.compile(r"^(\s*\d+)\.", re.MULTILINE)  # "1. " starts a list


def unfit(plugin: Any) -> str | None:
    return None


def create(exchange: Exchange, plugin: Any, text: LiveText, key: str) -> LiveOutcome:
    params = {"wait": "true"} | _thread(plugin)
    payload = {"content": content(text)} | _NO_MENTIONS
    answer = exchange.call("POST", _hook(exchange, plugin), params=params, json_body=payload)
    message_id = answer.fields.get("id")
    if answer.success and isinstance(message_id, str | int):
        ref = {"service": "discord", "message_id": str(message_id)}
        return exchange.done(ref, answer, "created")
    return _failed(exchange, answer)


def edit(
    exchange: Exchange, plugin: Any, text: LiveText, key: str, ref: dict[str, Any]
) -> LiveOutcome:
    url = f"{_hook(exchange, plugin)}/messages/{ref['message_id']}"
    payload = {"content": content(text)} | _NO_MENTIONS
    answer = exchange.call("PATCH", url, params=_thread(plugin), json_body=payload)
    if answer.success:
        return exchange.done(ref, answer, "edited")
    return _failed(exchange, answer)


def content(text: LiveText) -> str:
    """The message's content: each line escaped, cut at a whole character to fit."""
    pieces = escaped(text.whole())
    size = sum(map(len, pieces))
    if size > MAX_CONTENT:
        while size + 1 > MAX_CONTENT:
            size -= len(pieces.pop())
        pieces.append("…")
    return "".join(pieces)


def escaped(text: str) -> list[str]:
    """`text` as the pieces Discord shows one character of each (or a web address)."""
    listed = {found.end() - 1 for found in _NUMBERED.finditer(text)}  # the "." of "1."
    pieces: list[str] = []
    at = 0
    for found in [*_URL.finditer(text), None]:
        end = found.start() if found else len(text)
        for index in range(at, end):
            char = text[index]
            pieces.append(f"\\{char}" if char in _MARKUP or index in listed else char)
        if found:
            pieces.append(found.group(0))
            at = found.end()
    return pieces


def _hook(exchange: Exchange, plugin: Any) -> str:
    return f"{exchange.endpoint or API}/api/webhooks/{plugin.webhook_id}/{plugin.webhook_token}"


def _thread(plugin: Any) -> dict[str, str]:
    thread = getattr(plugin, "thread_id", None)
    return {"thread_id": str(thread)} if thread else {}


def _failed(exchange: Exchange, answer: Answer) -> LiveOutcome:
    fields = answer.fields
    refused = answer.status in (401, 403, 404)
    reason = str(fields.get("message") or "") or None
    return exchange.failed(answer, reason, refused=refused, wait=fields.get("retry_after"))
