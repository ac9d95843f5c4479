"""A notification channel's receiver for the benchmarks: an HTTP server on 127.0.0.1, in a
thread of the harness, taking what Apprise's `json://` plugin posts (`{"title",
"message", ...}`) and recording each message with the wall-clock time it arrived."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Message:
    at: float  # time.time() when it arrived: the server's clock is the same machine's
    title: str
    text: str


class Receiver:
    """Records every message posted to it; `url` is the channel's Apprise URL."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                at = time.time()
                try:
                    body = json.loads(raw)
                    message = Message(at, str(body.get("title", "")), str(body.get("message", "")))
                except (ValueError, AttributeError):
                    message = Message(at, "", raw.decode(errors="replace"))
                with receiver._lock:
                    receiver.messages.append(message)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"json://{HOST}:{self.port}/hook"

    def received(self) -> list[Message]:
        with self._lock:
            return list(self.messages)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
