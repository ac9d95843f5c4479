"""The live stream of a space (`GET /spaces/{s}/events`, `GET /shared/{id}/events`):
Server-Sent Events read from lines, and a follower that reconnects when it drops."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import httpx

from .calls import api_error
from .errors import APIError, HeadwayError

# Told by the follower, not the server: the stream dropped and is being opened again.
RECONNECTING = "reconnecting"
# How the follower names the refusals it waits out, in place of the server's message
# (whose own "retry in N s" would be stale by the time it is read).
REFUSALS = {429: "rate limited", 503: "service unavailable"}


@dataclass(frozen=True, slots=True)
class Event:
    """One event: `snapshot` (data: the space's JSON), `task` (data: one task's JSON),
    or RECONNECTING (data: why; `retry_in`: the seconds the follower waits before it
    opens the stream again)."""

    event: str
    data: str
    id: str | None = None
    retry_in: float | None = None


def parse_events(lines: Iterable[str]) -> Iterator[Event]:
    """Events from the stream's lines (without their line ends), as the Server-Sent
    Events format reads them: `event:`, `data:` (several are joined by newlines), `id:`,
    comments (`:`) skipped, a blank line ending each event."""
    name, data, last_id = "message", [], None
    for line in lines:
        if not line:
            if data:
                yield Event(name, "\n".join(data), last_id)
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            last_id = value


def follow(
    url: str,
    *,
    timeout: float = 10.0,
    idle: float = 45.0,
    backoff: tuple[float, float] = (0.5, 10.0),
) -> Iterator[Event]:
    """The events of the stream at `url`, for as long as the caller reads. When the stream
    drops (or stays silent `idle` seconds: the server sends a comment at least every 15),
    or is refused with a status retrying can change (429, 503, any 5xx, 408, 425), yields
    a RECONNECTING event and opens it again after a wait, starting over with a snapshot.
    The wait is the backoff (`backoff[0]` doubling to `backoff[1]`, back to the start
    once an event arrives), or what a refusal's Retry-After asks if that is longer: read
    as the client reads it (`calls.retry_after`: seconds or an HTTP date, clamped to
    0-60 s, garbage ignored), so a server that says 0 each time still gets the backoff.
    An answer that retrying cannot change (a 404) raises APIError."""
    delay = backoff[0]
    limits = httpx.Timeout(timeout, read=idle)
    with httpx.Client(timeout=limits, headers={"accept": "text/event-stream"}) as http:
        while True:
            asked: float | None = None
            try:
                with http.stream("GET", url) as response:
                    if response.status_code != 200:
                        response.read()
                        raise api_error(response)
                    kind = response.headers.get("content-type", "")
                    if not kind.startswith("text/event-stream"):
                        raise HeadwayError(f"{url} is not a live stream ({kind or 'no type'})")
                    for event in parse_events(response.iter_lines()):
                        delay = backoff[0]
                        yield event
                reason = "the stream ended"
            except httpx.TransportError as exc:
                reason = str(exc) or type(exc).__name__
            except APIError as exc:
                if not exc.retryable:
                    raise
                reason = REFUSALS.get(exc.status, str(exc))
                asked = exc.retry_after
            wait = delay if asked is None else max(delay, asked)
            yield Event(RECONNECTING, reason, retry_in=wait)
            time.sleep(wait)
            delay = min(delay * 2, backoff[1])
