"""What the server says in its log, and how: one INFO line per delivery outcome, per
refusal and per request (the access log, opt-in with HEADWAY_ACCESS_LOG), with every uuid
masked (a space uuid is a credential; so is a task's, which leads to its space) and an
endpoint named by its kind and host, never its path, query or userinfo (they hold tokens).

The access log is a subclass of the app chosen once at start (`AccessLogged`), so a server
without it pays nothing per request. Refusals under a flood would cost a line each: one
client's refusals of one kind are logged once a minute, with how many were not."""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("headway")
access_log = logging.getLogger("headway.access")

_UUID = re.compile(
    r"([0-9a-fA-F]{4})[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
    r"[0-9a-fA-F]{12}"
)

REFUSAL_EVERY_S = 60.0
"""One line per client and kind of refusal this often at most."""
MAX_REFUSALS_HELD = 4096
"""Clients and kinds whose last refusal line is remembered; beyond, all are forgotten."""


def masked(text: str) -> str:
    """`text` with each uuid cut to its first 4 hex digits: `ddda…`."""
    return _UUID.sub(r"\1…", text)


def endpoint(kind: str, uuid: str, url: str) -> str:
    """A webhook or channel as a log names it: `webhook ddda… (https://hooks.example.com)`,
    `channel 3f9c… (ntfy)`: the scheme and, for http(s), the host; never the rest."""
    parts = urlsplit(url)
    where = parts.scheme or "?"
    if parts.scheme in ("http", "https") and parts.hostname:
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        where = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    return f"{kind} {masked(uuid)} ({where})"


def server_log_config() -> dict[str, Any]:
    """uvicorn's logging configuration with the `headway` logger at INFO on standard
    error, in uvicorn's format. The `headway` logger still propagates (tests' caplog)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["headway"] = {"handlers": ["default"], "level": "INFO", "propagate": True}
    return config


class RefusalLog:
    """Logs 429 and 503 refusals: which limit (the refusal's message says it) and the
    client's address; one line per client and kind every `REFUSAL_EVERY_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[tuple[str, int, str], tuple[float, int]] = {}

    def refused(self, status: int, message: str, client: str) -> None:
        kind = message.split("(", 1)[0].split(";", 1)[0][:60]
        key = (client, status, kind)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last[0] < REFUSAL_EVERY_S:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) >= MAX_REFUSALS_HELD:
            self._last.clear()
        self._last[key] = (now, 0)
        more = f" ({last[1]} more like it not logged)" if last is not None and last[1] else ""
        log.info("refused %d to %s: %s%s", status, client, masked(message), more)


def access_line(method: str, path: str, status: int, seconds: float) -> None:
    access_log.info("%s %s %d %.1f ms", method, masked(path), status, seconds * 1000)


def logged(app_class: type) -> type:
    """`app_class` with the access log: one line per HTTP request once its answer ends
    (a live stream's when it closes), method, masked path, status and time."""

    class AccessLogged(app_class):  # type: ignore[misc, valid-type]
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await super().__call__(scope, receive, send)
                return
            started = perf_counter()
            status = 0

            async def noted(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await super().__call__(scope, receive, noted)
            finally:
                access_line(scope["method"], scope["path"], status, perf_counter() - started)

    AccessLogged.__name__ = AccessLogged.__qualname__ = f"AccessLogged{app_class.__name__}"
    return AccessLogged
