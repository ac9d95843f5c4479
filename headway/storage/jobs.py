"""SQL of jobs (see `headway.domain.jobs`): each job's row kept up by the writes that change it,
and a job's newest runs found by the index on tasks (`tasks_job_runs`: job, failed,
finished_at_us, created_at_us: it holds what a run's answer needs), so that no read
grows with the number of runs a space keeps.

Writes touch a job's row last in their transaction (after the tasks' rows), so that on
PostgreSQL two writes never take the same rows' locks in opposite orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .database import Fetch, Statements, chunks, marks

# Jobs whose runs one statement looks up (two index scans each, joined by UNION ALL).
RUNS_AT_ONCE = 50


async def created(
    st: Statements, jobs: Sequence[tuple[str, str, str, str | None, str | None]], now_us: int
) -> None:
    """Note tasks just created in these jobs (key, space, title, source, parent's title):
    each job's row made if it is new, and its last activity moved to `now_us`."""
    if not jobs:
        return
    await st.many(
        "INSERT INTO jobs (id, space_uuid, title, source, parent_title, last_at_us) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET last_at_us = CASE WHEN "
        "excluded.last_at_us > jobs.last_at_us THEN excluded.last_at_us ELSE jobs.last_at_us END",
        [(*job, now_us) for job in sorted(set(jobs))],
    )


async def finished(st: Statements, runs: Sequence[tuple[str, bool]], now_us: int) -> None:
    """Count the runs of tasks that just finished in this transaction, (uuid, failed), in
    their jobs (a task in none: nothing). Two at once (a step and its parent) are counted
    in the order of their jobs, as creates note theirs (`created`)."""
    if len(runs) > 1:
        found = await st.rows(
            f"SELECT uuid, job FROM tasks WHERE uuid IN ({marks(runs)})",
            [uuid for uuid, _ in runs],
        )
        job_of = {row[0]: row[1] for row in found}
        runs = sorted(runs, key=lambda run: job_of.get(run[0]) or "")
    await st.many(
        "UPDATE jobs SET runs = runs + 1, failed = failed + ?, last_at_us = CASE WHEN "
        "last_at_us > ? THEN last_at_us ELSE ? END "
        "WHERE id = (SELECT job FROM tasks WHERE uuid = ?)",
        [(1 if failed else 0, now_us, now_us, uuid) for uuid, failed in runs],
    )


async def runs_of(st: Statements, uuids: Sequence[str]) -> list[tuple[str, int, int]]:
    """The runs among these tasks by job: (job, runs, failed), to count out once they are
    deleted (`forget_runs`)."""
    found = await st.rows(
        "SELECT job, count(*), sum(CASE WHEN failed THEN 1 ELSE 0 END) FROM tasks "
        f"WHERE uuid IN ({marks(uuids)}) AND job IS NOT NULL AND finished_at_us IS NOT NULL "
        "GROUP BY job",
        uuids,
    )
    return [(row[0], int(row[1]), int(row[2] or 0)) for row in found]


async def forget_runs(st: Statements, counts: Sequence[tuple[str, int, int]]) -> None:
    """Count out runs whose tasks were deleted (see `runs_of`)."""
    if counts:
        await st.many(
            "UPDATE jobs SET runs = runs - ?, failed = failed - ? WHERE id = ?",
            [(runs, failed, job) for job, runs, failed in sorted(counts)],
        )


async def space_jobs(fetch: Fetch, space_uuid: str, limit: int) -> list[tuple[Any, ...]]:
    """The space's `limit` jobs of newest activity, newest first: (key, title, source,
    parent_title, runs, failed)."""
    return list(
        await fetch(
            "SELECT id, title, source, parent_title, runs, failed FROM jobs "
            "WHERE space_uuid = ? ORDER BY last_at_us DESC, id DESC LIMIT ?",
            (space_uuid, limit),
        )
    )


async def newest_runs(
    fetch: Fetch, keys: Sequence[str], count: int
) -> dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    """Each job's newest `count` succeeded runs, and its failed runs among its newest
    `count` runs, newest first, as (created_at_us, finished_at_us): index scans of at most
    `count` entries each (the index holds both instants), whatever a job's history."""
    found: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {
        key: ([], []) for key in keys
    }
    count = int(count)
    columns = "job, failed, created_at_us, finished_at_us"
    # The failed runs newer than the count-th newest succeeded one (all, if it has fewer).
    since = (
        "COALESCE((SELECT finished_at_us FROM tasks WHERE job = ? AND failed = FALSE "
        f"ORDER BY finished_at_us DESC LIMIT 1 OFFSET {count - 1}), 0)"
    )
    for chunk in chunks(keys, RUNS_AT_ONCE):
        parts = []
        for n in range(len(chunk)):
            parts.append(
                f"SELECT * FROM (SELECT {columns} FROM tasks WHERE job = ? AND failed = FALSE "
                f"ORDER BY finished_at_us DESC LIMIT {count}) AS succeeded{n}"
            )
            parts.append(
                f"SELECT * FROM (SELECT {columns} FROM tasks WHERE job = ? AND failed = TRUE "
                f"AND finished_at_us >= {since} ORDER BY finished_at_us DESC LIMIT {count}) "
                f"AS failed{n}"
            )
        params = [key for key in chunk for _ in range(3)]
        for job, failed, created_us, finished_us in await fetch(" UNION ALL ".join(parts), params):
            found[job][1 if failed else 0].append((int(created_us), int(finished_us)))
    return found


async def succeeded_counts(fetch: Fetch, keys: Sequence[str]) -> dict[str, int]:
    """Each of these jobs' succeeded runs, counted (a job without a row: none)."""
    found: dict[str, int] = {}
    for chunk in chunks(keys, 500):
        rows = await fetch(f"SELECT id, runs, failed FROM jobs WHERE id IN ({marks(chunk)})", chunk)
        found.update((row[0], int(row[1]) - int(row[2])) for row in rows)
    return found


async def job_of(fetch: Fetch, task_uuid: str) -> tuple[str, int] | None:
    """The job of a task and its `created_at_us` (None: no such task, or in no job)."""
    found = await fetch("SELECT job, created_at_us FROM tasks WHERE uuid = ?", (task_uuid,))
    if not found or found[0][0] is None:
        return None
    return found[0][0], int(found[0][1])


async def active_counts(fetch: Fetch, keys: Sequence[str]) -> dict[str, int]:
    """How many tasks of each job are active (not finished)."""
    counts: dict[str, int] = {}
    for chunk in chunks(keys, RUNS_AT_ONCE):
        found = await fetch(
            f"SELECT job, count(*) FROM tasks WHERE job IN ({marks(chunk)}) "
            "AND failed IS NULL AND finished_at_us IS NULL GROUP BY job",
            chunk,
        )
        counts.update((row[0], int(row[1])) for row in found)
    return counts
