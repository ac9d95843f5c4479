"""`python -m bench.budget DIR PARAMS`: fill Headway's live-progress store in this process
and say what its memory holds against what the budget counts.

A process of its own, so that its RSS is Headway's alone: it builds the app as `headway
serve` does (`create_app`, the embedded default: a SQLite file in DIR, progress in
memory, HEADWAY_PROGRESS_MEMORY as PARAMS' `budget`, one client allowed the whole
budget), writes the largest count's tasks straight into the file (100,000 to a space, in
transactions of 10,000 rows, before the first measure), then reports to every task once
through `Service.tasks.report` (the path of `PUT /tasks/{uuid}` behind its HTTP layer: the
family cache, the store), a body like the PUT scenarios' (`{"current":5,"end":10,
"values":{"log":"x"}}`). At each count of PARAMS' `counts` it reads its RSS (`VmRSS`),
the bytes the budget counts (`headway_progress_bytes`), and the bytes its task caches
hold (families, small spaces), and prints all of it as one JSON line after MARKER.
Bounded in time by PARAMS' `deadline_s` (the harness also kills it by its PID).
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

MARKER = "BUDGET "
PER_SPACE = 100_000
ROWS_AT_ONCE = 10_000


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def insert_tasks(database: Path, spaces: list[str], count: int, now_us: int) -> None:
    """`count` top-level tasks, PER_SPACE to a space, as `Service.tasks.create` writes
    them (see `seed.insert_tasks_directly`), a few rows alive at once."""
    with sqlite3.connect(database) as connection:
        for start in range(0, count, ROWS_AT_ONCE):
            rows = [
                (str(uuid.uuid4()), spaces[n // PER_SPACE], f"task {n}", "bench", now_us + n)
                for n in range(start, min(count, start + ROWS_AT_ONCE))
            ]
            connection.executemany(
                "INSERT INTO tasks (uuid, space_uuid, parent_uuid, title, source, created_at_us)"
                " VALUES (?, ?, NULL, ?, ?, ?)",
                rows,
            )
            connection.commit()
        for index, space in enumerate(spaces):
            last = min(count, (index + 1) * PER_SPACE) - 1
            connection.execute(
                "UPDATE spaces SET last_task_at_us = ?, top_tasks = ? WHERE uuid = ?",
                (now_us + last, last + 1 - index * PER_SPACE, space),
            )
        connection.commit()


async def fill(workdir: Path, counts: list[int], budget: int, deadline_s: float) -> dict[str, Any]:
    from headway.app import create_app
    from headway.config import Settings
    from headway.domain.schemas import CreateSpace
    from headway.domain.tasks import Report

    started = time.monotonic()
    database = workdir / "budget.db"
    settings = Settings(
        database_url=f"sqlite:///{database}",
        run_worker=False,
        progress_memory=budget,
        progress_memory_per_client=1.0,
        space_retention=None,
    )
    app = create_app(settings)
    steps: list[dict[str, Any]] = []
    async with app.router.lifespan_context(app):
        service = app.state.service
        store = service.progress
        most = max(counts)
        spaces = [
            (await service.spaces.create(CreateSpace(title=f"budget {n}")))["uuid"]
            for n in range(-(-most // PER_SPACE))
        ]
        insert_tasks(database, spaces, most, time.time_ns() // 1000 - 10**9)
        gc.collect()
        rss_at_start = rss_bytes()
        report = Report(current=5, end=10, values={"log": "x"})
        done = 0
        with sqlite3.connect(database) as connection:
            for count in sorted(counts):
                fill_started = time.monotonic()
                while done < count:
                    if time.monotonic() - started > deadline_s:
                        raise RuntimeError(f"not filled within {deadline_s:.0f} s: {done:,} tasks")
                    uuids = [
                        row[0]
                        for row in connection.execute(
                            "SELECT uuid FROM tasks ORDER BY rowid LIMIT ? OFFSET ?",
                            (min(ROWS_AT_ONCE, count - done), done),
                        )
                    ]
                    for task in uuids:
                        await service.tasks.report(task, report, "192.0.2.1")
                    done += len(uuids)
                rss = rss_bytes()
                steps.append(
                    {
                        "tasks": done,
                        "rss_bytes": rss,
                        "rss_growth_bytes": rss - rss_at_start,
                        "counted_bytes": store.bytes_used,
                        "cache_bytes": service.families.cache.bytes_held
                        + (service.reads.small.bytes_held if service.reads.small else 0),
                        "fill_s": round(time.monotonic() - fill_started, 1),
                    }
                )
    return {
        "budget_bytes": budget,
        "rss_at_start_bytes": rss_at_start,
        "steps": steps,
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    workdir, params = Path(sys.argv[1]), json.loads(sys.argv[2])
    found = asyncio.run(
        fill(workdir, params["counts"], params["budget"], params.get("deadline_s", 300.0))
    )
    print(MARKER + json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
