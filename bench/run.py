"""Run Headway's benchmarks: `python -m bench.run [--quick | --smoke] [options]`.

Starts a bare-ASGI baseline and real `headway serve` processes on 127.0.0.1, seeds
them over HTTP, drives every scenario with wrk for a bounded time, floods a server left
at its defaults from 127.0.0.2 while a well-behaved client reports from 127.0.0.1
(bench/flood.py), prints a table with each scenario's ratio to the baseline measured in
the same run and the targets (issue 6's and the abuse limits'; the issue "Reads and
creates at the cost they must have"'s), and writes `latest.json`
and `latest.md` into the results directory.
Every process the run starts is stopped by its PID before it returns.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from . import flood, profile, report, seed
from .cost_targets import reads_creates_targets
from .load import Load, LoadResult, finish, not_reached, run_wrk, start_wrk, wrk_binary
from .measure import (
    Harness,
    Skip,
    _ms,
    _num,
    backend_cpu_readers,
    cpu_note,
    machine_busy,
    others_extra,
)
from .options import PAGE, STREAM_TASKS, Options, parse_options
from .processes import ServerProcess, StartError, machine_cpu, start_baseline, start_headway
from .report import MB, Row, Target
from .targets import issue6_targets, streams_targets

STREAM_ROWS = ["streams_none", "streams_put", "streams_latency", "streams_memory"]

# The embedded and scale-out servers run without rate limits: their scenarios create
# thousands of tasks a second from one address, which the default rates rightly refuse
# (the contract keeps HEADWAY_RATE_LIMITS=false for benchmarks).
NO_RATE_LIMITS = {"HEADWAY_RATE_LIMITS": "false"}
# The rate-limited PUT server: every rate at its default except task creation, raised so
# that seeding the pool (16 creates at once) is not refused. A PUT counts only against
# HEADWAY_RATE_REPORTS, whose default stays, and counting costs the same whatever the
# numbers are.
LIMITED_SEEDING = {"HEADWAY_RATE_TASKS": "100000/second;1000000/minute"}

FLOOD_ROWS = ["flood_create", "flood_values", "flood_memory", "flood_bystander"]


class Bench(Harness):
    """One run: the servers it started, the rows measured so far."""

    # --- Phases -------------------------------------------------------------------------

    def run(self) -> None:
        wrk_binary()  # no wrk, no run: fail before starting anything
        with self.phase(["baseline"]):
            self.baseline()
        others = [
            "baseline",
            "baseline_parent",
            "baseline_put",
            "put_report_limited",
            *FLOOD_ROWS,
            *STREAM_ROWS,
            "scale_out_one",
            "scale_out_two",
        ]
        embedded = [n for n in self.titles if n not in others]
        with self.phase(embedded):
            self.embedded()
        with self.phase(["baseline_parent"]):
            self.baseline_parent()
        with self.phase(["baseline_put"]):
            self.baseline_put()
        with self.phase(["put_report_limited"]):
            self.limited()
        with self.phase(FLOOD_ROWS):
            self.flood_scenario()
        with self.phase(STREAM_ROWS):
            self.streams_scenario()
        with self.phase(["scale_out_one", "scale_out_two"]):
            if not self.o.scale_out:
                raise Skip("--no-scale-out given")
            self.scale_out()

    def baseline(self) -> None:
        server = self.start(start_baseline, self.workdir)
        try:
            self.measure(server, "baseline", Load("GET", ["/"]))
        finally:
            self.stop(server)

    def embedded(self) -> None:
        """Every scenario on the embedded default (SQLite file, progress in memory), with
        the rate limits off."""
        database = self.workdir / "headway.db"
        server = self.start(
            start_headway, "headway", self.workdir, f"sqlite:///{database}", env=NO_RATE_LIMITS
        )
        rss_at_start = server.rss_bytes()
        self.say(f"headway RSS right after start: {rss_at_start / MB:.1f} MB")
        try:
            data = asyncio.run(self.seed(server))
            big_space = data["big_space"]
            self.say(f"writing {self.o.big:,} tasks into the big space's rows")
            big = seed.insert_tasks_directly(
                str(database), big_space, self.o.big, time.time_ns() // 1000 - 1_000_000
            )
            asyncio.run(self.check_big_space(server, big))
            self.say("seeded")

            pool_paths = [f"/tasks/{t}" for t in data["pool"]]
            put = self.measure(server, "put_report", Load("PUT", pool_paths, seed.PUT_BODY))
            # The same PUT with every connection on one task of the pool.
            hot = self.measure(server, "put_report_hot", Load("PUT", pool_paths[:1], seed.PUT_BODY))
            if put.p99_ms is not None and hot.p99_ms is not None:
                hot.extra["note"] = (
                    f"p99 {hot.p99_ms:,.2f} ms vs {put.p99_ms:,.2f} ms spread over "
                    f"{len(pool_paths):,} tasks; p90 {_num(hot.extra.get('p90_ms'), 2)} vs "
                    f"{_num(put.extra.get('p90_ms'), 2)} ms, max {_num(hot.extra.get('max_ms'))} "
                    f"vs {_num(put.extra.get('max_ms'))} ms"
                )
            query = "/report?current=5&end=10&values%5Blog%5D=x"
            self.measure(server, "get_report", Load("GET", [p + query for p in pool_paths]))
            self.measure(server, "get_task", Load("GET", pool_paths))
            post_body = '{"title":"bench task","source":"bench"}'
            self.measure(
                server,
                "post_task",
                Load("POST", [f"/spaces/{data['post_space']}/tasks"], post_body),
            )
            parent = self.measure(server, "get_parent", Load("GET", [f"/tasks/{data['parent']}"]))
            answer = httpx.get(f"{server.url}/tasks/{data['parent']}", timeout=30)
            parent.extra["answer_bytes"] = len(answer.content)

            self.memory(server, big, rss_at_start)

            small: seed.Space = data["small"]
            self.measure(server, "get_space_small", Load("GET", [f"/spaces/{small.uuid}"]))
            for name, space in (("get_space_small_page", small), ("get_space_big_page", big)):
                pages = [
                    f"/spaces/{space.uuid}?limit={PAGE}&before={c}"
                    for c in seed.cursors(space, PAGE, self.o.cursors)
                ]
                self.measure(server, name, Load("GET", pages))
            # Each answer holds the whole space: one connection, and time for a few.
            # Its RSS is sampled throughout: a streamed answer keeps it from growing.
            whole = self.measure(
                server,
                "get_space_big",
                Load("GET", [f"/spaces/{big.uuid}"]),
                connections=1,
                threads=1,
                duration=self.o.duration if self.o.big <= 10_000 else max(self.o.duration, 10),
                timeout=120,
                sample_rss=True,
            )
            if whole.cpu_us_per_request is not None and "rss_growth_mb" in whole.extra:
                whole.extra["cpu_ms_per_answer"] = round(whole.cpu_us_per_request / 1000, 1)
                whole.extra["note"] = (
                    f"{whole.extra['cpu_ms_per_answer']:,.1f} ms CPU per answer; RSS "
                    f"{whole.extra['rss_before_mb']:,.1f} MB before, peak "
                    f"{whole.extra['peak_rss_mb']:,.1f} MB while answering "
                    f"(+{whole.extra['rss_growth_mb']:,.1f} MB)"
                )
                self.say(f"get_space_big: {whole.extra['note']}")
        finally:
            self.stop(server)

    def baseline_parent(self) -> None:
        """The bare server sending what the parent scenario sends, at the CPU it costs:
        how much of that scenario's tail is the machine's, whatever the code."""
        parent = self.rows.get("get_parent")
        size = (parent.extra.get("answer_bytes") if parent else None) or 0
        if not parent or parent.status != "ok" or not size or not parent.cpu_us_per_request:
            raise Skip("the parent scenario was not measured")
        self.calibrate("baseline_parent", parent, "the parent", {"BENCH_BODY_BYTES": str(size)})

    def baseline_put(self) -> None:
        """The bare server answering as it always does, after spending what a PUT costs:
        how much of the PUT scenarios' tail is the machine's at that cost per request."""
        put = self.rows.get("put_report")
        if not put or put.status != "ok" or not put.cpu_us_per_request:
            raise Skip("the PUT scenario was not measured")
        self.calibrate("baseline_put", put, "the PUT")

    def limited(self) -> None:
        """`put_report` again, on a fresh embedded server with the rate limits on: what
        counting every PUT against its client's rate costs."""
        database = self.workdir / "limited.db"
        server = self.start(
            start_headway,
            "headway-limited",
            self.workdir,
            f"sqlite:///{database}",
            env=LIMITED_SEEDING,
        )
        try:
            self.say(f"seeding over HTTP: {self.o.pool:,} pool tasks (rate limits on)")
            pool = asyncio.run(self.seed_pool(server))
            paths = [f"/tasks/{t}" for t in pool]
            row = self.measure(server, "put_report_limited", Load("PUT", paths, seed.PUT_BODY))
        finally:
            self.stop(server)
        put = self.rows.get("put_report")
        if put and put.status == "ok" and put.requests_per_s and row.requests_per_s:
            row.extra["vs_put_report"] = round(row.requests_per_s / put.requests_per_s, 3)
            row.extra["note"] = (
                f"{row.extra['vs_put_report']:.2f}x put_report; CPU µs/req "
                f"{_num(row.cpu_us_per_request)} vs {_num(put.cpu_us_per_request)}"
            )
            self.say(f"put_report_limited: {row.extra['note']}")

    async def seed_pool(self, server: ServerProcess) -> list[str]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            return await seed.pool(client, self.o.pool)

    def streams_scenario(self) -> None:
        """PUT over the tasks of one space, without then with `streams` streams of that
        space open (read by bench/streams.py in a process of its own), on the embedded
        default with the rate limits off."""
        o = self.o
        database = self.workdir / "streams.db"
        server = self.start(
            start_headway, "headway-streams", self.workdir, f"sqlite:///{database}",
            env=NO_RATE_LIMITS,
        )  # fmt: skip
        reader = None
        try:

            async def seed_space() -> tuple[str, list[str]]:
                async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                    space = await seed.space_with_tasks(client, "streams", STREAM_TASKS)
                    await seed.report_all(client, space.tasks)
                    return space.uuid, space.tasks

            space, tasks = asyncio.run(seed_space())
            load = Load("PUT", [f"/tasks/{t}" for t in tasks], seed.PUT_BODY)
            none = self.measure(server, "streams_none", load)
            rss_before = server.rss_bytes()
            out = self.workdir / "streams.json"
            reader = subprocess.Popen(
                [sys.executable, "-m", "bench.streams", server.url, space,
                 "--streams", str(o.streams), "--seconds", str(o.duration), "--out", str(out)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )  # fmt: skip
            assert reader.stdin is not None and reader.stdout is not None
            ready = reader.stdout.readline().split()
            opened = int(ready[1]) if len(ready) == 2 and ready[0] == "ready" else 0
            rss_open = server.rss_bytes()
            per_stream_kb = (rss_open - rss_before) / max(opened, 1) / 1024
            self.record(
                Row(
                    "streams_memory",
                    self.titles["streams_memory"],
                    "ok" if opened == o.streams else "error",
                    "" if opened == o.streams else f"only {opened} streams opened",
                    extra={
                        "kb_per_stream": round(per_stream_kb, 1),
                        "note": f"{per_stream_kb:,.1f} KB per stream: RSS "
                        f"{rss_before / MB:.1f} -> {rss_open / MB:.1f} MB with {opened:,} open",
                    },
                )
            )
            reader.stdin.write("go\n")
            reader.stdin.flush()
            put = self.measure(server, "streams_put", load)
            reader.wait(timeout=o.duration + 60)
            summary = json.loads(out.read_text())
            if none.requests_per_s and put.requests_per_s:
                put.extra["vs_none"] = round(put.requests_per_s / none.requests_per_s, 3)
                put.extra["note"] = (
                    f"{put.extra['vs_none']:.1%} of the req/s with no stream open; "
                    f"{summary['ended_early']} of {opened:,} streams ended early"
                )
            self.record(
                Row(
                    "streams_latency",
                    self.titles["streams_latency"],
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
        finally:
            if reader is not None and reader.poll() is None:
                reader.kill()
                reader.wait()
            self.stop(server)

    def flood_scenario(self) -> None:
        """A flood from one address against a server with every setting at its default,
        while a well-behaved client reports from another (see bench/flood.py)."""
        o = self.o
        database = self.workdir / "flood.db"
        server = self.start(start_headway, "headway-flood", self.workdir, f"sqlite:///{database}")
        try:
            result = asyncio.run(
                flood.run(
                    server.url,
                    server.pid,
                    phase_s=o.flood_s,
                    concurrency=o.flood_concurrency,
                    spaces=o.flood_spaces,
                    settle_s=min(2.0, max(0.5, o.flood_s / 10)),
                    say=self.say,
                )
            )
        finally:
            self.stop(server)
        self.flood_rows(result)

    def flood_rows(self, result: flood.FloodRun) -> None:
        f = result.flood
        create, values = f["create"], f["values"]
        made = {
            "flood_create": f"{f['spaces_created']:,} spaces and {f['tasks_created']:,} tasks "
            "created",
            "flood_values": f"values stored on {f['tasks_holding_values']:,} of "
            f"{f['tasks_created']:,} tasks",
        }
        for name, phase in (("flood_create", create), ("flood_values", values)):
            answers = flood_answers(phase["statuses"])
            row = Row(
                name,
                self.titles[name],
                requests_per_s=phase["requests_per_s"],
                p50_ms=_ms(phase["p50_ms"]),
                p99_ms=_ms(phase["p99_ms"]),
                requests=phase["requests"],
                connections=f["concurrency"],
                duration_s=phase["seconds"],
                extra={
                    "answers": answers,
                    "statuses": phase["statuses"],
                    "spaces_created": f["spaces_created"],
                    "tasks_created": f["tasks_created"],
                    "tasks_holding_values": f["tasks_holding_values"],
                    "note": ", ".join(f"{k} ×{v:,}" for k, v in answers.items())
                    + f"; {made[name]}",
                },
            )
            cpu = result.cpu_between(phase["started"], phase["ended"])
            if cpu is not None and phase["requests"]:
                row.cpu_us_per_request = round(cpu * 1e6 / phase["requests"], 1)
            broken = {
                status: n
                for status, n in phase["statuses"].items()
                if not status.isdigit() or (status >= "500" and status != "503")
            }
            if broken:
                row.status = "error"
                row.reason = "the flood got failures, not refusals: " + ", ".join(
                    f"{k} ×{v}" for k, v in broken.items()
                )
            self.record(row)

        before, peak, after = result.rss_before, result.peak_rss, result.rss_after
        growth = peak - before
        row = Row(
            "flood_memory",
            self.titles["flood_memory"],
            extra={
                "rss_before_mb": round(before / MB, 1),
                "peak_rss_mb": round(peak / MB, 1),
                "rss_after_mb": round(after / MB, 1),
                "growth_mb": round(growth / MB, 1),
                "samples": len(result.samples),
                "up_after_flood": result.server_after,
                "note": (
                    f"RSS {before / MB:.1f} MB before the flood, peak {peak / MB:.1f} MB "
                    f"(+{growth / MB:.1f} MB), {after / MB:.1f} MB after"
                ),
            },
        )
        if not result.server_alive or result.server_after != "200":
            row.status = "error"
            row.reason = (
                "the server died during the flood"
                if not result.server_alive
                else f"GET /up after the flood answered {result.server_after}"
            )
        self.record(row)

        during = result.bystander(create["started"], values["ended"])
        whole = result.bystander()
        phases = {
            "before": result.bystander(None, create["started"]),
            "during_create": result.bystander(create["started"], create["ended"]),
            "during_values": result.bystander(values["started"], values["ended"]),
            "after": result.bystander(values["ended"], None),
        }
        span = (result.reports[-1][0] - result.reports[0][0]) if len(result.reports) > 1 else 0
        row = Row(
            "flood_bystander",
            self.titles["flood_bystander"],
            requests_per_s=round(len(result.reports) / span, 1) if span else None,
            p50_ms=_ms(during["p50_ms"]),
            p99_ms=_ms(during["p99_ms"]),
            requests=whole["reports"],
            connections=1,
            extra={
                "refused": whole["refused"],
                "failed": whole["failed"],
                "statuses": whole["statuses"],
                "max_ms_during_flood": _ms(during["max_ms"]),
                "phases": phases,
                "note": (
                    f"{whole['reports']} reports, {whole['refused']} refused, "
                    f"{whole['failed']} failed; p50/p99 during the flood "
                    f"({during['reports']} reports); p99 "
                    f"{_num(phases['during_create']['p99_ms'])} ms while it creates, "
                    f"{_num(phases['during_values']['p99_ms'])} ms while it PUTs values"
                ),
            },
        )
        if whole["failed"]:
            row.status = "error"
            row.reason = "the well-behaved client's reports failed: " + ", ".join(
                f"{k} ×{v}" for k, v in whole["statuses"].items() if k not in ("200", "429", "503")
            )
        self.record(row)

    async def seed(self, server: ServerProcess) -> dict[str, Any]:
        o = self.o
        self.say(
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

    async def check_big_space(self, server: ServerProcess, big: seed.Space) -> None:
        """The service reads the directly written tasks as its own, cursors included."""
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            newest = (await seed.read_space(client, big.uuid, limit=1))["tasks"]
            if [t["uuid"] for t in newest] != [big.tasks[-1]]:
                raise seed.SeedError("the big space's newest task is not the last one written")
            cursor = big.created_at[PAGE]
            page = (await seed.read_space(client, big.uuid, limit=PAGE, before=cursor))["tasks"]
            if [t["uuid"] for t in page] != big.tasks[PAGE - 1 :: -1]:
                raise seed.SeedError("a before cursor on the big space returned the wrong page")

    def memory(self, server: ServerProcess, big: seed.Space, rss_at_start: int) -> None:
        """Give every task of the big space progress with PUTs, then read the RSS."""
        name = "memory"
        # The first round guesses from the PUT scenario's rate; later rounds use their own
        # (a PUT to a task the server has not seen yet reads the database, so it is slower).
        rate = (self.rows.get("put_report") or Row("", "")).requests_per_s or 1000.0
        remaining = [f"/tasks/{t}" for t in big.tasks]
        cpu_before = server.cpu_seconds()
        sent = 0
        # Seeding, not measuring: at least 16 connections, so a smoke run seeds fast too.
        connections = max(16, self.o.connections)
        deadline = time.monotonic() + 900
        while remaining and time.monotonic() < deadline:
            seconds = min(120.0, len(remaining) / rate * 1.2 + 0.5)
            self.say(f"{name}: PUT to {len(remaining):,} tasks, wrk {max(1, round(seconds))} s")
            result = run_wrk(
                server.url,
                Load("PUT", remaining, seed.PUT_BODY),
                duration=seconds,
                connections=connections,
                threads=max(2, self.o.threads),
                workdir=self.workdir,
            )
            sent += result.requests
            if result.error_count:
                raise seed.SeedError(f"PUTs to the big space failed: {result.errors}")
            rate = max(50.0, result.requests_per_s)
            in_flight = -(-result.connections // result.threads)
            remaining = not_reached(remaining, result, in_flight)
        if remaining:
            raise seed.SeedError(f"{len(remaining):,} tasks still have no progress")
        time.sleep(0.5)
        rss = server.rss_bytes()
        per_task = (rss - rss_at_start) / len(big.tasks)
        cpu = server.cpu_seconds() - cpu_before
        asyncio.run(self.check_progress(server, big))
        row = Row(
            name,
            self.titles[name],
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
        self.record(row)

    async def check_progress(self, server: ServerProcess, big: seed.Space) -> None:
        sample = random.Random(6).sample(big.tasks, min(50, len(big.tasks)))
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for task in sample:
                response = await client.get(f"/tasks/{task}")
                if response.status_code != 200 or response.json()["progress"] is None:
                    raise seed.SeedError(f"task {task} holds no progress after the PUTs")

    def scale_out(self) -> None:
        """PUT on one instance vs two, both on one PostgreSQL and one Redis.

        Two instances are loaded by two wrk processes at once, each with half the
        connections and threads; their req/s add up, their p99 is the worse of the two.
        """
        try:
            from tests.servers import PostgresServer, RedisServer, ServerError
        except ImportError as exc:
            raise Skip(f"tests/servers.py cannot be imported: {exc}") from None
        self.say("starting PostgreSQL and Redis")
        try:
            postgres = PostgresServer()
            self.cleanups.append(postgres.destroy)
            postgres.start()
            postgres.create_database()
            redis = RedisServer()
            self.cleanups.append(redis.stop)
            redis.start()
        except ServerError as exc:
            raise Skip(f"PostgreSQL or Redis not available: {exc}") from None
        try:
            first, second = (
                self.start(start_headway, f"headway-pg-{n}", self.workdir, postgres.url,
                           redis.url, wait=False, env=NO_RATE_LIMITS)
                for n in (1, 2)
            )  # fmt: skip
            for server in (first, second):
                server.wait_ready("/up")
        except StartError as exc:
            raise Skip(f"headway serve does not run on PostgreSQL + Redis yet: {exc}") from None
        pool = asyncio.run(self.check_shared(first, second))
        paths = [f"/tasks/{t}" for t in pool]
        put = Load("PUT", paths, seed.PUT_BODY)
        backends = backend_cpu_readers(postgres.data, redis.process.pid if redis.process else None)
        one = self.measure(first, "scale_out_one", put, others=backends)
        one.extra["note"] = cpu_note(one.extra)

        half = max(1, self.o.connections // 2)
        half_threads = max(1, self.o.threads // 2)
        self.say(f"scale_out_two: two wrk at once, {half} connections each")
        others_before = {k: read() for k, read in backends.items()}
        machine_before = machine_cpu()
        cpu_before = first.cpu_seconds() + second.cpu_seconds()
        running = [
            start_wrk(
                server.url,
                put,
                duration=self.o.duration,
                connections=half,
                threads=half_threads,
                workdir=self.workdir,
            )
            for server in (first, second)
        ]
        results = [finish(r) for r in running]
        cpu = first.cpu_seconds() + second.cpu_seconds() - cpu_before
        spent = {k: read() - others_before[k] for k, read in backends.items()}
        row = self.combine("scale_out_two", results, cpu)
        # Headway's CPU here is both instances' together, per request answered by either.
        row.extra.update(others_extra(cpu, spent, row.requests or 0))
        row.extra["machine_busy"] = machine_busy(machine_before)
        if one.requests_per_s and row.requests_per_s is not None:
            row.extra["vs_one_instance"] = round(row.requests_per_s / one.requests_per_s, 2)
            row.extra["note"] = f"{row.extra['vs_one_instance']}x one instance; " + cpu_note(
                row.extra
            )
        self.record(row)
        for server in (second, first):
            self.stop(server)
        self.stop_everything()

    def combine(self, name: str, results: list[LoadResult], cpu: float) -> Row:
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
        row = Row.measured(name, self.titles[name], merged, cpu)
        row.requests_per_s = round(sum(r.requests_per_s for r in results), 1)
        return self.finish_row(row, merged)

    async def check_shared(self, first: ServerProcess, second: ServerProcess) -> list[str]:
        """Skip unless both instances use PostgreSQL and Redis and share progress; returns
        the pool of tasks to report on."""
        async with (
            httpx.AsyncClient(base_url=first.url, timeout=30) as a,
            httpx.AsyncClient(base_url=second.url, timeout=30) as b,
        ):
            for client in (a, b):
                checks = (await client.get("/up")).json().get("checks", {})
                database = checks.get("database", {}).get("backend")
                progress = checks.get("progress_store", {}).get("backend")
                if database != "postgresql" or progress != "redis":
                    raise Skip(
                        f"with HEADWAY_REDIS_URL set the service reports database "
                        f"{database!r} and progress store {progress!r}, not postgresql and "
                        "redis: scale-out has not landed yet"
                    )
            space = await seed.create_space(a, "scale-out")
            pool = await seed.create_tasks(a, space, self.o.pool)
            await seed.report_all(a, pool)
            seen = (await b.get(f"/tasks/{pool[0]}")).json()
            if seen.get("progress") is None:
                raise Skip("progress reported on one instance is not visible on the other")
            return pool


def flood_answers(statuses: dict[str, int]) -> dict[str, int]:
    """A flood phase's answers as 201, 200, 429, 503 and other (failures included)."""
    answers = {k: statuses.get(k, 0) for k in ("201", "200", "429", "503")}
    answers["other"] = sum(n for k, n in statuses.items() if k not in answers)
    return answers


def targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """Every target, in table order: issue 6's, the reads and creates', the live stream's."""
    return issue6_targets(rows, o) + reads_creates_targets(rows, o) + streams_targets(rows)


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    load_at_start = os.getloadavg()
    machine = report.machine()  # before the run: the commit measured, not a later one
    with tempfile.TemporaryDirectory(prefix="headway-bench-") as tmp:
        bench = Bench(options, Path(tmp))
        bench.say(f"headway bench, mode {options.mode}; work directory {tmp}")
        if load_at_start[0] > (os.cpu_count() or 1) / 2:
            bench.say(
                f"warning: load average {load_at_start[0]:.1f} on {os.cpu_count()} CPUs: "
                "other work is running, so figures will be low and noisy"
            )
        try:
            bench.run()
        finally:
            bench.stop_everything()
        rows = [
            bench.rows.get(name) or Row(name, title, "error", "not run")
            for name, title in bench.titles.items()
        ]
        found = targets(bench.rows, options)
        run = {
            "started_at": started_at,
            "elapsed_s": round(time.monotonic() - bench.started, 1),
            "options": {
                "mode": options.mode,
                "duration": options.duration,
                "connections": options.connections,
                "threads": options.threads,
                "big": options.big,
                "small": options.small,
                "children": options.children,
                "pool": options.pool,
                "profile": options.profile,
                "flood_seconds": options.flood_s,
                "flood_concurrency": options.flood_concurrency,
                "flood_spaces": options.flood_spaces,
            },
            "machine": machine,
            # Other work on the machine skews everything; the run records how much there was.
            "load_average": {
                "at_start": [round(x, 2) for x in load_at_start],
                "at_end": [round(x, 2) for x in os.getloadavg()],
            },
        }
        if bench.profiles:
            run["profiles"] = bench.profiles
            text = "".join(profile.render(n, s) for n, s in bench.profiles.items())
            options.results.mkdir(parents=True, exist_ok=True)
            (options.results / "profile.txt").write_text(text)
        report.write(options.results, run, rows, found)
    print()
    print(report.table(rows))
    print()
    print("\n".join(report.targets_sections(found)).rstrip())
    print(f"\nwritten: {options.results / 'latest.json'}, {options.results / 'latest.md'}")
    return 1 if any(row.status == "error" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
