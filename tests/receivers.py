"""Real receivers on 127.0.0.1 for channel tests, speaking what Apprise's own plugins send:
a plain HTTP endpoint (json://, form://, xml://), an ntfy server (ntfy://), a Gotify
server (gotify://) and an SMTP server (mailto://, aiosmtpd). Each records the messages
that arrived, can be told to refuse the next N (HTTP 429/503 with `Retry-After`, SMTP
451), or to hang until it is stopped or released. Fixtures at the end."""

from __future__ import annotations

import abc
import asyncio
import email
import email.policy
import json
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import parse_qs, urlsplit

import pytest

HTTPKind = Literal["json", "form", "xml", "ntfy", "gotify"]
GOTIFY_TOKEN = "AbCdEf1234567"
NTFY_TOPIC = "headway-tests"


@dataclass
class Arrival:
    """One message as the receiver got it."""

    title: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""
    path: str = ""
    at: float = field(default_factory=time.monotonic)


@dataclass
class Refusal:
    status: int  # HTTP status, or SMTP code
    retry_after: str | None


class _Receiver(abc.ABC):
    """What every receiver shares: arrivals, planned refusals, hanging."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self.requests = 0  # every attempt, refused or hung ones included
        self._refusals: list[Refusal] = []
        self._hang = False
        self._release = threading.Event()
        self._lock = threading.Lock()

    def refuse(self, times: int = 1, *, status: int = 429, retry_after: str | None = "7") -> None:
        """Refuse the next `times` messages with `status` (and `Retry-After`), then accept."""
        with self._lock:
            self._refusals += [Refusal(status, retry_after)] * times

    def hang(self) -> None:
        """Answer nothing from now on until `stop` or `release` (the connection stays open)."""
        self._hang = True

    def release(self) -> None:
        """Stop hanging: the hung requests end unanswered, the next are answered again."""
        self._hang = False
        self._release.set()

    def _next(self) -> Refusal | Literal["hang"] | None:
        with self._lock:
            self.requests += 1
            if self._hang:
                return "hang"
            return self._refusals.pop(0) if self._refusals else None

    def __enter__(self) -> _Receiver:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop serving, releasing a hanging request."""

    def texts(self) -> str:
        """Everything that arrived, titles and messages, as one text (for `in` checks)."""
        return "\n".join(f"{a.title}\n{a.message}" for a in self.arrivals)


class HTTPReceiver(_Receiver):
    """An HTTP server of one kind: `json`/`form`/`xml` take any POST (Apprise's custom
    plugins), `ntfy` takes `POST /` with a JSON message for its topic, `gotify` takes
    `POST /message` with its application token (header `X-Gotify-Key` or `?token=`)."""

    def __init__(self, kind: HTTPKind, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self.kind = kind
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                receiver._handle(self)

            def do_PUT(self) -> None:
                receiver._handle(self)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = self.server.server_address[:2]
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def url(self, host: str | None = None) -> str:
        """The Apprise URL that sends here (to `host` in place of the address if given)."""
        where = f"{host or self.host}:{self.port}"
        if self.kind == "ntfy":
            return f"ntfy://{where}/{NTFY_TOPIC}"
        if self.kind == "gotify":
            return f"gotify://{where}/{GOTIFY_TOKEN}"
        return f"{self.kind}://{where}/hook"

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("content-length") or 0)
        raw = request.rfile.read(length)
        plan = self._next()
        if plan == "hang":
            self._release.wait(60)
            request.close_connection = True
            return
        if plan is not None:
            headers = {"retry-after": plan.retry_after} if plan.retry_after is not None else {}
            return _answer(request, plan.status, {"error": "slow down"}, headers)
        parts = urlsplit(request.path)
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            title, message = self._read(parts.path, parse_qs(parts.query), headers, raw)
        except _Refused as refused:
            return _answer(request, refused.status, {"error": refused.reason})
        self.arrivals.append(Arrival(title, message, headers, raw, parts.path))
        _answer(request, 200, {"id": str(len(self.arrivals)), "event": "message"})

    def _read(
        self, path: str, query: dict[str, list[str]], headers: dict[str, str], raw: bytes
    ) -> tuple[str, str]:
        """The title and message of a request, as this kind of server reads them."""
        if self.kind == "json":
            body = json.loads(raw)
            return body.get("title", ""), body["message"]
        if self.kind == "form":
            fields = parse_qs(raw.decode(), keep_blank_values=True)
            return fields.get("title", [""])[0], fields["message"][0]
        if self.kind == "xml":
            root = ET.fromstring(raw)
            found = {element.tag.split("}")[-1]: element.text or "" for element in root.iter()}
            return found.get("Subject", ""), found["Message"]
        if self.kind == "ntfy":
            if path not in ("/", ""):
                raise _Refused(404, "post JSON to /")
            body = json.loads(raw)
            if body.get("topic") != NTFY_TOPIC:
                raise _Refused(404, "no such topic")
            return body.get("title", ""), body.get("message", "")
        if path.rstrip("/") != "/message":
            raise _Refused(404, "not found")
        token = headers.get("x-gotify-key") or (query.get("token") or [""])[0]
        if token != GOTIFY_TOKEN:
            raise _Refused(401, "Unauthorized")
        body = json.loads(raw)
        return body.get("title", ""), body["message"]


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _answer(
    request: BaseHTTPRequestHandler,
    status: int,
    body: dict[str, str],
    headers: dict[str, str] | None = None,
) -> None:
    data = json.dumps(body).encode()
    request.send_response(status)
    for name, value in (headers or {}).items():
        request.send_header(name, value)
    request.send_header("content-type", "application/json")
    request.send_header("content-length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


class SMTPReceiver(_Receiver):
    """An SMTP server (aiosmtpd) on its own thread's event loop. A refusal answers the
    message's DATA with `451` (try again later); hanging never answers DATA."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__()
        from aiosmtpd.smtp import SMTP

        self.host = host
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        receiver = self

        class Handler:
            async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
                return await receiver._data(envelope)

        self._protocols: list[SMTP] = []

        def protocol() -> SMTP:
            made = SMTP(Handler(), hostname="receiver.test")
            self._protocols.append(made)
            return made

        async def serve() -> asyncio.base_events.Server:
            return await self.loop.create_server(protocol, host, 0)

        self.server = asyncio.run_coroutine_threadsafe(serve(), self.loop).result(5)
        self.port = self.server.sockets[0].getsockname()[1]

    def url(self, host: str | None = None) -> str:
        """The mailto:// URL that sends here, over plain SMTP."""
        where = f"{host or self.host}:{self.port}"
        return (
            f"mailto://{where}?smtp={host or self.host}&from=headway@example.com"
            "&to=owner@example.com&mode=insecure"
        )

    async def _data(self, envelope: object) -> str:
        plan = self._next()
        if plan == "hang":
            await asyncio.to_thread(self._release.wait, 60)
            return "421 4.3.2 closing"
        if plan is not None:
            return f"{plan.status} 4.7.1 try again later"
        content: bytes = envelope.original_content or envelope.content  # type: ignore[attr-defined]
        parsed = email.message_from_bytes(content, policy=email.policy.default)
        part = parsed.get_body(preferencelist=("plain", "html"))
        text = part.get_content() if part is not None else ""
        headers = {k.lower(): str(v) for k, v in parsed.items()}
        self.arrivals.append(Arrival(str(parsed["subject"] or ""), text, headers, content))
        return "250 OK"

    def stop(self) -> None:
        self._release.set()

        async def close() -> None:
            self.server.close()
            for protocol in self._protocols:  # connections still open (a hung one)
                if protocol.transport is not None:
                    protocol.transport.close()
            await asyncio.sleep(0)
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def _serving(receiver: HTTPReceiver | SMTPReceiver) -> Iterator[HTTPReceiver | SMTPReceiver]:
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture
def json_receiver() -> Iterator[HTTPReceiver]:
    yield from _serving(HTTPReceiver("json"))  # type: ignore[misc]


@pytest.fixture
def form_receiver() -> Iterator[HTTPReceiver]:
    yield from _serving(HTTPReceiver("form"))  # type: ignore[misc]


@pytest.fixture
def xml_receiver() -> Iterator[HTTPReceiver]:
    yield from _serving(HTTPReceiver("xml"))  # type: ignore[misc]


@pytest.fixture
def ntfy_receiver() -> Iterator[HTTPReceiver]:
    yield from _serving(HTTPReceiver("ntfy"))  # type: ignore[misc]


@pytest.fixture
def gotify_receiver() -> Iterator[HTTPReceiver]:
    yield from _serving(HTTPReceiver("gotify"))  # type: ignore[misc]


@pytest.fixture
def smtp_receiver() -> Iterator[SMTPReceiver]:
    yield from _serving(SMTPReceiver())  # type: ignore[misc]
