"""`GET /tasks/{t}/estimate` and `GET /shared/{share}/tasks/{id}/estimate`: the rate from
the reports the server received, on its own clock, blended with the job's usual duration;
late; finished tasks; parents; through a link without a uuid; clear errors."""

from __future__ import annotations

import pytest

from headway.domain.estimates import Track, estimate, follow

from .test_jobs import run
from .test_mcp import HANDSHAKE, JSON_RPC, rpc

UNKNOWN = "5d3c1e0a-8f4b-4c2d-9a6e-7b1f0c3d2e4a"
FIELDS = {"elapsed_s", "rate_per_s", "remaining_s", "eta_at", "basis", "usual", "late"}


async def estimate_of(client, task: str) -> dict:
    answer = await client.get(f"/tasks/{task}/estimate")
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    found = answer.json()
    assert set(found) == FIELDS
    return found


async def report(client, task: str, current, end=100, **more) -> None:
    answer = await client.put(f"/tasks/{task}", json={"current": current, "end": end, **more})
    assert answer.status_code == 200, answer.text


async def test_a_task_reporting_steadily_has_a_rate_and_a_time_left(client, make_task, clock):
    task = await make_task(title="Copy")
    assert (await estimate_of(client, task)) == {
        "elapsed_s": 0.0,
        "rate_per_s": None,
        "remaining_s": None,
        "eta_at": None,
        "basis": None,
        "usual": None,
        "late": False,
    }
    for current in range(0, 30, 2):  # 2 a second
        await report(client, task, current)
        clock.advance(1)
    found = await estimate_of(client, task)
    assert found["basis"] == "rate" and found["usual"] is None and not found["late"]
    assert found["rate_per_s"] == pytest.approx(2.0, rel=0.01)
    # 28 of 100, 2 a second, the last report a second ago: 35 s left.
    assert found["remaining_s"] == pytest.approx(35.0, rel=0.02)
    assert found["elapsed_s"] == 15.0


async def test_the_estimate_is_the_rules_applied_to_the_reports_as_the_server_took_them(
    client, make_task, clock
):
    """What the answer says is `estimates.estimate` of the track the server kept, its
    reports stamped with the server's clock: bursts, a count going down, a silence."""
    task = await make_task()
    created = clock.now_us()
    track: Track | None = None
    steps = [(0.0, 1), (0.001, 2), (0.002, 3), (5, 10), (10, 20), (10.5, 5), (20, 15), (60, 20)]
    for at_s, current in steps:
        clock.advance(us=created + round(at_s * 1e6) - clock.now_us())
        await report(client, task, current)
        track = follow(track, clock.now_us(), current, 100)
    clock.advance(30)  # silent since: the rate falls
    expected = estimate(
        now_us=clock.now_us(),
        created_at_us=created,
        track=track,
        current=20,
        end=100,
        usual=None,
    )
    found = await estimate_of(client, task)
    assert found["rate_per_s"] == pytest.approx(expected.rate_per_s, abs=1e-6)
    assert found["remaining_s"] == pytest.approx(expected.remaining_s, abs=1e-3)


async def test_a_job_with_history_blends_in_its_usual_duration_and_says_late(
    client, space, make_task, clock
):
    for seconds in (100, 110, 120, 130, 140):
        await run(client, make_task, clock, seconds, title="Nightly ETL")
    await run(client, make_task, clock, 5, title="Nightly ETL", error="disk full")  # not usual
    task = await make_task(title="Nightly ETL")
    found = await estimate_of(client, task)
    usual = {"p50_s": 120.0, "p95_s": 138.0, "from_runs": 5}
    assert found["usual"] == usual
    assert found["basis"] == "usual" and found["remaining_s"] == 120.0  # no report yet
    for current in range(0, 11):  # 10 % in 50 s: 445 s more by its rate, 65 by the usual
        await report(client, task, current)
        clock.advance(5)
    found = await estimate_of(client, task)
    # A total far from the usual ones weighs the rate by the square of the part done.
    assert found["basis"] == "blend"
    assert found["remaining_s"] == pytest.approx(0.01 * 445 + 0.99 * 65, abs=0.5)
    assert not found["late"]
    clock.advance(130)  # 185 s: beyond max(1.2 x 138, 120 + 60) = 180 s
    assert (await estimate_of(client, task))["late"]
    # Finished: no time left, never late, its end the moment it finished.
    finished = await client.put(f"/tasks/{task}", json={"done": True})
    found = await estimate_of(client, task)
    assert found["remaining_s"] == 0 and found["late"] is False and found["basis"] is None
    assert found["eta_at"] == finished.json()["finished_at"]
    assert found["elapsed_s"] == 185.0


async def test_elapsed_time_alone_makes_a_task_late(client, make_task, clock):
    for seconds in (10, 10, 10, 10, 10):
        await run(client, make_task, clock, seconds, title="Backup")
    task = await make_task(title="Backup")
    clock.advance(70)  # beyond max(1.2 x 10, 10 + 60) = 70 s
    assert not (await estimate_of(client, task))["late"]
    clock.advance(1)
    found = await estimate_of(client, task)
    assert found["late"] and found["remaining_s"] is None and found["basis"] is None


async def test_a_task_without_end_has_a_rate_and_no_time_left(client, make_task, clock):
    task = await make_task()
    for current in range(0, 60, 5):
        await client.put(f"/tasks/{task}", json={"current": current})
        clock.advance(1)
    found = await estimate_of(client, task)
    assert found["rate_per_s"] == pytest.approx(5.0, rel=0.01)
    assert found["remaining_s"] is None and found["eta_at"] is None


async def test_a_parent_is_estimated_from_its_steps(client, make_task, clock):
    parent = await make_task(title="Release")
    steps = [await make_task(title=f"step {n}", parent_uuid=parent) for n in range(4)]
    clock.advance(10)
    await client.put(f"/tasks/{steps[0]}", json={"done": True})
    await report(client, steps[1], 50)
    clock.advance(5)  # 1.5 steps of 4 in 15 s: 25 s more
    found = await estimate_of(client, parent)
    assert found["basis"] == "rate"
    assert found["rate_per_s"] == pytest.approx(0.1)
    assert found["remaining_s"] == pytest.approx(25.0)


async def test_a_share_link_gives_the_same_estimate_without_a_uuid(client, space, make_task, clock):
    task = await make_task(title="Copy")
    for current in range(0, 30, 3):
        await report(client, task, current)
        clock.advance(1)
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    shown = (await client.get(f"/shared/{share}")).json()["tasks"]
    task_id = shown[0]["id"]
    answer = await client.get(f"/shared/{share}/tasks/{task_id}/estimate")
    assert answer.status_code == 200
    assert answer.json() == await estimate_of(client, task)
    assert space not in answer.text and task not in answer.text
    assert (await client.get(f"/shared/{share}/tasks/nope/estimate")).status_code == 404
    assert (await client.delete(f"/spaces/{space}/shares/{share}")).status_code == 204
    assert (await client.get(f"/shared/{share}/tasks/{task_id}/estimate")).status_code == 404


@pytest.mark.parametrize("task", [UNKNOWN, "not-a-uuid", "🚀"])
async def test_an_unknown_task_is_404(client, task):
    answer = await client.get(f"/tasks/{task}/estimate")
    assert answer.status_code == 404
    assert set(answer.json()) == {"error"}


async def test_a_count_that_goes_down_starts_the_rate_again(client, make_task, clock):
    task = await make_task()
    for current in range(0, 50, 5):
        await report(client, task, current)
        clock.advance(1)
    assert (await estimate_of(client, task))["rate_per_s"] is not None
    await report(client, task, 3)  # a new pass: what came before says nothing of it
    clock.advance(1)
    assert (await estimate_of(client, task))["rate_per_s"] is None


@pytest.mark.parametrize(("current", "end"), [(2**64, 2**65), (10**300, 10**301), (1e308, 1.7e308)])
async def test_counts_beyond_64_bits_are_kept_and_estimated(client, make_task, clock, current, end):
    """A count any 64-bit float holds is a valid report: its track keeps it (as the float
    it is read as), and the estimate answers."""
    task = await make_task()
    for _ in range(3):
        answer = await client.put(f"/tasks/{task}", json={"current": current, "end": end})
        assert answer.status_code == 200, answer.text
        clock.advance(5)
    found = await estimate_of(client, task)
    assert found["rate_per_s"] == 0.0 and found["remaining_s"] is None


@pytest.mark.parametrize("end", [1e308, 1e22])
async def test_a_time_left_too_big_to_say_reads_as_unknown_everywhere(
    client, space, make_task, clock, end
):
    """A pace that would reach `end` past year 9999: `remaining_s` and `eta_at` null, by
    REST, through a share link and by MCP's `get_estimate`, never an error."""
    task = await make_task(title="Huge")
    for current in (1, 2, 3):
        await report(client, task, current, end=end)
        clock.advance(5.5)
    found = await estimate_of(client, task)
    assert found["rate_per_s"] > 0
    assert (found["remaining_s"], found["eta_at"], found["basis"]) == (None, None, None)
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    task_id = (await client.get(f"/shared/{share}")).json()["tasks"][0]["id"]
    shared = await client.get(f"/shared/{share}/tasks/{task_id}/estimate")
    assert shared.status_code == 200 and shared.json() == found
    answer = await client.post(
        "/mcp",
        json=rpc("tools/call", 1, name="get_estimate", arguments={"task_uuid": task}),
        headers={**JSON_RPC, "mcp-protocol-version": HANDSHAKE, "host": "127.0.0.1"},
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert not result["isError"] and result["structuredContent"] == found


async def test_a_task_whose_estimate_fails_is_left_out_of_the_others(
    app, client, make_task, clock, monkeypatch, caplog
):
    """As streams and the late watch read them, many at once: one task's fault leaves
    that task out, logged once, its uuid masked; the others are estimated."""
    broken, fine = await make_task(), await make_task()
    for current in range(0, 30, 3):
        for task in (broken, fine):
            await report(client, task, current)
        clock.advance(1)
    store = app.state.service.progress
    track = store.track

    async def failing(task_uuid):
        if task_uuid == broken:
            raise ValueError(f"bad track of {task_uuid}")
        return await track(task_uuid)

    monkeypatch.setattr(store, "track", failing)
    estimates = app.state.service.estimates
    for _ in range(2):
        found = await estimates.of_tasks([broken, fine])
        assert list(found) == [fine] and found[fine].rate_per_s is not None
    failed = [r for r in caplog.records if "skipped, it failed" in r.getMessage()]
    assert len(failed) == 1 and "ValueError" in failed[0].getMessage()
    assert broken not in caplog.text


async def sequential_release(client, make_task, clock, *, step_a_s: float, reports: int):
    """A parent whose steps are made one after another, as the Python client makes them:
    its first step runs `step_a_s` and finishes; only then is the second made, which
    reports 1 % a second for `reports` seconds. Returns (parent, second step)."""
    parent = await make_task(title="Release")
    answer = await client.put(f"/tasks/{parent}", json={"values": {}})  # work started: held
    assert answer.status_code == 200, answer.text
    first = await make_task(title="Build", parent_uuid=parent)
    await report(client, first, 0)
    clock.advance(step_a_s)
    await report(client, first, 100)
    second = await make_task(title="Publish", parent_uuid=parent)
    for current in range(reports + 1):
        await report(client, second, current)
        if current < reports:
            clock.advance(1)
    return parent, second


async def test_a_parent_never_has_less_time_left_than_its_running_step(client, make_task, clock):
    """Its count is of the steps made so far (1.1 of 2): by its mean rate it would end in
    about 12 s, while its running step, at 10 % by 1 % a second, has 90 s left."""
    parent, second = await sequential_release(client, make_task, clock, step_a_s=5, reports=10)
    step = await estimate_of(client, second)
    assert step["remaining_s"] == pytest.approx(90.0, rel=0.05)
    found = await estimate_of(client, parent)
    assert found["remaining_s"] is not None
    assert found["remaining_s"] >= step["remaining_s"]
    assert found["basis"] == "rate" and not found["late"]


async def test_a_parent_with_a_usual_duration_leans_on_it_and_not_on_its_count(
    client, make_task, clock
):
    """Its job usually takes 120 s; 15 s in, its count reads 1.5 of 2 steps (the second
    made only once the first finished, at 50 % with 5 s left). Its time left is close to
    the 105 s its usual duration leaves, never below its running step's."""
    for _ in range(5):
        await run(client, make_task, clock, 120, title="Release")
    parent, second = await sequential_release(client, make_task, clock, step_a_s=10, reports=5)
    await report(client, second, 50)  # a jump: 5 s more by its rate
    step = await estimate_of(client, second)
    found = await estimate_of(client, parent)
    assert found["usual"] == {"p50_s": 120.0, "p95_s": 120.0, "from_runs": 5}, found
    assert found["elapsed_s"] == 15.0 and found["basis"] == "blend"
    assert found["remaining_s"] >= step["remaining_s"]
    assert found["remaining_s"] == pytest.approx(105.0, rel=0.05)
    assert not found["late"]


async def test_a_steady_reporter_has_an_estimate_after_its_first_two_reports(
    client, make_task, clock
):
    """A count every 2 s, of a run that takes 12 s: at a quarter of it, after two reports,
    the estimate is the truth (9 s left), as tqdm's is; a burst of reports says nothing."""
    task = await make_task(title="Export")
    await report(client, task, 0, end=60)
    clock.advance(2)
    await report(client, task, 10, end=60)
    clock.advance(1)
    found = await estimate_of(client, task)
    assert found["basis"] == "rate"
    assert found["rate_per_s"] == pytest.approx(5.0)
    assert found["remaining_s"] == pytest.approx(9.0)
    burst = await make_task(title="Import")
    for current in (0, 5, 9):
        await report(client, burst, current, end=1000)
        clock.advance(us=1000)
    assert (await estimate_of(client, burst))["rate_per_s"] is None
