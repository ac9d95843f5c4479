"""The busy space's clients, each a process of its own: `python -m bench.busy load …` writes
to one space at a fixed rate, `python -m bench.busy watch …` reads its live streams.

`load URL SPACE --pool FILE --rate R --seconds S --out FILE`: open loop, R task creates
(`POST /spaces/{SPACE}/tasks`) and R reports (`PUT /tasks/{t}`, round-robin over the
pool's tasks, `current` the report's number, increasing) per second, alternating, each
sent at its scheduled instant whatever the answers before it, over up to `CONNECTIONS`
keep-alive connections; then writes every write with the instant of its answer.

`watch --stream LABEL=URL … --out FILE`: opens every stream, says `ready N` once each
has its snapshot, reads them until `stop` arrives on stdin (or `--limit` seconds pass),
then writes every task event each stream received (arrival, task uuid, `current`) and
whether the server ended it. Times are `time.monotonic()`, one clock for every process
of the machine (127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONNECTIONS = 128
# Writes waiting for a connection beyond this are not sent (and counted): the run stays
# bounded in memory and time however slow the server gets.
MAX_WAITING = 2000
LATE_S = 0.05
# Seconds the last writes may take to be answered once the schedule ends.
ANSWER_WAIT_S = 30.0
_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)


class Connection:
    """One keep-alive HTTP/1.1 connection, a request at a time: far cheaper per request
    than a general client, so that the load's process is never what limits the rate."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(*await asyncio.open_connection(host, port))

    async def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        self.writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: bench\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = _LENGTH.search(head)
        if length is None:
            raise ConnectionError(f"an answer without content-length: {head[:200]!r}")
        return int(head[9:12]), await self.reader.readexactly(int(length.group(1)))

    def close(self) -> None:
        self.writer.close()


class Load:
    """The paced writes of one run, and what each answered."""

    def __init__(self, url: str, space: str, pool: list[str], rate: float) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.space, self.pool, self.interval = space, pool, 1 / (2 * rate)
        self.idle: asyncio.Queue[Connection] = asyncio.Queue()
        self.opened = self.waiting = 0
        self.writes: list[list[Any]] = []  # kind, task, current, at (s from start), answered
        self.statuses: Counter[str] = Counter()
        self.not_sent = self.late = 0
        self.max_late_s = 0.0
        self.start = 0.0

    async def run(self, seconds: float) -> None:
        count = round(seconds / self.interval)
        self.start = time.monotonic() + 0.1
        sent: set[asyncio.Task[None]] = set()
        for number in range(count):
            at = self.start + number * self.interval
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.waiting >= MAX_WAITING:
                self.not_sent += 1
                continue
            task = asyncio.create_task(self.write(number, at))
            sent.add(task)
            task.add_done_callback(sent.discard)
        if sent:  # answers still due, for a while
            _, late = await asyncio.wait(sent, timeout=ANSWER_WAIT_S)
            for task in late:
                task.cancel()
            if late:
                self.statuses["unanswered"] += len(late)
        while not self.idle.empty():
            self.idle.get_nowait().close()

    async def connection(self) -> Connection:
        if self.idle.empty() and self.opened < CONNECTIONS:
            self.opened += 1
            return await Connection.open(self.host, self.port)
        return await self.idle.get()

    async def write(self, number: int, at: float) -> None:
        """Write `number`: even a create, odd a report, sent as soon as a connection is free."""
        report = number // 2 + 1
        if number % 2:
            task: str | None = self.pool[report % len(self.pool)]
            method, path = "PUT", f"/tasks/{task}"
            body = b'{"current":%d,"end":1000000000}' % report
        else:
            task, method, path = None, "POST", f"/spaces/{self.space}/tasks"
            body = b'{"title":"busy %d","source":"bench"}' % report
        self.waiting += 1
        try:
            connection = await self.connection()
        finally:
            self.waiting -= 1
        late = time.monotonic() - at
        self.late += late > LATE_S
        self.max_late_s = max(self.max_late_s, late)
        try:
            status, answer = await connection.request(method, path, body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.statuses[type(exc).__name__] += 1
            self.opened -= 1
            connection.close()
            return
        answered = time.monotonic()
        self.idle.put_nowait(connection)
        self.statuses[str(status)] += 1
        if status in (200, 201):
            if task is None:
                task = json.loads(answer)["uuid"]
            current = report if number % 2 else None
            self.writes.append([method, task, current, round(at - self.start, 6), answered])

    def summary(self, seconds: float) -> dict[str, Any]:
        return {
            "start": self.start,
            "seconds": seconds,
            "writes": self.writes,
            "statuses": dict(self.statuses),
            "not_sent": self.not_sent,
            "late": self.late,
            "max_late_ms": round(self.max_late_s * 1000, 1),
            "connections": self.opened,
        }


class Dechunker:
    """The body of a chunked HTTP/1.1 answer, as it arrives."""

    SIZE, CRLF = -1, -2  # states between chunks; 0 or more: bytes of a chunk still to come

    def __init__(self) -> None:
        self.held = b""
        self.left = self.SIZE
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        held, out = self.held + data, []
        while held and not self.finished:
            if self.left == self.SIZE:
                line, found, rest = held.partition(b"\r\n")
                if not found:
                    break
                size = int(line.split(b";")[0], 16)
                self.finished, held, self.left = size == 0, rest, size
            elif self.left == self.CRLF:
                if len(held) < 2:
                    break
                held, self.left = held[2:], self.SIZE
            else:
                out.append(held[: self.left])
                held = held[self.left :]
                self.left -= len(out[-1])
                if self.left == 0:
                    self.left = self.CRLF
        self.held = held
        return b"".join(out)


class Watched(asyncio.Protocol):
    """One stream: its task events as (arrival, task uuid, `current`), and whether the
    server ended it (closed it, or sent its last chunk) before it was let go."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.head = b""
        self.body = Dechunker()
        self.held = b""
        self.snapshot = False
        self.events: list[list[Any]] = []
        self.ended_at: float | None = None
        self.letting_go = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.letting_go and self.ended_at is None:
            self.ended_at = time.monotonic()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.head:
            self.held += data
            head, found, data = self.held.partition(b"\r\n\r\n")
            if not found:
                return
            self.head, self.held = head or b"?", b""
            if not head.startswith(b"HTTP/1.1 200"):
                self.ended_at = now  # refused: no stream
        if self.ended_at is not None:
            return
        self.held += self.body.feed(data)
        if self.body.finished and self.ended_at is None:
            self.ended_at = now
        *complete, self.held = self.held.split(b"\n\n")
        for event in complete:
            self.parse(event, now)

    def parse(self, event: bytes, now: float) -> None:
        lines = event.split(b"\n")
        if b"event: snapshot" in lines:
            self.snapshot = True
        elif b"event: task" in lines:
            for line in lines:
                if line.startswith(b"data: "):
                    task = json.loads(line[6:])
                    current = (task.get("progress") or {}).get("current")
                    self.events.append([now, task["uuid"], current])


async def watch(streams: list[tuple[str, str]], limit: float) -> dict[str, Any]:
    """Open every stream (label, URL), say `ready`, read until `stop` or `limit` seconds."""
    loop = asyncio.get_running_loop()
    watched: list[tuple[str, Watched]] = []
    for label, url in streams:
        parts = urlsplit(url)
        request = f"GET {parts.path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
        protocol = Watched(request.encode())
        await loop.create_connection(lambda p=protocol: p, parts.hostname, parts.port)
        watched.append((label, protocol))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(w.snapshot or w.ended_at for _, w in watched):
        await asyncio.sleep(0.02)
    print("ready", sum(w.snapshot for _, w in watched), flush=True)
    told = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(told), sys.stdin)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(told.readline(), limit)  # `stop`, or the end of stdin
    result = []
    for label, w in watched:
        w.letting_go = True
        if w.transport is not None:
            w.transport.close()
        result.append(
            {"label": label, "snapshot": w.snapshot, "ended_at": w.ended_at, "events": w.events}
        )
    return {"streams": result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    load = commands.add_parser("load")
    load.add_argument("url")
    load.add_argument("space")
    load.add_argument("--pool", type=Path, required=True, help="a file of task uuids, one a line")
    load.add_argument("--rate", type=float, default=300.0, help="creates and reports per second")
    load.add_argument("--seconds", type=float, required=True)
    load.add_argument("--out", type=Path, required=True)
    watching = commands.add_parser("watch")
    watching.add_argument("--stream", action="append", required=True, help="LABEL=URL")
    watching.add_argument("--limit", type=float, required=True, help="seconds at most")
    watching.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    if args.command == "load":
        pool = args.pool.read_text().split()
        writer = Load(args.url, args.space, pool, args.rate)
        run(writer.run(args.seconds))
        summary = writer.summary(args.seconds)
    else:
        streams = [tuple(s.split("=", 1)) for s in args.stream]
        summary = run(watch(streams, args.limit))  # type: ignore[arg-type]
    args.out.write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
