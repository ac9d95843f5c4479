"""The busy space: task creates and reports at a fixed rate on one space through one
instance, while that space's streams are read on every instance; how far each instance's
streams lag the writes, on the embedded default and on PostgreSQL + Redis."""

from __future__ import annotations

import asyncio
import json
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx

from .. import busy as clients
from .. import lag, seed
from ..measure import Harness, Skip, _num, machine_busy, settle
from ..options import BUSY_RATE, BUSY_STREAMS, BUSY_WINDOW_S
from ..processes import ROOT, ServerProcess, machine_cpu
from ..report import Row
from . import NO_RATE_LIMITS, scale_out

BUSY_ROWS = ["busy_embedded", "busy_a", "busy_b"]
# Tasks of the space the reports go round (at 300 a second, each is reported 3 times a
# second); the space also grows by every create.
POOL = 100
# Seconds the streams are still read once the writes are answered: a write whose event
# has not arrived by then is lost.
GRACE_S = 3.0


@dataclass
class BusyRun:
    """What one run wrote (bench/busy.py's `load`), what its streams read (`watch`),
    and the CPU each instance spent meanwhile."""

    load: dict[str, Any]
    streams: list[dict[str, Any]]
    cpu_s: dict[str, float]
    machine_busy: float
    window_s: float


def embedded(bench: Harness) -> None:
    """The busy space on the embedded default (SQLite, progress in memory), its streams
    on its one server, with the rate limits off."""
    if not bench.o.busy:
        raise Skip("--no-busy given")
    database = bench.workdir / "busy.db"
    server = bench.start_headway("headway-busy", f"sqlite:///{database}", env=NO_RATE_LIMITS)
    try:
        run = _run(bench, server, {"embedded": server})
    finally:
        bench.stop(server)
    _record(bench, run, "busy_embedded", "embedded", written=True)


def scale_out_busy(bench: Harness) -> None:
    """The busy space on two instances, A and B, on one PostgreSQL and one Redis: every
    write through A, streams on both."""
    if not bench.o.busy:
        raise Skip("--no-busy given")
    if not bench.o.scale_out:
        raise Skip("--no-scale-out given")
    postgres, redis = scale_out.start_backends(bench)
    try:
        a, b = scale_out.start_instances(bench, postgres.url, redis.url, "headway-busy")
        asyncio.run(_check_backends(a, b))
        run = _run(bench, a, {"A": a, "B": b})
    finally:
        bench.stop_everything()
    _record(bench, run, "busy_a", "A", written=True)
    _record(bench, run, "busy_b", "B", written=False)


async def _check_backends(*servers: ServerProcess) -> None:
    clients_ = [httpx.AsyncClient(base_url=s.url, timeout=30) for s in servers]
    try:
        await scale_out.check_backends(*clients_)
    finally:
        for client in clients_:
            await client.aclose()


async def _seed(server: ServerProcess) -> tuple[str, list[str]]:
    """The busy space and the pool of its tasks the reports go round."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        space = await seed.create_space(client, "busy")
        return space, await seed.create_tasks(client, space, POOL)


def _run(bench: Harness, writer: ServerProcess, instances: dict[str, ServerProcess]) -> BusyRun:
    """Open BUSY_STREAMS streams of a fresh space on each of `instances` (by label), then
    write to it through `writer` for the run's seconds, in processes of their own."""
    o = bench.o
    space, pool = asyncio.run(_seed(writer))
    files = {n: bench.workdir / f"busy-{n}" for n in ("pool.txt", "writes.json", "watched.json")}
    files["pool.txt"].write_text("\n".join(pool) + "\n")
    streams = [
        f"{label}={server.url}/spaces/{space}/events"
        for label, server in instances.items()
        for _ in range(BUSY_STREAMS)
    ]
    limit = o.busy_s + clients.ANSWER_WAIT_S + GRACE_S + 60
    watch = ["watch", *(a for s in streams for a in ("--stream", s)), "--limit", str(limit)]
    watcher = _client(
        [*watch, "--out", str(files["watched.json"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    writes = None
    try:
        _wait_ready(watcher, len(streams))
        settle(limit_s=o.settle_s)
        cpu_before = {label: s.cpu_seconds() for label, s in instances.items()}
        machine_before = machine_cpu()
        bench.say(
            f"busy: {BUSY_RATE} creates/s + {BUSY_RATE} reports/s on {writer.name} for "
            f"{o.busy_s:g} s, {len(streams)} streams read"
        )
        writes = _client(
            ["load", writer.url, space, "--pool", str(files["pool.txt"]), "--rate", str(BUSY_RATE),
             "--seconds", str(o.busy_s), "--out", str(files["writes.json"])],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        writes.wait(timeout=o.busy_s + clients.ANSWER_WAIT_S + 30)
        cpu = {label: s.cpu_seconds() - cpu_before[label] for label, s in instances.items()}
        busy = machine_busy(machine_before)
        time.sleep(GRACE_S)
        assert watcher.stdin is not None
        watcher.stdin.write("stop\n")
        watcher.stdin.flush()
        watcher.wait(timeout=60)
    finally:
        for process in (writes, watcher):
            if process is not None and process.poll() is None:
                process.kill()  # by its PID
                process.wait()
    return BusyRun(
        json.loads(files["writes.json"].read_text()),
        json.loads(files["watched.json"].read_text())["streams"],
        cpu,
        busy,
        min(BUSY_WINDOW_S, o.busy_s / 3),
    )


def _client(args: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    """`python -m bench.busy ARGS`: a process of its own (stopped by its PID)."""
    command = [sys.executable, "-m", "bench.busy", *args]
    return subprocess.Popen(command, cwd=ROOT, text=True, **kwargs)


def _wait_ready(watcher: subprocess.Popen[str], expected: int) -> None:
    """Wait for the watcher's `ready N` (it gives up on snapshots after 30 s)."""
    assert watcher.stdout is not None
    said, _, _ = select.select([watcher.stdout], [], [], 60)
    ready = watcher.stdout.readline().split() if said else []
    opened = int(ready[1]) if len(ready) == 2 and ready[0] == "ready" else 0
    if opened != expected:
        raise RuntimeError(f"only {opened} of {expected} streams of the busy space opened")


def _record(bench: Harness, run: BusyRun, name: str, label: str, *, written: bool) -> None:
    """The row of one instance: its streams' lag; the writes' rate if they went to it."""
    load = run.load
    found = lag.instance(load, [s for s in run.streams if s["label"] == label], run.window_s)
    answered = len(load["writes"])
    row = Row(
        name,
        bench.titles[name],
        p50_ms=found["all"]["p50_ms"],
        p99_ms=found["all"]["p99_ms"],
        duration_s=load["seconds"],
    )
    if written:
        row.requests = answered
        row.requests_per_s = round(answered / load["seconds"], 1)
    if answered:
        row.cpu_us_per_request = round(run.cpu_s[label] * 1e6 / answered, 1)
    failed = {k: v for k, v in load["statuses"].items() if k not in ("200", "201")}
    problems = [
        "failed writes: " + ", ".join(f"{k} ×{v}" for k, v in failed.items()) if failed else "",
        "" if found["events"] else "no event arrived",
    ]
    row.reason = "; ".join(filter(None, problems))
    row.status = "error" if row.reason else "ok"
    pacing = {k: load[k] for k in ("not_sent", "late", "max_late_ms", "connections")}
    row.extra = {
        **found,
        "statuses": load["statuses"],
        **pacing,
        "machine_busy": run.machine_busy,
        "answered_ms": lag.answers(load),
    }
    row.extra["note"] = _note(row.extra, load if written else None)
    bench.record(row)


def _note(found: dict[str, Any], load: dict[str, Any] | None) -> str:
    window = f"{found['window_s']:g} s"
    first, last = found["first"], found["last"]
    text = (
        f"lag p50/p99: first {window} {_num(first['p50_ms'])}/{_num(first['p99_ms'])} ms, "
        f"last {window} {_num(last['p50_ms'])}/{_num(last['p99_ms'])} ms, max "
        f"{_num(found['all']['max_ms'])} ms; {found['ended']} of {found['streams']} "
        f"streams ended; {found['lost']:,} events never came"
    )
    if load is not None:
        answered = found["answered_ms"]
        text += (
            f"; {len(load['writes']):,} writes answered (p50/p99 "
            f"{_num(answered['p50_ms'])}/{_num(answered['p99_ms'])} ms after their "
            f"instant), {load['late']:,} sent > {clients.LATE_S * 1000:.0f} ms late, "
            f"{load['not_sent']:,} not sent"
        )
    return text
