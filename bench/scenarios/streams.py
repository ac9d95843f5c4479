"""The streams scenarios: PUT over one space's tasks without, then with, many live streams
of that space open and read (by bench/streams.py), their latency and their memory."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness, _num
from ..options import STREAM_TASKS
from ..processes import ROOT, ServerProcess
from ..report import MB, Row
from . import NO_RATE_LIMITS

STREAM_ROWS = ["streams_none", "streams_put", "streams_latency", "streams_memory"]


def streams(bench: Harness) -> None:
    """PUT over the tasks of one space, without then with `streams` streams of that
    space open (read by bench/streams.py in a process of its own), on the embedded
    default with the rate limits off."""
    database = bench.workdir / "streams.db"
    server = bench.start_headway("headway-streams", f"sqlite:///{database}", env=NO_RATE_LIMITS)
    reader = None
    try:
        space, tasks = asyncio.run(_seed_space(server))
        load = Load("PUT", [f"/tasks/{t}" for t in tasks], seed.PUT_BODY)
        none = bench.measure(server, "streams_none", load)
        rss_before = server.rss_bytes()
        out = bench.workdir / "streams.json"
        reader = _start_reader(bench, server, space, out)
        opened = _streams_memory(bench, server, reader, rss_before)
        stdin = reader.stdin
        assert stdin is not None

        def go() -> None:  # once settled: the reader records for as long as the load runs
            stdin.write("go\n")
            stdin.flush()

        put = bench.measure(server, "streams_put", load, starting=go)
        reader.wait(timeout=bench.o.duration + 60)
        summary = json.loads(out.read_text())
        if none.requests_per_s and put.requests_per_s:
            put.extra["vs_none"] = round(put.requests_per_s / none.requests_per_s, 3)
            put.extra["note"] = (
                f"{put.extra['vs_none']:.1%} of the req/s with no stream open; "
                f"{summary['ended_early']} of {opened:,} streams ended early"
            )
        _streams_latency(bench, summary)
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
            reader.wait()
        bench.stop(server)


async def _seed_space(server: ServerProcess) -> tuple[str, list[str]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        space = await seed.space_with_tasks(client, "streams", STREAM_TASKS)
        await seed.report_all(client, space.tasks)
        return space.uuid, space.tasks


def _start_reader(
    bench: Harness, server: ServerProcess, space: str, out: Path
) -> subprocess.Popen[str]:
    """`python -m bench.streams`, which opens the streams, says `ready`, then waits for
    `go` to read them for one wrk run and write its summary to `out`."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.streams", server.url, space,
         "--streams", str(bench.o.streams), "--seconds", str(bench.o.duration), "--out", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def _streams_memory(
    bench: Harness, server: ServerProcess, reader: subprocess.Popen[str], rss_before: int
) -> int:
    """Record `streams_memory` once the reader's streams are open (`rss_before`: the
    server's RSS before it started); how many opened."""
    assert reader.stdout is not None
    ready = reader.stdout.readline().split()
    opened = int(ready[1]) if len(ready) == 2 and ready[0] == "ready" else 0
    rss_open = server.rss_bytes()
    per_stream_kb = (rss_open - rss_before) / max(opened, 1) / 1024
    expected = bench.o.streams
    bench.record(
        Row(
            "streams_memory",
            bench.titles["streams_memory"],
            "ok" if opened == expected else "error",
            "" if opened == expected else f"only {opened} streams opened",
            extra={
                "kb_per_stream": round(per_stream_kb, 1),
                "note": f"{per_stream_kb:,.1f} KB per stream: RSS "
                f"{rss_before / MB:.1f} -> {rss_open / MB:.1f} MB with {opened:,} open",
            },
        )
    )
    return opened


def _streams_latency(bench: Harness, summary: dict[str, Any]) -> None:
    bench.record(
        Row(
            "streams_latency",
            bench.titles["streams_latency"],
            "ok" if summary["events"] else "error",
            "" if summary["events"] else "no event arrived",
            p50_ms=summary["p50_ms"],
            p99_ms=summary["p99_ms"],
            extra={
                **summary,
                "note": f"{summary['events']:,} events read, p50 "
                f"{_num(summary['p50_ms'])} ms, p99 {_num(summary['p99_ms'])} ms, "
                f"max {_num(summary['max_ms'])} ms",
            },
        )
    )
