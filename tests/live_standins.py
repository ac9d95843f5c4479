"""Local stand-ins for the services live messages edit (ntfy, Telegram, Discord, Slack),
each a small HTTP server on 127.0.0.1 written to the service's documented API: its paths
and bodies, the ids it returns, its errors. Each records the calls it gets, keeps each
message's current text (as the service would show it) by id, and can be told to answer
429 for the next N calls (with the service's own form of `retry_after`), to refuse the
credentials, or to hang. Fixtures at the end."""

from __future__ import annotations

import abc
import email.header
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

NTFY_TOPIC, NTFY_USER, NTFY_PASSWORD = "headway-live", "ntfyuser", "ntfy-secret-pass"
TELEGRAM_TOKEN = "123456789:AAHeadwayLiveTestTokenAbCdEfGhIjKlMn"
TELEGRAM_CHAT = -1001234567890
DISCORD_ID, DISCORD_TOKEN = "112233445566778899", "hw-Discord_Webhook-Token-0123456789abcdef"
SLACK_TOKEN, SLACK_CHANNEL_ID = "xoxb-1234-5678-HeadwayLiveTest", "C0HEADWAY1"


@dataclass
class Call:
    """One request as a stand-in got it."""

    method: str
    path: str
    query: dict[str, str]
    body: Any  # the JSON body, else the text
    headers: dict[str, str]


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class StandIn(abc.ABC):
    """What every stand-in shares: the server, the calls, the messages' texts by id, and
    the switches (`rate_limit`, `refuse_credentials`, `hang`)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.calls: list[Call] = []
        self.requests = 0  # every request, hung ones included
        self.messages: dict[str, str] = {}  # id -> the text shown
        self.refusing = False
        self._limited: list[float] = []  # the retry_after of each coming 429
        self._hang = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                stand_in._serve(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

            def log_message(self, *args: object) -> None:
                return

        self._handler = Handler
        self.port = 0
        self._listen()

    def _listen(self) -> None:
        self.server = ThreadingHTTPServer((self.host, self.port), self._handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def go_down(self) -> None:
        """Stop listening (connections are refused), keeping what was received."""
        self.server.shutdown()
        self.server.server_close()

    def come_back(self) -> None:
        """Listen again, on the same port."""
        self._listen()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def rate_limit(self, times: int = 1, retry_after: float = 7) -> None:
        """Answer the next `times` calls with the service's 429."""
        with self._lock:
            self._limited += [retry_after] * times

    def refuse_credentials(self, refusing: bool = True) -> None:
        self.refusing = refusing

    def hang(self) -> None:
        """Answer nothing from now on (until `stop` or `release`)."""
        self._release.clear()
        self._hang.set()

    def release(self) -> None:
        """Stop hanging: the hung requests end unanswered, the next are answered again."""
        self._hang.clear()
        self._release.set()

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def next_id(self) -> int:
        return next(self._ids)

    @abc.abstractmethod
    def handle(self, call: Call) -> Reply:
        """The service's answer to one call (each stand-in's API)."""

    @abc.abstractmethod
    def too_many(self, retry_after: float) -> Reply:
        """The service's own 429, asking to wait `retry_after` seconds."""

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("content-length") or 0)
        raw = request.rfile.read(length)
        parts = urlsplit(request.path)
        headers = {name.lower(): value for name, value in request.headers.items()}
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        call = Call(request.command, parts.path, _query(parts.query), body, headers)
        with self._lock:
            self.requests += 1
        if self._hang.is_set():
            self._release.wait(30)
            request.close_connection = True
            return
        with self._lock:
            self.calls.append(call)
            limited = self._limited.pop(0) if self._limited else None
        reply = self.too_many(limited) if limited is not None else self.handle(call)
        data = json.dumps(reply.body).encode() if reply.body is not None else b""
        request.send_response(reply.status)
        for name, value in reply.headers.items():
            request.send_header(name, value)
        request.send_header("content-type", "application/json")
        request.send_header("content-length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


class NtfyStandIn(StandIn):
    """ntfy 2.16: `POST|PUT /<topic>/<sequence_id>` publishes (a text body, `Title` and
    `Priority` headers, RFC 2047 words decoded) and replaces the sequence's notification;
    `PUT /<topic>/<sequence_id>/clear` clears it. Basic auth as `NTFY_USER`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.priorities: dict[str, list[str]] = {}  # sequence id -> each publish's priority
        self.titles: dict[str, str] = {}
        self.cleared: list[str] = []

    def url(self) -> str:
        return f"ntfy://{NTFY_USER}:{NTFY_PASSWORD}@{self.host}:{self.port}/{NTFY_TOPIC}"

    def too_many(self, retry_after: float) -> Reply:
        return Reply(429, {"code": 42901, "http": 429, "error": "limit reached: too many requests"})

    def handle(self, call: Call) -> Reply:
        import base64

        expected = base64.b64encode(f"{NTFY_USER}:{NTFY_PASSWORD}".encode()).decode()
        if self.refusing or call.headers.get("authorization") != f"Basic {expected}":
            return Reply(401, {"code": 40101, "http": 401, "error": "unauthorized"})
        found = re.fullmatch(r"/([-_A-Za-z0-9]{1,64})/([-_A-Za-z0-9]{1,64})(/clear)?", call.path)
        if found is None or found.group(1) != NTFY_TOPIC or call.method not in ("POST", "PUT"):
            return Reply(404, {"code": 40401, "http": 404, "error": "page not found"})
        sequence_id = found.group(2)
        reply = {"id": f"m{self.next_id()}", "time": int(time.time()), "topic": NTFY_TOPIC}
        if found.group(3):
            self.cleared.append(sequence_id)
            return Reply(200, reply | {"event": "message_clear", "sequence_id": sequence_id})
        title = str(email.header.make_header(email.header.decode_header(call.headers["title"])))
        message = call.body if isinstance(call.body, str) else json.dumps(call.body)
        self.titles[sequence_id] = title
        self.messages[sequence_id] = message
        self.priorities.setdefault(sequence_id, []).append(call.headers.get("priority", "3"))
        return Reply(
            200,
            reply | {"event": "message", "sequence_id": sequence_id, "title": title}
            | {"message": message},
        )  # fmt: skip


class TelegramStandIn(StandIn):
    """The Bot API: `POST /bot<token>/sendMessage` and `/bot<token>/editMessageText`
    (JSON), answering `{"ok": true, "result": Message}` or `{"ok": false, "error_code",
    "description"}` as Telegram does; plain text only (a `parse_mode` is refused here)."""

    def url(self) -> str:
        return f"tgram://{TELEGRAM_TOKEN}/{TELEGRAM_CHAT}"

    def too_many(self, retry_after: float) -> Reply:
        return _telegram_error(
            429, f"Too Many Requests: retry after {retry_after:g}", retry_after=retry_after
        )

    def handle(self, call: Call) -> Reply:
        found = re.fullmatch(r"/bot([^/]+)/(\w+)", call.path)
        if found is None:
            return _telegram_error(404, "Not Found")
        if self.refusing or found.group(1) != TELEGRAM_TOKEN:
            return _telegram_error(401, "Unauthorized")
        body = call.body if isinstance(call.body, dict) else {}
        if body.get("chat_id") != TELEGRAM_CHAT:
            return _telegram_error(400, "Bad Request: chat not found")
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            return _telegram_error(400, "Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            return _telegram_error(400, "Bad Request: message is too long")
        if "parse_mode" in body:
            return _telegram_error(400, "Bad Request: this stand-in takes plain text only")
        if found.group(2) == "sendMessage":
            message_id = str(self.next_id())
        elif found.group(2) == "editMessageText":
            message_id = str(body.get("message_id"))
            if message_id not in self.messages:
                return _telegram_error(400, "Bad Request: message to edit not found")
            if self.messages[message_id] == text:
                return _telegram_error(
                    400,
                    "Bad Request: message is not modified: specified new message content "
                    "and reply markup are exactly the same as a current content and reply "
                    "markup of the message",
                )
        else:
            return _telegram_error(404, "Not Found")
        self.messages[message_id] = text
        chat = {"id": TELEGRAM_CHAT, "type": "supergroup", "title": "Builds"}
        message = {"message_id": int(message_id), "date": int(time.time()), "chat": chat}
        return Reply(200, {"ok": True, "result": message | {"text": text}})


class DiscordStandIn(StandIn):
    """Webhooks: `POST /api/webhooks/<id>/<token>?wait=true` returns the message,
    `PATCH .../messages/<message_id>` edits it; 404 "Unknown Webhook" for another id, 401
    "Invalid Webhook Token" for another token, 429 with `retry_after` (seconds) in the body
    and `Retry-After`. Each message's text is kept as Discord shows it (`discord_shows`)."""

    def __init__(self) -> None:
        super().__init__()
        self.contents: dict[str, str] = {}  # the raw content, escapes included

    def url(self) -> str:
        return f"discord://{DISCORD_ID}/{DISCORD_TOKEN}"

    def too_many(self, retry_after: float) -> Reply:
        body = {"message": "You are being rate limited.", "retry_after": retry_after}
        return Reply(429, body | {"global": False}, {"retry-after": str(int(retry_after) + 1)})

    def handle(self, call: Call) -> Reply:
        found = re.fullmatch(r"/api/webhooks/(\d+)/([^/]+)(?:/messages/(\d+))?", call.path)
        if found is None or found.group(1) != DISCORD_ID:
            return Reply(404, {"message": "Unknown Webhook", "code": 10015})
        if self.refusing or found.group(2) != DISCORD_TOKEN:
            return Reply(401, {"message": "Invalid Webhook Token", "code": 50027})
        body = call.body if isinstance(call.body, dict) else {}
        content = body.get("content")
        if not isinstance(content, str) or len(content) > 2000:
            return Reply(400, {"message": "Invalid Form Body", "code": 50035})
        if found.group(3) is None and call.method == "POST":
            message_id = str(1_200_000_000_000_000_000 + self.next_id())
        elif call.method == "PATCH" and found.group(3) in self.messages:
            message_id = found.group(3)
        else:
            return Reply(404, {"message": "Unknown Message", "code": 10008})
        self.contents[message_id] = content
        self.messages[message_id] = discord_shows(content)
        message = {"id": message_id, "type": 0, "content": content, "webhook_id": DISCORD_ID}
        if call.method == "POST" and call.query.get("wait") != "true":
            return Reply(204, None)
        return Reply(200, message | {"channel_id": "998877665544332211"})


class SlackStandIn(StandIn):
    """The Web API: `POST /api/chat.postMessage` (channel by name or id) and
    `/api/chat.update` (channel id and `ts`), with a bearer token, answering HTTP 200 with
    `{"ok": false, "error": ...}` for its errors, and 429 with `Retry-After` when rate
    limited. Each message's text is kept as Slack shows it (`slack_shows`)."""

    def url(self) -> str:
        return f"slack://{SLACK_TOKEN}/#builds"

    def too_many(self, retry_after: float) -> Reply:
        return Reply(
            429, {"ok": False, "error": "ratelimited"}, {"retry-after": f"{retry_after:g}"}
        )

    def handle(self, call: Call) -> Reply:
        token = call.headers.get("authorization", "").removeprefix("Bearer ")
        if not token:
            return Reply(200, {"ok": False, "error": "not_authed"})
        if self.refusing or token != SLACK_TOKEN:
            return Reply(200, {"ok": False, "error": "invalid_auth"})
        body = call.body if isinstance(call.body, dict) else {}
        channel, text = body.get("channel"), body.get("text")
        if call.path == "/api/chat.postMessage" and channel in ("#builds", SLACK_CHANNEL_ID):
            ts = f"{int(time.time())}.{self.next_id():06d}"
        elif call.path == "/api/chat.update" and channel == SLACK_CHANNEL_ID:
            ts = body.get("ts")
            if ts not in self.messages:
                return Reply(200, {"ok": False, "error": "message_not_found"})
        elif call.path in ("/api/chat.postMessage", "/api/chat.update"):
            return Reply(200, {"ok": False, "error": "channel_not_found"})
        else:
            return Reply(404, None)
        if not isinstance(text, str) or not text:
            return Reply(200, {"ok": False, "error": "no_text"})
        self.messages[ts] = slack_shows(text)
        message = {"type": "message", "text": text, "ts": ts}
        return Reply(200, {"ok": True, "channel": SLACK_CHANNEL_ID, "ts": ts, "message": message})


def discord_shows(content: str) -> str:
    """What Discord shows of `content`, as plain text: a backslash before a punctuation
    character is dropped (Discord's escape), web addresses are shown as they are. Raises
    ValueError at a character that would have started Markdown (or a mention) unescaped."""
    if re.search(r"^\s*\d+\.", content, re.MULTILINE):
        raise ValueError(f"an unescaped numbered list in Discord content: {content!r}")
    shown: list[str] = []
    at = 0
    while at < len(content):
        url = re.match(r"https?://[^\s<>]+", content[at:])
        char = content[at]
        if url:
            shown.append(url.group(0))
            at += len(url.group(0))
        elif char == "\\" and at + 1 < len(content) and not content[at + 1].isalnum():
            shown.append(content[at + 1])
            at += 2
        elif char in "*_~`|><#[]@" or (char == "-" and _line_start(content, at)):
            raise ValueError(f"unescaped {char!r} in Discord content at {at}: {content!r}")
        else:
            shown.append(char)
            at += 1
    return "".join(shown)


def slack_shows(text: str) -> str:
    """What Slack shows of `text` (sent with `parse: none`): its three entities decoded.
    Raises ValueError at a raw `<` or `>` (Slack's link and mention markup) or a raw `&`."""
    if re.search(r"[<>]|&(?!amp;|lt;|gt;)", text):
        raise ValueError(f"unescaped Slack control character in {text!r}")
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _line_start(text: str, at: int) -> bool:
    return text[:at].rpartition("\n")[2].strip() == ""


def _telegram_error(status: int, description: str, *, retry_after: float | None = None) -> Reply:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": int(retry_after)}
    return Reply(status, body)


def _query(text: str) -> dict[str, str]:
    return {name: values[-1] for name, values in parse_qs(text).items()}


def _serving(stand_in: StandIn) -> Iterator[StandIn]:
    try:
        yield stand_in
    finally:
        stand_in.stop()


@pytest.fixture
def ntfy_standin() -> Iterator[NtfyStandIn]:
    yield from _serving(NtfyStandIn())  # type: ignore[misc]


@pytest.fixture
def telegram_standin() -> Iterator[TelegramStandIn]:
    yield from _serving(TelegramStandIn())  # type: ignore[misc]


@pytest.fixture
def discord_standin() -> Iterator[DiscordStandIn]:
    yield from _serving(DiscordStandIn())  # type: ignore[misc]


@pytest.fixture
def slack_standin() -> Iterator[SlackStandIn]:
    yield from _serving(SlackStandIn())  # type: ignore[misc]
