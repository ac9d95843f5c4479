"""Jobs: the runs Headway keeps, grouped by title, source and parent's title
(`GET /spaces/{s}/jobs`, `GET /shared/{share}/jobs`): counts, the usual duration from
succeeded runs only, the newest runs, kept up by creates, finishes and deletes."""

from __future__ import annotations

import asyncio

import pytest

from headway.domain.jobs import Usual, job_key, percentile, usual
from headway.storage import jobs

UNKNOWN = "5d3c1e0a-8f4b-4c2d-9a6e-7b1f0c3d2e4a"


async def run(client, make_task, clock, seconds: float, *, error: str | None = None, **body):
    """A task made, run for `seconds` on the test's clock, and finished (failed if
    `error`)."""
    task = await make_task(**body)
    clock.advance(seconds)
    values = {"error": error} if error else {}
    answer = await client.put(f"/tasks/{task}", json={"done": True, "values": values})
    assert answer.status_code == 200, answer.text
    return task


async def jobs_of(client, space, **params) -> list[dict]:
    answer = await client.get(f"/spaces/{space}/jobs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()["jobs"]


# --- The rules, without I/O -----------------------------------------------------------


def test_the_usual_duration_needs_five_succeeded_runs_and_takes_the_last_twenty():
    assert usual([10.0, 20.0, 30.0, 40.0]) is None
    assert usual([10.0, 20.0, 30.0, 40.0, 50.0]) == Usual(30.0, 48.0, 5)
    newest_first = [1.0] * 20 + [1000.0] * 5  # the 5 oldest are beyond the last 20
    assert usual(newest_first) == Usual(1.0, 1.0, 20)


def test_percentiles_are_linear_between_the_closest_ranks():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([5.0], 0.95) == 5.0
    assert percentile([0.0, 10.0], 0.95) == pytest.approx(9.5)


def test_a_job_is_its_space_title_source_and_parents_title():
    space = UNKNOWN
    assert job_key(space, None, "ci", None) is None  # untitled: in no job
    keys = {
        job_key(space, "Build", None, None),
        job_key(space, "Build", "", None),  # an empty source is not a missing one
        job_key(space, "Build", "ci", None),
        job_key(space, "Build", None, "Release"),
        job_key(space, "Build", "None", None),
        job_key("0" * 8 + UNKNOWN[8:], "Build", None, None),
    }
    assert len(keys) == 6
    assert job_key(space, "Build", "ci", None) == job_key(space, "Build", "ci", None)


# --- Over HTTP, on every backend pair -------------------------------------------------


async def test_a_jobs_counts_usual_duration_and_newest_runs(client, space, make_task, clock):
    for seconds in (10, 20, 30, 40, 50, 60):
        await run(client, make_task, clock, seconds, title="Nightly ETL", source="cron")
    for _ in range(2):  # failures are slow here: they must not count toward the usual
        await run(
            client, make_task, clock, 1000, error="disk full", title="Nightly ETL", source="cron"
        )
    await make_task(title="Nightly ETL", source="cron")  # tonight's, still running

    [job] = await jobs_of(client, space)
    assert {key: job[key] for key in ("title", "source", "parent_title", "runs", "failed")} == {
        "title": "Nightly ETL",
        "source": "cron",
        "parent_title": None,
        "runs": 8,
        "failed": 2,
    }
    assert job["active"] == 1
    assert job["usual"] == {"p50_s": 35.0, "p95_s": 57.5, "from_runs": 6}
    assert [(r["seconds"], r["failed"]) for r in job["last"]] == [
        (1000.0, True),
        (1000.0, True),
        (60.0, False),
        (50.0, False),
        (40.0, False),
        (30.0, False),
        (20.0, False),
        (10.0, False),
    ]
    finished = [r["finished_at"] for r in job["last"]]
    assert finished == sorted(finished, reverse=True)


async def test_fewer_than_five_succeeded_runs_or_only_failures_have_no_usual(
    client, space, make_task, clock
):
    for _ in range(4):
        await run(client, make_task, clock, 5, title="Deploy")
    for _ in range(7):
        await run(client, make_task, clock, 0, error="refused", title="Smoke test")
    jobs = {job["title"]: job for job in await jobs_of(client, space)}
    assert jobs["Deploy"]["usual"] is None and jobs["Deploy"]["runs"] == 4
    assert jobs["Smoke test"]["usual"] is None
    assert (jobs["Smoke test"]["runs"], jobs["Smoke test"]["failed"]) == (7, 7)
    assert all(r["seconds"] == 0 for r in jobs["Smoke test"]["last"])


async def test_the_newest_thirty_runs_are_listed_and_the_usual_is_of_the_last_twenty(
    client, space, make_task, clock
):
    for n in range(35):
        await run(client, make_task, clock, 100 if n < 15 else 1, title="Crawl")
    [job] = await jobs_of(client, space)
    assert job["runs"] == 35 and len(job["last"]) == 30
    assert job["usual"] == {"p50_s": 1.0, "p95_s": 1.0, "from_runs": 20}


async def test_steps_are_jobs_of_their_own_named_by_their_parents_title(
    client, space, make_task, clock
):
    for _ in range(2):
        parent = await make_task(title="Release")
        await run(client, make_task, clock, 3, title="Build", parent_uuid=parent)
    await run(client, make_task, clock, 7, title="Build")  # top-level: another job
    await make_task()  # untitled: in no job
    jobs = await jobs_of(client, space)
    found = {(job["title"], job["parent_title"]): job for job in jobs}
    assert set(found) == {("Release", None), ("Build", "Release"), ("Build", None)}
    assert found[("Build", "Release")]["runs"] == 2
    # Each parent finished with its last step: its runs are the release's.
    assert found[("Release", None)]["runs"] == 2
    assert found[("Build", None)]["runs"] == 1


async def test_a_parent_whose_step_failed_is_a_failed_run(client, space, make_task, clock):
    parent = await make_task(title="Release")
    await run(client, make_task, clock, 1, error="tests failed", title="Test", parent_uuid=parent)
    jobs = {job["title"]: job for job in await jobs_of(client, space)}
    assert jobs["Release"]["failed"] == 1 and jobs["Release"]["last"][0]["failed"] is True


async def test_jobs_come_newest_activity_first_and_limit_takes_the_newest(
    client, space, make_task, clock
):
    await run(client, make_task, clock, 1, title="A")
    await run(client, make_task, clock, 1, title="B")
    clock.advance(1)
    await make_task(title="A")  # a new run of A: its activity is the newest
    assert [job["title"] for job in await jobs_of(client, space)] == ["A", "B"]
    assert [job["title"] for job in await jobs_of(client, space, limit=1)] == ["A"]
    assert len(await jobs_of(client, space, limit=10**30)) == 2  # beyond the most: the most


async def test_a_read_lists_at_most_a_hundred_jobs_whatever_limit_asks(
    client, space, make_task, clock
):
    """An answer comes whole (not streamed): bounded by the number of jobs it lists."""
    for n in range(101):
        clock.advance(1)
        await make_task(title=f"job {n}")
    assert len(await jobs_of(client, space)) == 100
    newest = await jobs_of(client, space, limit=5000)
    assert len(newest) == 100 and newest[0]["title"] == "job 100"
    assert [job["active"] for job in newest] == [1] * 100


@pytest.mark.parametrize("limit", ["0", "-1", "1.5", "x", ""])
async def test_a_bad_limit_is_a_400(client, space, limit):
    answer = await client.get(f"/spaces/{space}/jobs", params={"limit": limit})
    assert answer.status_code == 400
    assert "limit" in answer.json()["error"]


async def test_an_unknown_space_is_a_404(client):
    for space in (UNKNOWN, "not-a-uuid"):
        answer = await client.get(f"/spaces/{space}/jobs")
        assert answer.status_code == 404 and "error" in answer.json()


async def test_deleted_runs_are_counted_out_and_a_deleted_space_has_none(
    client, space, make_task, clock
):
    kept = await run(client, make_task, clock, 2, title="Backup")
    gone = await run(client, make_task, clock, 4, error="no space", title="Backup")
    assert (await client.delete(f"/tasks/{gone}")).status_code == 204
    [job] = await jobs_of(client, space)
    assert (job["runs"], job["failed"], len(job["last"])) == (1, 0, 1)
    assert (await client.delete(f"/tasks/{kept}")).status_code == 204
    [job] = await jobs_of(client, space)
    assert (job["runs"], job["last"]) == (0, [])
    assert (await client.delete(f"/spaces/{space}")).status_code == 204
    assert (await client.get(f"/spaces/{space}/jobs")).status_code == 404


async def test_a_share_link_shows_the_same_jobs_without_a_uuid(client, space, make_task, clock):
    task = await run(client, make_task, clock, 3, title="Nightly ETL")
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    shared = await client.get(f"/shared/{share}/jobs")
    assert shared.status_code == 200
    assert shared.json()["jobs"] == await jobs_of(client, space)
    assert space not in shared.text and task not in shared.text
    assert (await client.delete(f"/spaces/{space}/shares/{share}")).status_code == 204
    assert (await client.get(f"/shared/{share}/jobs")).status_code == 404


async def test_titles_of_emoji_and_of_every_length_allowed_are_jobs_of_their_own(
    client, space, make_task, clock
):
    titles = ["🚀" * 200, "x" * 200, "👩‍👩‍👧‍👦 family", "Ünïcödé"]
    for title in titles:
        await run(client, make_task, clock, 1, title=title)
    assert sorted(job["title"] for job in await jobs_of(client, space)) == sorted(titles)
    too_long = await client.post(f"/spaces/{space}/tasks", json={"title": "x" * 1024})
    assert too_long.status_code == 422
    assert len(await jobs_of(client, space)) == len(titles)  # nothing noted for it


async def test_a_clock_that_went_back_gives_a_run_of_zero_seconds(client, space, make_task, clock):
    task = await make_task(title="Clock")
    clock.advance(-30)
    assert (await client.put(f"/tasks/{task}", json={"done": True})).status_code == 200
    [job] = await jobs_of(client, space)
    assert job["last"][0]["seconds"] == 0 and job["runs"] == 1


async def test_reads_of_jobs_find_their_rows_by_index(app, client, space, make_task, clock):
    """No read of jobs scans a table or sorts (SQLite's plans): what it costs does not grow
    with the runs a space keeps."""
    db = app.state.service.db
    if not db.is_sqlite:
        pytest.skip("the plans checked are SQLite's")
    await run(client, make_task, clock, 1, title="Indexed")
    sent: list[tuple[str, tuple]] = []

    async def fetch(sql: str, params) -> list:
        sent.append((sql, tuple(params)))
        return await db.fetch(sql, params)

    [(job_id, *_)] = await jobs.space_jobs(fetch, space, 100)
    await jobs.newest_runs(fetch, [job_id], 30)
    await jobs.active_counts(fetch, [job_id])
    assert len(sent) == 3
    for sql, params in sent:
        plan = [row[3] for row in await db.fetch(f"EXPLAIN QUERY PLAN {sql}", params)]
        # (A SCAN of a subquery's own rows, at most 30, is no scan of a table.)
        wasted = [s for s in plan if s.startswith(("SCAN tasks", "SCAN jobs")) or "TEMP" in s]
        assert not wasted, (sql, plan)


async def test_runs_finishing_at_once_are_each_counted(client, space, make_task, clock):
    """Creates and finishes of one job at once (on PostgreSQL, each a transaction of its
    own, on the job's one row): none is lost, none counted twice."""

    async def one(n: int) -> None:
        await run(client, make_task, clock, 0, error="x" if n % 4 == 0 else None, title="Burst")

    await asyncio.gather(*(one(n) for n in range(40)))
    [job] = await jobs_of(client, space)
    assert (job["runs"], job["failed"], job["active"]) == (40, 10, 0)
