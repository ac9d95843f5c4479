"""The reports scenarios: PUT and GET of tasks, the report by URL, the same PUT on one hot
task, with the rate limits on, and the bare server at a PUT's cost."""

from __future__ import annotations

import asyncio

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness, Skip, _num
from ..processes import ServerProcess

# The rate-limited PUT server: every rate at its default except task creation, raised so
# that seeding the pool (16 creates at once) is not refused. A PUT counts only against
# HEADWAY_RATE_REPORTS, whose default stays, and counting costs the same whatever the
# numbers are.
LIMITED_SEEDING = {"HEADWAY_RATE_TASKS": "100000/second;1000000/minute"}


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
    """`put_report` again, on a fresh embedded server with the rate limits on: what
    counting every PUT against its client's rate costs."""
    database = bench.workdir / "limited.db"
    server = bench.start_headway("headway-limited", f"sqlite:///{database}", env=LIMITED_SEEDING)
    try:
        bench.say(f"seeding over HTTP: {bench.o.pool:,} pool tasks (rate limits on)")
        pool = asyncio.run(_seed_pool(server, bench.o.pool))
        paths = [f"/tasks/{t}" for t in pool]
        row = bench.measure(server, "put_report_limited", Load("PUT", paths, seed.PUT_BODY))
    finally:
        bench.stop(server)
    put = bench.rows.get("put_report")
    if put and put.status == "ok" and put.requests_per_s and row.requests_per_s:
        row.extra["vs_put_report"] = round(row.requests_per_s / put.requests_per_s, 3)
        row.extra["note"] = (
            f"{row.extra['vs_put_report']:.2f}x put_report; CPU µs/req "
            f"{_num(row.cpu_us_per_request)} vs {_num(put.cpu_us_per_request)}"
        )
        bench.say(f"put_report_limited: {row.extra['note']}")


async def _seed_pool(server: ServerProcess, size: int) -> list[str]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        return await seed.pool(client, size)
