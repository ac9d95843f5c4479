"""Many live streams of one space, read in a process of their own:
`python -m bench.streams URL SPACE --streams N --seconds S --out FILE`.

Opens N connections to `GET /spaces/{SPACE}/events`, reads every byte they send, and
for every task event notes how long after its `progress.updated_at` (the instant the
server applied the report) it arrived. Prints `ready` once every stream has its
snapshot, then reads for S seconds and writes a JSON summary to FILE: the streams that
opened, the events seen, and the latency percentiles in milliseconds. The clock is the
machine's, shared with the server (127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

_UPDATED = re.compile(rb'"updated_at":"([0-9T:.-]+)Z"')
_EVENT_END = b"\n\n"
MEASURED = 10
OPEN_EVERY_S = 0.002


class Reader:
    """Latencies of the task events read on every stream, and how many streams are open."""

    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.ready = 0
        self.ended = 0
        self.recording = False
        self._stamps: dict[bytes, float] = {}

    def seconds(self, stamp: bytes) -> float:
        value = self._stamps.get(stamp)
        if value is None:
            parsed = datetime.fromisoformat(stamp.decode() + "+00:00")
            value = self._stamps[stamp] = parsed.timestamp()
            if len(self._stamps) > 100_000:
                self._stamps.clear()
        return value

    async def stream(self, host: str, port: int, path: str, measured: bool) -> None:
        """One stream, read by a bare protocol (a reader's own cost stays small next to
        the server's) until it ends or is cancelled."""
        loop = asyncio.get_running_loop()
        ended = loop.create_future()
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n".encode()
        transport, _ = await loop.create_connection(
            lambda: _StreamProtocol(self, request, measured, ended), host, port
        )
        try:
            await ended
        finally:
            self.ended += 1
            transport.close()


class _StreamProtocol(asyncio.Protocol):
    def __init__(
        self, reader: Reader, request: bytes, measured: bool, ended: asyncio.Future[None]
    ) -> None:
        self.reader = reader
        self.request = request
        self.measured = measured
        self.ended = ended
        self.snapshot = True
        self.held = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def data_received(self, chunk: bytes) -> None:
        if not self.snapshot and not self.measured:
            return  # read and let go, as a browser that only shows it would
        now = time.time()
        held = self.held + chunk
        cut = held.rfind(_EVENT_END)
        if cut < 0:
            self.held = held
            return
        complete, self.held = held[: cut + 2], held[cut + 2 :]
        if self.snapshot:
            if b"event: snapshot" not in complete:
                return
            self.snapshot = False
            self.reader.ready += 1
            complete = complete[complete.index(b"event: snapshot") :]
            complete = complete[complete.index(_EVENT_END) + 2 :]
        if self.measured and self.reader.recording:
            seconds = self.reader.seconds
            latencies = self.reader.latencies_ms
            for stamp in _UPDATED.findall(complete):
                latencies.append((now - seconds(stamp)) * 1000)


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    parts = urlsplit(args.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = f"/spaces/{args.space}/events"
    reader = Reader()
    tasks = []
    for number in range(args.streams):
        # Every stream is read whole; the latencies are those of every MEASURED-th, so
        # that parsing them does not take the machine from the server.
        measured = number % MEASURED == 0
        tasks.append(asyncio.create_task(reader.stream(host, port, path, measured)))
        await asyncio.sleep(OPEN_EVERY_S)  # a crowd of browsers arrives over a few seconds
    deadline = time.monotonic() + 60
    while reader.ready + reader.ended < args.streams and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print("ready", reader.ready, flush=True)
    # Told to start (a line on stdin) once the load runs: latencies under the load.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    reader.recording = True
    cpu_before = time.process_time()
    await asyncio.sleep(args.seconds)
    reader.recording = False
    cpu = time.process_time() - cpu_before
    summary = {
        "streams": args.streams,
        "opened": reader.ready,
        "ended_early": reader.ended,
        "events": len(reader.latencies_ms),
        "p50_ms": percentile(reader.latencies_ms, 0.50),
        "p99_ms": percentile(reader.latencies_ms, 0.99),
        "max_ms": max(reader.latencies_ms) if reader.latencies_ms else None,
        # The reader's own share of a CPU while the load ran: what reading the streams
        # takes from the machine the server runs on.
        "reader_cpu_share": round(cpu / args.seconds, 3),
    }
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per stream
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("space")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        summary = asyncio.run(main_async(args))
    else:
        summary = uvloop.run(main_async(args))
    args.out.write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
