"""The sweeper's scenario: PUT on a pool while the sweeper deletes an idle space of many
tasks (the big space's size: 100,000 in the full run), against the same PUT on a server
alike but for its retention (`never`), measured one right after the other. What it
shows: deleting in short transactions leaves reporters' throughput and tail where they
were (target ≥ 0.9x)."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness, _num
from ..report import Row
from . import NO_RATE_LIMITS

SWEEP_ROWS = ["put_report_unswept", "put_report_swept"]


def swept(bench: Harness) -> None:
    """`put_report_unswept`, then `put_report_swept`: a fresh embedded server each, both
    holding the pool and an idle space of `--big` tasks written straight into the file;
    the second deletes idle spaces (retention 1 h, the sweeper looking every second), so
    the idle space is deleted during its load."""
    unswept = _put(bench, "put_report_unswept", sweeping=False)
    swept = _put(bench, "put_report_swept", sweeping=True)
    if unswept.requests_per_s and swept.requests_per_s:
        ratio = round(swept.requests_per_s / unswept.requests_per_s, 3)
        swept.extra["rps_vs_unswept"] = ratio
        swept.extra["note"] = (
            f"req/s {_num(swept.requests_per_s, 0)} vs {_num(unswept.requests_per_s, 0)} "
            f"unswept: {ratio:.3f}x; p99 {_num(swept.p99_ms, 2)} vs "
            f"{_num(unswept.p99_ms, 2)} ms; {swept.extra.get('deleted', '?')}"
        )
        bench.say(f"put_report_swept: {swept.extra['note']}")


def _put(bench: Harness, name: str, *, sweeping: bool) -> Row:
    database = bench.workdir / f"{name}.db"
    env = {
        **NO_RATE_LIMITS,
        "HEADWAY_SPACE_RETENTION": "1h" if sweeping else "never",
        "HEADWAY_SWEEP_EVERY": "1",
    }
    server = bench.start_headway(f"headway-{name}", f"sqlite:///{database}", env=env)
    try:
        bench.say(f"seeding: {bench.o.pool:,} pool tasks, an idle space of {bench.o.big:,}")
        pool, idle = asyncio.run(_seed(server.url, bench.o.pool))
        seed.insert_tasks_directly(str(database), idle, bench.o.big, time.time_ns() // 1000)
        with sqlite3.connect(database) as connection:  # idle for a day, as seen from now
            connection.execute(
                "UPDATE spaces SET active_at_us = ?, top_tasks = ? WHERE uuid = ?",
                (time.time_ns() // 1000 - 86_400_000_000, bench.o.big, idle),
            )
        load = Load("PUT", [f"/tasks/{t}" for t in pool], seed.PUT_BODY)
        # Three looks of the sweeper at least, however short the run (--smoke): its first
        # look may come a second after the load starts.
        row = bench.measure(server, name, load, duration=max(bench.o.duration, 3.0))
        with sqlite3.connect(database) as connection:
            left = connection.execute(
                "SELECT count(*) FROM tasks WHERE space_uuid = ?", (idle,)
            ).fetchone()[0]
        row.extra["deleted"] = f"{bench.o.big - left:,} of {bench.o.big:,} idle tasks deleted"
        if sweeping and left == bench.o.big:
            row.status, row.reason = "error", "the sweeper deleted nothing during the load"
        return row
    finally:
        bench.stop(server)


async def _seed(url: str, size: int) -> tuple[list[str], str]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        pool = await seed.pool(client, size)
        idle = await seed.create_space(client, "idle")
        return pool, idle
