"""The reports scenarios: PUT and GET of tasks, the report by URL, the same PUT on one hot
task, with the rate limits on, and the bare server at a PUT's cost."""

from __future__ import annotations

import asyncio

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness, Skip, _num
from ..processes import ServerProcess
from ..report import Row

# The rate-limited server: every rate at its default except task creation, raised so
# that seeding the pool (16 creates at once) is not refused, and reads, raised so that
# wrk's GETs from one address (about 10,000 a second) are not (the default lets 5,000
# tasks a second through). A PUT counts only against HEADWAY_RATE_REPORTS, whose default
# stays; counting costs the same whatever the numbers are.
LIMITED_SEEDING = {
    "HEADWAY_RATE_TASKS": "100000/second;1000000/minute",
    "HEADWAY_RATE_READS": "1000000/second",
}


def put_and_get(bench: Harness, server: ServerProcess, pool_paths: list[str]) -> None:
    """`put_report`, `put_report_hot`, `get_report` and `get_task` over the pool's tasks."""
    put = bench.measure(server, "put_report", Load("PUT", pool_paths, seed.PUT_BODY))
    # The same PUT with every connection on one task of the pool.
    hot = bench.measure(server, "put_report_hot", Load("PUT", pool_paths[:1], seed.PUT_BODY))
    if put.p99_ms is not None and hot.p99_ms is not None:
        hot.extra["note"] = (
            f"p99 {hot.p99_ms:,.2f} ms vs {put.p99_ms:,.2f} ms spread over "
            f"{len(pool_paths):,} tasks; p90 {_num(hot.extra.get('p90_ms'), 2)} vs "
            f"{_num(put.extra.get('p90_ms'), 2)} ms, max {_num(hot.extra.get('max_ms'))} "
            f"vs {_num(put.extra.get('max_ms'))} ms"
        )
    query = "/report?current=5&end=10&values%5Blog%5D=x"
    bench.measure(server, "get_report", Load("GET", [p + query for p in pool_paths]))
    bench.measure(server, "get_task", Load("GET", pool_paths))


def baseline_put(bench: Harness) -> None:
    """The bare server answering as it always does, after spending what a PUT costs:
    how much of the PUT scenarios' tail is the machine's at that cost per request."""
    put = bench.rows.get("put_report")
    if not put or put.status != "ok" or not put.cpu_us_per_request:
        raise Skip("the PUT scenario was not measured")
    bench.calibrate("baseline_put", put, "the PUT")


def limited(bench: Harness) -> None:
    """`put_report` and `get_task` again, on a fresh embedded server with the rate limits
    on: what counting every PUT, and every task read, against its client's rate costs."""
    database = bench.workdir / "limited.db"
    server = bench.start_headway("headway-limited", f"sqlite:///{database}", env=LIMITED_SEEDING)
    try:
        bench.say(f"seeding over HTTP: {bench.o.pool:,} pool tasks (rate limits on)")
        pool = asyncio.run(_seed_pool(server, bench.o.pool))
        paths = [f"/tasks/{t}" for t in pool]
        row = bench.measure(server, "put_report_limited", Load("PUT", paths, seed.PUT_BODY))
        read = bench.measure(server, "get_task_limited", Load("GET", paths))
    finally:
        bench.stop(server)
    for measured, name in ((row, "put_report"), (read, "get_task")):
        _against(bench, measured, name)


def _against(bench: Harness, row: Row, name: str) -> None:
    """Notes `row` (rate limits on) against the same scenario with them off."""
    off = bench.rows.get(name)
    if off and off.status == "ok" and off.requests_per_s and row.requests_per_s:
        row.extra[f"vs_{name}"] = round(row.requests_per_s / off.requests_per_s, 3)
        row.extra["note"] = (
            f"{row.extra[f'vs_{name}']:.2f}x {name}; CPU µs/req "
            f"{_num(row.cpu_us_per_request)} vs {_num(off.cpu_us_per_request)}"
        )
        bench.say(f"{row.name}: {row.extra['note']}")


async def _seed_pool(server: ServerProcess, size: int) -> list[str]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        return await seed.pool(client, size)
