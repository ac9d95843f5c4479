"""`headway watch SPACE`: a space live in the terminal, fed by its live stream, until
Ctrl-C. Rich and the client are imported when it runs."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from .parsers import add_url, command_parser, failed

DESCRIPTION = """\
Show a space live, newest task first: one bar per task with its steps indented below,
percent, count, rate, time left, the age of its last report and its latest log line;
finished tasks are marked ✓, or ✗ with how they failed (their `error` value, or their
failed steps); a task that never reported says "waiting", one silent for 10 min
"stalled". The time left is counted down ("about 20 s", then "4 min"); a failed task's
bar stops where it did. On a narrow terminal the log and the title are cut first; the
mark, the percent, the bar and the time left stay at 80 columns. SPACE is a
space's uuid (default HEADWAY_SPACE, on --url or HEADWAY_URL), a space's address
(http://host/spaces/<uuid>) or a share link (http://host/shared/<id>). When the stream
drops, watch reconnects and starts over from a fresh snapshot. When the server refuses it
(429 over a rate, 503 over a budget or with a dependency down), watch waits what the
answer's Retry-After asks (0-60 s) before it tries again, saying why and how long in its
last line; with no Retry-After, its own backoff (0.5 s doubling to 10 s). Ctrl-C quits,
waiting or not."""


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watch = command_parser(
        commands,
        "watch",
        "show a space live in the terminal",
        DESCRIPTION,
        "headway watch https://headway.example.com/shared/3f9c0e5e-0d7b-4c8e-9d0a-6b1f2c3d4e5f",
    )
    watch.add_argument("space", nargs="?", metavar="SPACE", help="uuid, address or share link")
    watch.add_argument("--limit", type=int, help="only the newest LIMIT top-level tasks")
    watch.add_argument("--state", choices=("active", "finished"), help="only these tasks")
    add_url(watch)
    watch.set_defaults(handler=watch_command)


def stream_url(
    target: str, base_url: str, *, limit: int | None = None, state: str | None = None
) -> str:
    """The live stream's address for a space uuid (on `base_url`), a space's address or a
    share link. ValueError if `target` is an address of neither."""
    query = urlencode(
        {name: value for name, value in (("limit", limit), ("state", state)) if value is not None}
    )
    if "://" not in target:
        return f"{base_url.rstrip('/')}/spaces/{quote(target, safe='')}/events" + (
            f"?{query}" if query else ""
        )
    parts = urlsplit(target)
    segments = parts.path.rstrip("/").split("/")
    if len(segments) < 3 or segments[-2] not in ("spaces", "shared"):
        raise ValueError(f"{target} is neither a space's address nor a share link")
    path = "/".join(segments) + "/events"
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def watch_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from ..client.client import DEFAULT_URL
    from ..client.errors import HeadwayError
    from ..client.events import follow
    from .board import Board, render

    target = args.space or os.environ.get("HEADWAY_SPACE")
    if not target:
        return failed("headway watch: give a space, an address or a share link", 2)
    base_url = args.url or os.environ.get("HEADWAY_URL") or DEFAULT_URL
    try:
        url = stream_url(target, base_url, limit=args.limit, state=args.state)
    except ValueError as exc:
        return failed(f"headway watch: {exc}", 2)
    board = Board()
    try:
        with Live(
            console=Console(),
            refresh_per_second=4,
            get_renderable=lambda: render(board, datetime.now(UTC)),
        ):
            for event in follow(url):
                board.apply(event)
    except KeyboardInterrupt:
        return 0
    except HeadwayError as exc:
        return failed(f"headway watch: {exc}")
    return 0
