"""Telegram: `sendMessage` once, then `editMessageText` on the message it returned.

The text is sent with no `parse_mode`: Telegram shows it as plain text, so nothing needs
escaping. An edit to the same text is refused with 400 "message is not modified": that
is the text shown, so it counts as done.
"""

from __future__ import annotations

from typing import Any

from .wire import Answer, Exchange, LiveOutcome, LiveText, cut, utf16_units

NAME = "Telegram"
REF_FIELDS = ("chat_id", "message_id")  # what its reference must hold
API = "https://api.telegram.org"
MAX_TEXT = 4096  # characters as Telegram counts them (UTF-16 code units)
# A 400 whose description says the chat or the message is gone, or out of the bot's reach.
_GONE = (
    "chat not found",
    "message to edit not found",
    "message can't be edited",
    "bot was kicked",
    "bot is not a member",
    "not enough rights",
    "have no rights",
)


def unfit(plugin: Any) -> str | None:
    needs = "A Telegram URL needs a chat id (tgram://bot_token/chat_id) to keep a live message."
    return None if plugin.targets else needs


def create(exchange: Exchange, plugin: Any, text: LiveText, key: str) -> LiveOutcome:
    chat_id, thread = plugin.targets[0]
    payload: dict[str, Any] = {"chat_id": chat_id, "text": _text(text), **_NO_PREVIEW}
    if thread:
        payload["message_thread_id"] = thread
    answer = exchange.call("POST", _url(exchange, plugin, "sendMessage"), json_body=payload)
    result = answer.fields.get("result")
    if answer.success and isinstance(result, dict) and "message_id" in result:
        chat = result.get("chat") if isinstance(result.get("chat"), dict) else {}
        ref = {"service": "telegram", "chat_id": chat.get("id", chat_id)}
        return exchange.done(ref | {"message_id": result["message_id"]}, answer, "created")
    return _failed(exchange, answer)


def edit(
    exchange: Exchange, plugin: Any, text: LiveText, key: str, ref: dict[str, Any]
) -> LiveOutcome:
    payload = {
        "chat_id": ref["chat_id"],
        "message_id": ref["message_id"],
        "text": _text(text),
        **_NO_PREVIEW,
    }
    answer = exchange.call("POST", _url(exchange, plugin, "editMessageText"), json_body=payload)
    if answer.success and answer.fields.get("ok"):
        return exchange.done(ref, answer, "edited")
    if answer.status == 400 and "message is not modified" in _description(answer).lower():
        return exchange.done(ref, answer, "unchanged (the same text)")
    return _failed(exchange, answer)


_NO_PREVIEW = {"link_preview_options": {"is_disabled": True}}


def _text(text: LiveText) -> str:
    return cut(text.whole(), MAX_TEXT, utf16_units)


def _url(exchange: Exchange, plugin: Any, method: str) -> str:
    return f"{exchange.endpoint or API}/bot{plugin.bot_token}/{method}"


def _description(answer: Answer) -> str:
    return str(answer.fields.get("description") or "")


def _failed(exchange: Exchange, answer: Answer) -> LiveOutcome:
    description = _description(answer)
    parameters = answer.fields.get("parameters")
    wait = parameters.get("retry_after") if isinstance(parameters, dict) else None
    gone = answer.status == 400 and any(words in description.lower() for words in _GONE)
    refused = gone or answer.status in (401, 403, 404)  # 404: Telegram's answer to a bad token
    return exchange.failed(answer, description or None, refused=refused, wait=wait)
