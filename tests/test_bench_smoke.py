"""The benchmark harness runs end to end in smoke mode, so it cannot rot unnoticed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_bench_smoke_writes_every_scenario(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.fail("wrk is not installed (apt-get install wrk): the bench smoke needs it")
    run = subprocess.run(
        [sys.executable, "-m", "bench.run", "--smoke", "--results", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    from bench.run import parse_options, scenario_titles

    results = json.loads((tmp_path / "latest.json").read_text())
    found = {row["name"]: row for row in results["scenarios"]}
    expected = scenario_titles(parse_options(["--smoke"]))
    assert list(found) == list(expected)
    for row in found.values():
        if row["status"] == "skipped":
            assert row["reason"], row
        else:
            assert row["status"] == "ok", row
    measured = [row for row in found.values() if row["requests_per_s"] is not None]
    assert all(row["requests_per_s"] > 0 for row in measured)
    assert found["memory"]["extra"]["rss_mb"] > 0
    assert found["put_report_limited"]["requests_per_s"] > 0
    # The flood ran from its own address and was answered; a bystander reported throughout.
    assert sum(found["flood_create"]["extra"]["answers"].values()) > 0
    assert found["flood_create"]["extra"]["answers"]["201"] > 0
    assert (
        found["flood_memory"]["extra"]["peak_rss_mb"]
        >= found["flood_memory"]["extra"]["rss_before_mb"]
    )
    assert found["flood_bystander"]["requests"] > 0
    assert found["flood_bystander"]["p99_ms"] is not None
    assert {t["name"] for t in results["targets"]} == {
        "put",
        "put_limited",
        "space_page",
        "memory",
        "flood_memory",
        "flood_latency",
        "flood_refusals",
        "scale_out",
    }
    assert (tmp_path / "latest.md").read_text().startswith("# Headway benchmark")
