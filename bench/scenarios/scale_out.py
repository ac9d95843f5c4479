"""The scale-out scenarios: PUT on one Headway instance, then on two, both on one PostgreSQL
and one Redis, with the CPU per request of each process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from .. import seed
from ..load import Load, LoadResult, finish, start_wrk
from ..measure import Harness, Skip, backend_cpu_readers, cpu_note, machine_busy, others_extra
from ..processes import ServerProcess, StartError, machine_cpu
from ..report import Row
from . import NO_RATE_LIMITS


def scale_out(bench: Harness) -> None:
    """PUT on one instance vs two, both on one PostgreSQL and one Redis.

    Two instances are loaded by two wrk processes at once, each with half the
    connections and threads; their req/s add up, their p99 is the worse of the two.
    """
    if not bench.o.scale_out:
        raise Skip("--no-scale-out given")
    postgres, redis = start_backends(bench)
    first, second = start_instances(bench, postgres.url, redis.url)
    pool = asyncio.run(_check_shared(first, second, bench.o.pool))
    paths = [f"/tasks/{t}" for t in pool]
    put = Load("PUT", paths, seed.PUT_BODY)
    backends = backend_cpu_readers(postgres.data, redis.process.pid if redis.process else None)
    one = bench.measure(first, "scale_out_one", put, others=backends)
    one.extra["note"] = cpu_note(one.extra)
    _two_instances(bench, first, second, put, backends, one)
    for server in (second, first):
        bench.stop(server)
    bench.stop_everything()


def start_backends(bench: Harness) -> tuple[Any, Any]:
    """A throwaway PostgreSQL and Redis (tests/servers.py), stopped by the run's cleanups."""
    try:
        from tests.servers import PostgresServer, RedisServer, ServerError
    except ImportError as exc:
        raise Skip(f"tests/servers.py cannot be imported: {exc}") from None
    bench.say("starting PostgreSQL and Redis")
    try:
        postgres = PostgresServer()
        bench.cleanups.append(postgres.destroy)
        postgres.start()
        postgres.create_database()
        redis = RedisServer()
        bench.cleanups.append(redis.stop)
        redis.start()
    except ServerError as exc:
        raise Skip(f"PostgreSQL or Redis not available: {exc}") from None
    return postgres, redis


def start_instances(
    bench: Harness, database_url: str, redis_url: str, name: str = "headway-pg"
) -> tuple[ServerProcess, ServerProcess]:
    """Two `headway serve` on the same database and Redis, started at once (`name`-1 and
    `name`-2), with the rate limits off."""
    try:
        first, second = (
            bench.start_headway(f"{name}-{n}", database_url, redis_url, wait=False,
                                env=NO_RATE_LIMITS)
            for n in (1, 2)
        )  # fmt: skip
        for server in (first, second):
            server.wait_ready("/up")
    except StartError as exc:
        raise Skip(f"headway serve does not run on PostgreSQL + Redis yet: {exc}") from None
    return first, second


def _two_instances(
    bench: Harness,
    first: ServerProcess,
    second: ServerProcess,
    put: Load,
    backends: dict[str, Callable[[], float]],
    one: Row,
) -> None:
    """`scale_out_two`: two wrk at once, one on each instance, against `one` instance."""
    half = max(1, bench.o.connections // 2)
    half_threads = max(1, bench.o.threads // 2)
    bench.say(f"scale_out_two: two wrk at once, {half} connections each")
    others_before = {k: read() for k, read in backends.items()}
    machine_before = machine_cpu()
    cpu_before = first.cpu_seconds() + second.cpu_seconds()
    running = [
        start_wrk(
            server.url,
            put,
            duration=bench.o.duration,
            connections=half,
            threads=half_threads,
            workdir=bench.workdir,
        )
        for server in (first, second)
    ]
    results = [finish(r) for r in running]
    cpu = first.cpu_seconds() + second.cpu_seconds() - cpu_before
    spent = {k: read() - others_before[k] for k, read in backends.items()}
    row = combine(bench, "scale_out_two", results, cpu)
    # Headway's CPU here is both instances' together, per request answered by either.
    row.extra.update(others_extra(cpu, spent, row.requests or 0))
    row.extra["machine_busy"] = machine_busy(machine_before)
    if one.requests_per_s and row.requests_per_s is not None:
        row.extra["vs_one_instance"] = round(row.requests_per_s / one.requests_per_s, 2)
        row.extra["note"] = f"{row.extra['vs_one_instance']}x one instance; " + cpu_note(row.extra)
    bench.record(row)


def combine(bench: Harness, name: str, results: list[LoadResult], cpu: float) -> Row:
    """Two concurrent runs as one: summed rate, mean p50, worst p99."""
    total = sum(r.requests for r in results)
    merged = LoadResult(
        requests=total,
        duration_s=max(r.duration_s for r in results),
        errors={k: sum(r.errors.get(k, 0) for r in results) for k in results[0].errors},
        latency_us={
            "p50": sum(r.latency_us["p50"] for r in results) / len(results),
            "p99": max(r.latency_us["p99"] for r in results),
        },
        sent_per_thread=[],
        connections=sum(r.connections for r in results),
        threads=sum(r.threads for r in results),
    )
    row = Row.measured(name, bench.titles[name], merged, cpu)
    row.requests_per_s = round(sum(r.requests_per_s for r in results), 1)
    return bench.finish_row(row, merged)


async def _check_shared(first: ServerProcess, second: ServerProcess, size: int) -> list[str]:
    """Skip unless both instances use PostgreSQL and Redis and share progress; returns
    the pool of tasks to report on."""
    async with (
        httpx.AsyncClient(base_url=first.url, timeout=30) as a,
        httpx.AsyncClient(base_url=second.url, timeout=30) as b,
    ):
        await check_backends(a, b)
        space = await seed.create_space(a, "scale-out")
        pool = await seed.create_tasks(a, space, size)
        await seed.report_all(a, pool)
        seen = (await b.get(f"/tasks/{pool[0]}")).json()
        if seen.get("progress") is None:
            raise Skip("progress reported on one instance is not visible on the other")
        return pool


async def check_backends(*clients: httpx.AsyncClient) -> None:
    """Skip unless every instance reports PostgreSQL and Redis as its backends."""
    for client in clients:
        checks = (await client.get("/up")).json().get("checks", {})
        database = checks.get("database", {}).get("backend")
        progress = checks.get("progress_store", {}).get("backend")
        if database != "postgresql" or progress != "redis":
            raise Skip(
                f"with HEADWAY_REDIS_URL set the service reports database "
                f"{database!r} and progress store {progress!r}, not postgresql and "
                "redis: scale-out has not landed yet"
            )
