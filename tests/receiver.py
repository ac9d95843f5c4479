"""A real HTTP receiver on 127.0.0.1 for webhook tests: records every request and answers
with the statuses it is told to, in order (200 once the plan runs out)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Delivery:
    headers: dict[str, str]
    body: str
    at: float = field(default_factory=time.monotonic)  # when it arrived


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)
    hang_s: float = 0.0  # how long the first request waits before answering
    deliveries: list[Delivery] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def ids(self) -> list[str]:
        return [d.headers["webhook-id"] for d in self.deliveries]

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length).decode()
                hang, receiver.hang_s = receiver.hang_s, 0.0
                if hang:
                    time.sleep(hang)
                receiver.deliveries.append(
                    Delivery({k.lower(): v for k, v in self.headers.items()}, body)
                )
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
