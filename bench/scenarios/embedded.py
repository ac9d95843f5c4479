"""The embedded default's phase: one server, seeded once, on which the reports, creates and
reads scenarios run in table order, with the memory its big space's progress takes."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import httpx

from .. import seed
from ..load import Load, not_reached, run_wrk
from ..measure import Harness
from ..options import PAGE
from ..processes import ServerProcess
from ..report import MB, Row
from . import NO_RATE_LIMITS, creates, reads, reports


def embedded(bench: Harness) -> None:
    """Every scenario on the embedded default (SQLite file, progress in memory), with
    the rate limits off."""
    database = bench.workdir / "headway.db"
    server = bench.start_headway("headway", f"sqlite:///{database}", env=NO_RATE_LIMITS)
    rss_at_start = server.rss_bytes()
    bench.say(f"headway RSS right after start: {rss_at_start / MB:.1f} MB")
    try:
        data = asyncio.run(_seed(bench, server))
        big = _write_big_space(bench, server, database, data["big_space"])
        bench.say("seeded")

        pool_paths = [f"/tasks/{t}" for t in data["pool"]]
        reports.put_and_get(bench, server, pool_paths)
        creates.post_task(bench, server, data["post_space"])
        reads.parent(bench, server, data["parent"])
        memory(bench, server, big, rss_at_start)
        reads.spaces(bench, server, data["small"], big)
    finally:
        bench.stop(server)


async def _seed(bench: Harness, server: ServerProcess) -> dict[str, Any]:
    o = bench.o
    bench.say(
        f"seeding over HTTP: {o.pool:,} pool tasks, a {o.small}-task space, "
        f"a parent with {o.children:,} children"
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        return {
            "pool": await seed.pool(client, o.pool),
            "post_space": await seed.create_space(client, "creates"),
            "small": await seed.space_with_tasks(client, "small", o.small),
            "parent": await seed.parent_with_children(client, o.children),
            "big_space": await seed.create_space(client, "big"),
        }


def _write_big_space(
    bench: Harness, server: ServerProcess, database: Path, big_space: str
) -> seed.Space:
    """The big space's tasks, written straight into the database and checked over HTTP."""
    bench.say(f"writing {bench.o.big:,} tasks into the big space's rows")
    big = seed.insert_tasks_directly(
        str(database), big_space, bench.o.big, time.time_ns() // 1000 - 1_000_000
    )
    asyncio.run(_check_big_space(server, big))
    return big


async def _check_big_space(server: ServerProcess, big: seed.Space) -> None:
    """The service reads the directly written tasks as its own, cursors included."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        newest = (await seed.read_space(client, big.uuid, limit=1))["tasks"]
        if [t["uuid"] for t in newest] != [big.tasks[-1]]:
            raise seed.SeedError("the big space's newest task is not the last one written")
        cursor = big.created_at[PAGE]
        page = (await seed.read_space(client, big.uuid, limit=PAGE, before=cursor))["tasks"]
        if [t["uuid"] for t in page] != big.tasks[PAGE - 1 :: -1]:
            raise seed.SeedError("a before cursor on the big space returned the wrong page")


def memory(bench: Harness, server: ServerProcess, big: seed.Space, rss_at_start: int) -> None:
    """Give every task of the big space progress with PUTs, then read the RSS."""
    name = "memory"
    cpu_before = server.cpu_seconds()
    sent = _put_progress(bench, server, big)
    time.sleep(0.5)
    rss = server.rss_bytes()
    per_task = (rss - rss_at_start) / len(big.tasks)
    cpu = server.cpu_seconds() - cpu_before
    asyncio.run(_check_progress(server, big))
    row = Row(
        name,
        bench.titles[name],
        requests=sent,
        extra={
            "rss_at_start_mb": round(rss_at_start / MB, 1),
            "rss_mb": round(rss / MB, 1),
            "peak_rss_mb": round(server.peak_rss_bytes() / MB, 1),
            "tasks_with_progress": len(big.tasks),
            "bytes_per_task": round(per_task),
            "note": (
                f"RSS {rss_at_start / MB:.1f} MB after start, {rss / MB:.1f} MB with "
                f"{len(big.tasks):,} tasks holding progress (~{per_task:,.0f} B/task)"
            ),
        },
    )
    if sent:
        row.cpu_us_per_request = round(cpu * 1e6 / sent, 1)
    bench.record(row)


def _put_progress(bench: Harness, server: ServerProcess, big: seed.Space) -> int:
    """PUT to the big space's tasks with wrk until each one was reached; the PUTs sent."""
    # The first round guesses from the PUT scenario's rate; later rounds use their own
    # (a PUT to a task the server has not seen yet reads the database, so it is slower).
    rate = (bench.rows.get("put_report") or Row("", "")).requests_per_s or 1000.0
    remaining = [f"/tasks/{t}" for t in big.tasks]
    sent = 0
    # Seeding, not measuring: at least 16 connections, so a smoke run seeds fast too.
    connections = max(16, bench.o.connections)
    deadline = time.monotonic() + 900
    while remaining and time.monotonic() < deadline:
        seconds = min(120.0, len(remaining) / rate * 1.2 + 0.5)
        bench.say(f"memory: PUT to {len(remaining):,} tasks, wrk {max(1, round(seconds))} s")
        result = run_wrk(
            server.url,
            Load("PUT", remaining, seed.PUT_BODY),
            duration=seconds,
            connections=connections,
            threads=max(2, bench.o.threads),
            workdir=bench.workdir,
        )
        sent += result.requests
        if result.error_count:
            raise seed.SeedError(f"PUTs to the big space failed: {result.errors}")
        rate = max(50.0, result.requests_per_s)
        in_flight = -(-result.connections // result.threads)
        remaining = not_reached(remaining, result, in_flight)
    if remaining:
        raise seed.SeedError(f"{len(remaining):,} tasks still have no progress")
    return sent


async def _check_progress(server: ServerProcess, big: seed.Space) -> None:
    sample = random.Random(6).sample(big.tasks, min(50, len(big.tasks)))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        for task in sample:
            response = await client.get(f"/tasks/{task}")
            if response.status_code != 200 or response.json()["progress"] is None:
                raise seed.SeedError(f"task {task} holds no progress after the PUTs")
