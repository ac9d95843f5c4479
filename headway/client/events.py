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


@dataclass(frozen=True, slots=True)
class Event:
    """One event: `snapshot` (data: the space's JSON), `task` (data: one task's JSON),
    or RECONNECTING (data: why)."""

    event: str
    data: str
    id: str | None = None


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
    yields a RECONNECTING event and opens it again after a backoff, starting over with a
    snapshot. An answer that retrying cannot change (a 404) raises APIError."""
    delay = backoff[0]
    limits = httpx.Timeout(timeout, read=idle)
    with httpx.Client(timeout=limits, headers={"accept": "text/event-stream"}) as http:
        while True:
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
                reason = str(exc)
            yield Event(RECONNECTING, reason)
            time.sleep(delay)
            delay = min(delay * 2, backoff[1])
