"""The jobs scenario, on a server of its own (embedded default, rate limits off): a
space's jobs read (`GET /spaces/{s}/jobs`) where its jobs hold few runs, against the same
read where they hold many; and its target: the read costs the same whatever the history.

Both spaces hold JOBS jobs of one title each; their runs (every fifth one failed) are
written straight into the SQLite file, as the server's finishes leave them (the tasks'
rows with their job and outcome, each job's row with its counts)."""

from __future__ import annotations

import sqlite3
import time
import uuid

from headway.domain.jobs import job_key

from ..load import Load
from ..measure import Harness, _num
from ..processes import ServerProcess
from ..report import Row, Target
from . import NO_RATE_LIMITS

JOBS_ROWS = ["jobs_few", "jobs_many"]
JOBS = 2  # jobs in each space: each lists its newest 30 runs, with few runs or many
FEW, MANY = 100, 100_000  # runs in each space, over its jobs
JOBS_TARGET = "jobs: a read of jobs costs the same whatever the history"
RATIO = 1.2  # the many runs' CPU/req against the few's, at most


def jobs(bench: Harness) -> None:
    """Seed both spaces, then time their reads on the same server."""
    database = bench.workdir / "jobs.db"
    server = bench.start_headway("headway-jobs", f"sqlite:///{database}", env=NO_RATE_LIMITS)
    try:
        few = _space(server, "few runs")
        many = _space(server, "many runs")
        runs = MANY if bench.o.mode != "smoke" else 10_000
        bench.say(f"jobs: {JOBS} jobs of {FEW} and of {runs:,} runs in all, written to the file")
        _seed(str(database), few, FEW)
        _seed(str(database), many, runs)
        control = bench.measure(server, "jobs_few", Load("GET", [f"/spaces/{few}/jobs"]))
        row = bench.measure(server, "jobs_many", Load("GET", [f"/spaces/{many}/jobs"]))
        if row.cpu_us_per_request and control.cpu_us_per_request:
            row.extra["vs_few"] = round(row.cpu_us_per_request / control.cpu_us_per_request, 3)
            row.extra["runs"] = runs
            bench.say(
                f"jobs_many: CPU µs/req {_num(row.cpu_us_per_request)} with {runs:,} runs vs "
                f"{_num(control.cpu_us_per_request)} with {FEW} ({row.extra['vs_few']:.2f}x)"
            )
    finally:
        bench.stop(server)


def _space(server: ServerProcess, title: str) -> str:
    import httpx

    answer = httpx.post(f"{server.url}/spaces", json={"title": title}, timeout=30)
    answer.raise_for_status()
    return answer.json()["uuid"]


def _seed(database: str, space: str, runs: int) -> None:
    """`runs` finished tasks over JOBS jobs of `space`, a minute each, every fifth failed,
    newest last; each job's row with its counts."""
    now_us = time.time_ns() // 1000
    per_job = runs // JOBS
    connection = sqlite3.connect(database, timeout=60)
    try:
        with connection:
            for n in range(JOBS):
                title = f"job {n}"
                key = job_key(space, title, "bench", None)
                rows = []
                for i in range(per_job):
                    finished = now_us - (per_job - i) * 1_000_000
                    created = finished - 60_000_000
                    rows.append(
                        (
                            str(uuid.uuid4()),
                            space,
                            title,
                            created + n,
                            finished,
                            60,
                            key,
                            i % 5 == 0,
                        )
                    )
                connection.executemany(
                    "INSERT INTO tasks (uuid, space_uuid, title, source, created_at_us, "
                    "finished_at_us, duration, job, failed) "
                    "VALUES (?, ?, ?, 'bench', ?, ?, ?, ?, ?)",
                    rows,
                )
                connection.execute(
                    "INSERT INTO jobs (id, space_uuid, title, source, parent_title, runs, failed, "
                    "last_at_us) VALUES (?, ?, ?, 'bench', NULL, ?, ?, ?)",
                    (key, space, title, per_job, (per_job + 4) // 5, now_us + n),
                )
    finally:
        connection.close()


def jobs_targets(rows: dict[str, Row]) -> list[Target]:
    """Reading a space's jobs with 100,000 runs costs at most RATIO times the CPU per
    request of reading one with 100."""
    description = f"GET /spaces/{{s}}/jobs, {MANY:,} runs: CPU/req ≤ {RATIO}x of {FEW} runs'"
    many, few = rows.get("jobs_many"), rows.get("jobs_few")
    measured = [row for row in (many, few) if row is not None and row.status == "ok"]
    if len(measured) < 2 or not all(row.cpu_us_per_request for row in measured):
        why = next((row.reason for row in (many, few) if row and row.reason), "")
        return [Target("jobs_cpu", description, "skipped", "–", why or "not measured", JOBS_TARGET)]
    assert many is not None and few is not None
    ratio = (many.cpu_us_per_request or 0.0) / (few.cpu_us_per_request or 1.0)
    status = "pass" if ratio <= RATIO else "fail"
    shown = (
        f"{ratio:.2f}x ({_num(many.cpu_us_per_request)} vs {_num(few.cpu_us_per_request)} µs/req)"
    )
    note = f"{many.extra.get('runs', MANY):,} runs measured"
    return [Target("jobs_cpu", description, status, shown, note, JOBS_TARGET)]
