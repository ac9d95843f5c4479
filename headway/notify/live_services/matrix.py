"""Matrix: an `m.text` message sent to the URL's first room, then replaced by edit events
(`m.replace`, whose `m.new_content` clients show in place of the original).

Auth: a URL with a user and a password logs in (`m.login.password`) on the first post,
always as the same device (an id derived from the host and the user, so a retried send
stays in one transaction scope and the account gains one device, not one per task), and
the access token it gets is kept in the message's reference: the edits reuse it, and log
in again only when it is refused. That reference is as secret as the URL. A URL with a
token alone (`matrixs://token@host/#room`) sends with that token, kept nowhere else.

Transaction ids are derived from (key, revision, content): a retried send of the same text
is taken once; a different text is a new event. A webhook-mode URL (t2bot and the
others) cannot edit.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import quote

from .wire import Answer, Exchange, LiveOutcome, LiveText, NoAnswer, cut, utf8_bytes

NAME = "Matrix"
REF_FIELDS = ("room", "event")  # what its reference must hold
CLIENT = "/_matrix/client/v3"
MAX_BODY_BYTES = 30000  # an event holds at most 65,536 bytes: the text, twice in an edit


def unfit(plugin: Any) -> str | None:
    if plugin.mode != "off":
        url = (
            "t2bot webhook URL"
            if plugin.mode == "t2bot"
            else f"URL in webhook mode ({plugin.mode})"
        )
        return (
            f"A Matrix {url} cannot edit the messages it sent: a live message needs a Matrix "
            "account (matrix://user:password@host/#room)."
        )
    if not plugin.rooms:
        return "A Matrix URL needs a room (#alias or !id) to keep a live message."
    if not plugin.password:
        return "A Matrix URL needs a password or an access token to keep a live message."
    return None


def create(exchange: Exchange, plugin: Any, text: LiveText, key: str) -> LiveOutcome:
    client = _Client(exchange, plugin, _discovered(exchange, plugin), token=None)
    failed = client.log_in()
    if failed is not None:
        return failed
    answer = client.call("POST", f"/join/{quote(client.room(plugin.rooms[0]), safe='')}", {})
    room_id = answer.fields.get("room_id")
    if not (answer.success and isinstance(room_id, str)):
        return _failed(exchange, answer)
    content = _content(text)
    answer = client.send(room_id, content, _txn(key, 0, content))
    event_id = answer.fields.get("event_id")
    if not (answer.success and isinstance(event_id, str)):
        return _failed(exchange, answer)
    ref: dict[str, Any] = {"service": "matrix", "room": room_id, "event": event_id, "rev": 1}
    return exchange.done(ref | client.kept(), answer, "created")


def edit(
    exchange: Exchange, plugin: Any, text: LiveText, key: str, ref: dict[str, Any]
) -> LiveOutcome:
    base = exchange.endpoint or ref.get("base") or _own_base(plugin)
    client = _Client(exchange, plugin, base, token=ref.get("token"))
    new = _content(text)
    content = new | {
        "body": f"* {new['body']}",
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": ref["event"]},
    }
    revision = int(ref.get("rev", 1))
    txn = _txn(key, revision, content)
    answer = client.send(ref["room"], content, txn)
    if answer.status == 401 and client.can_log_in:  # the kept token expired or was revoked
        client.token = None
        failed = client.log_in()
        if failed is not None:
            return failed
        answer = client.send(ref["room"], content, txn)
    if not answer.success:
        return _failed(exchange, answer)
    return exchange.done(ref | {"rev": revision + 1} | client.kept(), answer, "edited")


class _Client:
    """Client-server API calls as the URL's user."""

    def __init__(self, exchange: Exchange, plugin: Any, base: str, token: str | None) -> None:
        self.exchange, self.plugin, self.base = exchange, plugin, base
        self.can_log_in = bool(plugin.user and plugin.password)
        self.token = token or (None if plugin.user else plugin.password)
        self.logged_in = False  # the token is one this post got (kept in the reference)
        self.user_id: str | None = None

    def call(self, method: str, path: str, body: Any = None) -> Answer:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        url = self.base + CLIENT + path
        return self.exchange.call(method, url, json_body=body, headers=headers)

    def log_in(self) -> LiveOutcome | None:
        """Log in unless a token is there; None when done, else the failure's outcome."""
        if self.token:
            return None
        answer = self.call(
            "POST",
            "/login",
            {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": self.plugin.user},
                "password": self.plugin.password,
                "device_id": _device_id(self.plugin),
                "initial_device_display_name": "Headway live messages",
            },
        )
        token = answer.fields.get("access_token")
        if not (answer.success and isinstance(token, str)):
            return _failed(self.exchange, answer)
        self.token, self.logged_in = token, True
        self.exchange.secrets.append(token)
        self.user_id = answer.fields.get("user_id")
        return None

    def room(self, room: str) -> str:
        """A room as the URL names it, its server added when it has none (`#alias`): the
        user's, as Apprise's plugin does."""
        if room.startswith("!"):
            return room
        alias = room if room.startswith("#") else f"#{room}"
        if ":" in alias:
            return alias
        if self.user_id is None:
            self.user_id = self.call("GET", "/account/whoami").fields.get("user_id")
        server = str(self.user_id).partition(":")[2] if self.user_id else self.plugin.host
        return f"{alias}:{server}"

    def send(self, room_id: str, content: dict[str, Any], txn: str) -> Answer:
        path = f"/rooms/{quote(room_id, safe='')}/send/m.room.message/{txn}"
        return self.call("PUT", path, content)

    def kept(self) -> dict[str, Any]:
        """What the reference keeps of this client: a token it logged in for, a base URL
        discovered."""
        kept: dict[str, Any] = {"token": self.token} if self.logged_in else {}
        if not self.exchange.endpoint and self.base != _own_base(self.plugin):
            kept["base"] = self.base
        return kept


def _content(text: LiveText) -> dict[str, Any]:
    # An empty m.mentions: no one is pinged, whatever the text says (@room included).
    return {
        "msgtype": "m.text",
        "body": cut(text.whole(), MAX_BODY_BYTES, utf8_bytes),
        "m.mentions": {},
    }


def _txn(key: str, revision: int, content: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    return f"headway.{key}.{revision}.{digest}"


def _device_id(plugin: Any) -> str:
    seed = f"{plugin.host}|{plugin.port}|{plugin.user}".encode()
    return "HEADWAY" + hashlib.sha256(seed).hexdigest()[:10].upper()


def _own_base(plugin: Any) -> str:
    port = f":{plugin.port}" if plugin.port else ""
    return f"{'https' if plugin.secure else 'http'}://{plugin.host}{port}"


def _discovered(exchange: Exchange, plugin: Any) -> str:
    """The homeserver's base URL: the endpoint given, else the one the host's
    `/.well-known/matrix/client` names (over HTTPS, as Apprise's plugin looks it up), else
    the host's own."""
    if exchange.endpoint:
        return exchange.endpoint
    own = _own_base(plugin)
    if not (plugin.secure and plugin.discovery):
        return own
    try:
        answer = exchange.call("GET", f"{own}/.well-known/matrix/client")
    except NoAnswer:
        return own
    homeserver = answer.fields.get("m.homeserver")
    found = homeserver.get("base_url") if isinstance(homeserver, dict) else None
    if answer.success and isinstance(found, str) and found.startswith(("https://", "http://")):
        return found.rstrip("/")
    return own


def _failed(exchange: Exchange, answer: Answer) -> LiveOutcome:
    fields = answer.fields
    wait_ms = fields.get("retry_after_ms")  # M_LIMIT_EXCEEDED's, older than its Retry-After
    asked = isinstance(wait_ms, int | float) and answer.retry_after_s is None
    errcode = str(fields.get("errcode") or "") or None
    refused = answer.status in (401, 403, 404)
    return exchange.failed(answer, errcode, refused=refused, wait=wait_ms / 1000 if asked else None)
