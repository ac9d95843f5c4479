"""Live messages on the services that can edit what they sent: one message per task,
created once, then edited in place. One small module per service (ntfy, Telegram, Discord,
Slack, Matrix), each a `create` and `edit` pair (`wire.LiveService`); `post` runs either on
the notify module's sending threads, inside its timeout, like `send.deliver` does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...delivery.webhooks import RefusedAddress
from ...domain.errors import Unprocessable
from .. import guard
from ..urls import Address, ChannelURL, check_channel_hosts, plugin_for
from . import discord, matrix, ntfy, slack, telegram
from .wire import Exchange, LiveOutcome, LiveService, LiveText, NoAnswer

__all__ = ["LIVE_SERVICES", "LiveOutcome", "LiveText", "cannot_edit", "post"]

# Scheme -> service key (the keys of `post`'s endpoints).
LIVE_SERVICES: dict[str, str] = {
    "ntfy": "ntfy",
    "ntfys": "ntfy",
    "tgram": "telegram",
    "discord": "discord",
    "slack": "slack",
    "matrix": "matrix",
    "matrixs": "matrix",
}
_MODULES: dict[str, LiveService] = {
    module.__name__.rpartition(".")[2]: module
    for module in (discord, matrix, ntfy, slack, telegram)
}
_KEY = re.compile(r"[0-9a-f]{1,32}")
# The plugin's attributes that hold a credential: never in a detail.
_SECRETS = ("bot_token", "webhook_token", "access_token", "password", "token")


def cannot_edit(channel: ChannelURL) -> str | None:
    """None when this channel's URL can keep a live message; else a sentence saying why
    (for a 422). Loads Apprise's plugin for the URL: call it where `check_channel_url`
    runs."""
    service = LIVE_SERVICES.get(channel.scheme)
    if service is None:
        return (
            f"{channel.service} cannot edit the messages it sent, so it cannot keep a live "
            "message: ntfy, Telegram, Discord, Slack (with a bot token) and Matrix can."
        )
    return _MODULES[service].unfit(plugin_for(channel))


async def post(
    channel: ChannelURL,
    text: LiveText,
    *,
    key: str,
    ref: str | None,
    allow_private: bool,
    timeout_s: float = 10.0,
    endpoints: Mapping[str, str] | None = None,
    wanted: Callable[[], Awaitable[bool]] | None = None,
) -> LiveOutcome:
    """Create the message (`ref` None) or edit it (`ref` from a previous outcome); never
    raises for what the URL or the service does.

    `key` is a stable short id of (channel, task), lowercase hex of at most 32 characters:
    ntfy's sequence id and Matrix's transaction ids are made of it, so that a retried
    first post is taken once. `endpoints` maps a service key ("ntfy", "telegram",
    "discord", "slack", "matrix") to a base URL replacing the service's own (its API's,
    or the URL's host for ntfy and Matrix): local stand-ins, a local Bot API server.

    `timeout_s`, `allow_private` and `wanted` are as `send.send`'s: the address checks
    and the requests on a sending thread, not the wait for one, happen within the timeout.
    """
    if not _KEY.fullmatch(key):
        raise ValueError("key must be 1 to 32 lowercase hex digits")
    service = LIVE_SERVICES.get(channel.scheme)
    if service is None:
        return LiveOutcome(False, ref, f"{channel.service} cannot keep a live message", None, True)
    module = _MODULES[service]
    kept = _read_ref(ref, service, module.REF_FIELDS)
    if ref is not None and kept is None:
        unreadable = f"{module.NAME}: the message's reference is unreadable"
        return LiveOutcome(False, ref, unreadable, None, True)
    endpoint = (endpoints or {}).get(service)
    try:
        async with guard.Budget(timeout_s) as budget:
            resolve = functools.partial(guard.resolve, budget=budget)
            pins = await check_channel_hosts(channel, allow_private=allow_private, resolve=resolve)
            one_post = functools.partial(_post, module, channel, text, key, ref, kept)
            return await guard.run(
                one_post, pins, allow_private, budget, endpoint, budget=budget, wanted=wanted
            )
    except TimeoutError:
        return LiveOutcome(False, ref, f"{module.NAME}: no answer within {timeout_s:g} s")
    except RefusedAddress as exc:
        return LiveOutcome(False, ref, f"{module.NAME}: refused: {exc}")


def _post(
    module: LiveService,
    channel: ChannelURL,
    text: LiveText,
    key: str,
    ref: str | None,
    kept: dict[str, Any] | None,
    pins: Mapping[str, Address],
    allow_private: bool,
    budget: guard.Budget,
    endpoint: str | None,
) -> LiveOutcome:
    """One post, on a sending thread."""
    deadline = budget.deadline  # set as the thread was handed the call
    with guard.attempt(pins, guarded=not allow_private) as state:
        try:
            plugin = plugin_for(channel)
        except Unprocessable as exc:
            return LiveOutcome(False, ref, exc.message, None, True)
        secrets = [channel.url, *(str(getattr(plugin, name, None) or "") for name in _SECRETS)]
        exchange = Exchange(
            module.NAME, state, deadline=deadline, endpoint=endpoint, ref=ref, secrets=secrets
        )
        try:
            unfit = module.unfit(plugin)
            if unfit is not None:
                return LiveOutcome(False, ref, unfit, None, True)
            if kept is None:
                return module.create(exchange, plugin, text, key)
            return module.edit(exchange, plugin, text, key, kept)
        except NoAnswer as exc:
            return exchange.failed(None, str(exc))
        except Exception as exc:  # a bug here or in the plugin: its message may quote the URL
            return exchange.failed(None, f"failed ({type(exc).__name__})")
        finally:
            exchange.close()


def _read_ref(ref: str | None, service: str, needed: tuple[str, ...]) -> dict[str, Any] | None:
    """The reference's fields, or None when there is none or it is not one of `service`
    that holds the fields `needed`."""
    if ref is None:
        return None
    try:
        fields = json.loads(ref)
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("service") != service:
        return None
    return None if any(fields.get(name) is None for name in needed) else fields
