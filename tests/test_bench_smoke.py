"""The benchmark harness runs end to end in smoke mode, so it cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE_SECONDS = 600  # about 90 s on two calm cores; 160 s beside other work
PARTS = 2  # the run split over processes at once (`--part`): it waits more than it computes


# It checks that every scenario runs and what each row holds, never the figures themselves
# (smoke mode waits for no calm machine: bench.options). So it runs at idle priority beside
# the tests that measure time, on the CPU they leave (about a core and a half of two).
@pytest.mark.background
def test_bench_smoke_writes_every_scenario(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.fail("wrk is not installed (apt-get install wrk): the bench smoke needs it")
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.run",
                "--smoke",
                "--part",
                f"{k}/{PARTS}",
                "--results",
                str(tmp_path / str(k)),
            ],
            cwd=ROOT,
            # Each part's servers on ports of its own (tests/servers.py): blocks 6 and 7.
            # At idle priority, a server's start waits for the CPU as long as the tests
            # beside it keep both cores (a 100,000-row fill: most of a minute).
            env={
                **os.environ,
                "HEADWAY_TEST_PORT_BLOCK": str(5 + k),
                "HEADWAY_BENCH_START_S": "240",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(1, PARTS + 1)
    ]
    for run in runs:
        output = run.communicate(timeout=SMOKE_SECONDS)[0]
        assert run.returncode == 0, output[-6000:]
    results = merged([tmp_path / str(k) / "latest.json" for k in range(1, PARTS + 1)])

    from bench.cost_targets import READS_CREATES
    from bench.options import parse_options, scenario_titles
    from bench.scenarios.badges import BADGES
    from bench.scenarios.estimates import ESTIMATES_TARGET
    from bench.scenarios.jobs import JOBS_TARGET
    from bench.scenarios.live import LIVE_MESSAGES_TARGET
    from bench.scenarios.neighbour import NEIGHBOUR
    from bench.scenarios.outbox import OUTBOX
    from bench.scenarios.space_delete import DELETE
    from bench.targets import BUDGET, BUSY, ISSUE6, LIVE, NOTIFY, SWEEP

    expected = scenario_titles(parse_options(["--smoke"]))
    found = {name: results["scenarios"][name] for name in expected if name in results["scenarios"]}
    assert list(found) == list(expected)
    for row in found.values():
        if row["status"] == "skipped":
            assert row["reason"], row
        else:
            assert row["status"] == "ok", row
    # Each measured row ran its load: a count of answers, never a rate over a window that
    # a busy machine can miss (bench.measure runs a smoke row on until it has answers).
    measured = [row for row in found.values() if row["requests_per_s"] is not None]
    assert all(row["requests"] > 0 for row in measured), [
        row["name"] for row in measured if not row["requests"]
    ]
    assert found["memory"]["extra"]["rss_mb"] > 0
    # RSS against the progress budget, at two counts of tasks filled in-process.
    assert found["memory_budget_large"]["extra"]["counted_mb"] > 0
    assert found["memory_budget_large"]["extra"]["tasks_with_progress"] == 10_000
    assert found["put_report_limited"]["requests"] > 0
    # The flood ran from its own address and was answered; a bystander reported throughout.
    assert sum(found["flood_create"]["extra"]["answers"].values()) > 0
    assert found["flood_create"]["extra"]["answers"]["201"] > 0
    assert (
        found["flood_memory"]["extra"]["peak_rss_mb"]
        >= found["flood_memory"]["extra"]["rss_before_mb"]
    )
    assert found["flood_bystander"]["requests"] > 0
    assert found["flood_bystander"]["p99_ms"] is not None
    # Every connection on one task; the whole big space, with its CPU and RSS growth.
    assert found["put_report_hot"]["requests"] > 0
    assert found["put_report_hot"]["p99_ms"] is not None
    whole = found["get_space_big"]["extra"]
    assert whole["cpu_ms_per_answer"] > 0
    assert whole["peak_rss_mb"] >= whole["rss_before_mb"] > 0
    assert whole["rss_growth_mb"] >= 0
    # On PostgreSQL + Redis (when they ran), the CPU per request of each process.
    for name in ("scale_out_one", "scale_out_two"):
        if found[name]["status"] == "ok":
            per = found[name]["extra"]["cpu_us_per_request_of"]
            assert set(per) == {"headway", "postgresql", "redis"}, per
            # A report that does not finish its task touches no SQL: PostgreSQL may idle.
            # CPU is read in clock ticks (10 ms): a smoke run's few hundred reports may cost
            # Redis less than one.
            assert per["headway"] > 0 and per["redis"] >= 0 and per["postgresql"] >= 0, per
            assert 0 < found[name]["extra"]["machine_busy"] <= 1
    groups: dict[str, set[str]] = {}
    for target in results["targets"]:
        assert target["status"] in ("pass", "fail", "skipped"), target
        if target["status"] != "skipped":
            assert target["measured"] not in ("", "–"), target
        groups.setdefault(target["group"], set()).add(target["name"])
    assert groups == {
        ISSUE6: {
            "put",
            "put_limited",
            "space_page",
            "memory",
            "flood_memory",
            "flood_latency",
            "flood_refusals",
            "scale_out",
        },
        READS_CREATES: {
            "space_small_cpu",
            "space_page_cpu",
            "parent_cpu",
            "space_big_whole",
            "post_rate",
            "put_hot",
            "scale_out_put_cpu",
            "scale_out_cpu",
        },
        LIVE: {"streams_latency", "streams_memory", "streams_put"},
        BADGES: {"badge_cpu"},
        JOBS_TARGET: {"jobs_cpu"},
        ESTIMATES_TARGET: {"estimates_cpu"},
        LIVE_MESSAGES_TARGET: {"live_cpu"},
        BUSY: {
            "busy_lag",
            "busy_lag_growth",
            "busy_streams",
            "busy_lag_scale_out",
            "busy_lag_growth_scale_out",
            "busy_streams_scale_out",
        },
        NOTIFY: {"notified_put_cpu", "stall_latency"},
        SWEEP: {"swept_put"},
        OUTBOX: {
            f"{row}_{check}"
            for row in ("outbox_claim", "outbox_claim_postgres")
            for check in ("flat", "lock", "writes")
        },
        DELETE: {
            f"{row}_{check}"
            for row in ("space_delete", "space_delete_postgres")
            for check in ("answer", "lock", "writes")
        },
        NEIGHBOUR: {"neighbour_success", "neighbour_p99"},
        BUDGET: {"memory_budget", "memory_budget_large"},
    }
    # The hostile neighbour: the well-behaved client measured alone and beside the greedy
    # one, which ran from its own process and was answered.
    for name in ("neighbour_alone", "neighbour_beside_greedy"):
        assert found[name]["requests"] > 0 and found[name]["p99_ms"] > 0, found[name]
    greedy = found["neighbour_beside_greedy"]["extra"]["greedy"]
    assert sum(greedy["reads of the big space"].values()) > 0, greedy
    # The delivery backlog: claims timed at every size, writes beside a worker.
    claimed = found["outbox_claim"]
    assert claimed["status"] == "ok", claimed
    assert set(claimed["extra"]["claim_median_ms"]) == {"10", "1000"}
    assert claimed["p99_ms"] > 0 and claimed["extra"]["writes"]["1000"] > 0
    # A big space's delete: answered, its rows removed while other clients wrote.
    deleted = found["space_delete"]
    assert deleted["status"] == "ok", deleted
    assert deleted["extra"]["removal_transactions"] > 0 and deleted["requests"] > 0
    # Channels and stall looks on the PUT: both servers measured, the channels alive.
    notified = found["put_report_notified"]
    assert found["put_report_plain"]["cpu_us_per_request"] > 0
    assert notified["extra"]["cpu_vs_plain"] > 0
    assert notified["extra"]["check"] == "a failed finish told to 2 of 2 channels"
    assert notified["extra"]["stall_lease_ahead_s"] > 0
    # The sweeper deleted the idle space's tasks (some of them at least) during the load.
    swept = found["put_report_swept"]
    assert swept["extra"]["rps_vs_unswept"] > 0
    assert not swept["extra"]["deleted"].startswith("0 of")
    # A stall takes a minute: its latency runs in the full bench only, and says so.
    assert found["stall_latency"]["status"] == "skipped"
    assert "full bench only" in found["stall_latency"]["reason"]
    # Streams of one space were opened, read, and timed.
    assert found["streams_memory"]["extra"]["kb_per_stream"] > 0
    assert (
        found["streams_latency"]["extra"]["opened"] == found["streams_latency"]["extra"]["streams"]
    )
    assert found["streams_latency"]["p99_ms"] is not None
    # A busy space's streams were read on each instance, every write matched to its event.
    for name in ("busy_embedded", "busy_a", "busy_b"):
        if found[name]["status"] == "ok":
            busy = found[name]["extra"]
            assert busy["opened"] == busy["streams"] == 2, busy
            assert busy["first"]["writes"] > 0 and busy["last"]["writes"] > 0, busy
            assert busy["events"] > 0, busy
    assert found["busy_embedded"]["status"] == "ok"
    assert found["busy_embedded"]["requests"] > 0
    # Only the scale-out targets may be skipped (no PostgreSQL or Redis here), and the
    # stall latency (the full bench only).
    for target in results["targets"]:
        if "scale_out" not in target["name"] and target["name"] != "stall_latency":
            assert target["status"] != "skipped", target
    parts = [(tmp_path / str(k) / "latest.md").read_text() for k in range(1, PARTS + 1)]
    assert all(part.startswith("# Headway benchmark") for part in parts)
    markdown = "\n".join(parts)
    assert f"### Targets: {READS_CREATES}" in markdown
    assert "every connection on one task" in markdown


def merged(paths: list[Path]) -> dict:
    """The parts' results as one: every row by name (the baseline's, measured in each
    part, from the first), and every target, measured where a part could judge it."""
    scenarios: dict[str, dict] = {}
    targets: dict[str, dict] = {}
    for path in paths:
        part = json.loads(path.read_text())
        for row in part["scenarios"]:
            scenarios.setdefault(row["name"], row)
        for target in part["targets"]:
            if target["name"] not in targets or targets[target["name"]]["status"] == "skipped":
                targets[target["name"]] = target
    return {"scenarios": scenarios, "targets": list(targets.values())}


@pytest.mark.parametrize("given", ["abc", "0", "-5", "nan", "1e400"])
def test_a_start_time_that_is_not_seconds_stops_the_bench_with_a_message(given: str) -> None:
    found = subprocess.run(
        [sys.executable, "-c", "import bench.processes"],
        cwd=ROOT,
        env={**os.environ, "HEADWAY_BENCH_START_S": given},
        capture_output=True,
        text=True,
    )
    assert found.returncode == 1
    assert found.stderr.strip() == (
        f"HEADWAY_BENCH_START_S={given!r}: give seconds, above 0, at most 3600"
    )
