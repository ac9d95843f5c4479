"""The budget's scenario: what a process's memory holds against what the live-progress
budget counts, at 100,000 and at 1,000,000 tasks with progress (`--smoke`: 1,000 and
10,000), filled in a process of its own (`python -m bench.budget`), its RSS at start the
baseline measured in the same run. What it shows: RSS grows by what the budget counts,
plus caches bounded whatever the number of tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .. import budget as filling
from ..measure import Harness
from ..processes import ROOT
from ..report import MB, Row

BUDGET_ROWS = ["memory_budget", "memory_budget_large"]
# The fill's budget: room for 1,000,000 tasks' progress, one client allowed all of it.
FILL_BUDGET = 1024**3
DEADLINE_S = 300.0


def counts(smoke: bool) -> list[int]:
    return [1_000, 10_000] if smoke else [100_000, 1_000_000]


def budget(bench: Harness) -> None:
    """Both rows from one fill: its RSS, its counted progress and its caches at each
    count."""
    wanted = counts(bench.o.mode == "smoke")
    params = {"counts": wanted, "budget": FILL_BUDGET, "deadline_s": DEADLINE_S}
    code = [str(bench.code)] if bench.code else []
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")},
        "PYTHONPATH": os.pathsep.join([*code, str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    bench.say(f"memory_budget: filling {wanted[-1]:,} tasks' progress in a process of its own")
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.budget", str(bench.workdir), json.dumps(params)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = process.communicate(timeout=DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        process.kill()  # our own child, by its PID
        process.communicate()
        raise RuntimeError(f"the fill did not end within {DEADLINE_S + 60:.0f} s") from None
    found = None
    for line in stdout.decode(errors="replace").splitlines():
        if line.startswith(filling.MARKER):
            found = json.loads(line[len(filling.MARKER) :])
    if found is None:
        tail = (stderr or stdout).decode(errors="replace").strip()[-800:]
        raise RuntimeError(f"the fill exited {process.returncode}: {tail}")
    for name, step in zip(BUDGET_ROWS, found["steps"], strict=True):
        bench.record(_row(bench, name, step, found))


def _row(bench: Harness, name: str, step: dict[str, int], found: dict[str, int]) -> Row:
    growth, counted, caches = step["rss_growth_bytes"], step["counted_bytes"], step["cache_bytes"]
    tasks = step["tasks"]
    return Row(
        name,
        bench.titles[name],
        requests=tasks,
        extra={
            "tasks_with_progress": tasks,
            "rss_at_start_mb": round(found["rss_at_start_bytes"] / MB, 1),
            "rss_mb": round(step["rss_bytes"] / MB, 1),
            "rss_growth_mb": round(growth / MB, 1),
            "counted_mb": round(counted / MB, 1),
            "caches_mb": round(caches / MB, 1),
            "budget_mb": round(found["budget_bytes"] / MB, 1),
            "rss_per_task_bytes": round(growth / tasks),
            "counted_per_task_bytes": round(counted / tasks),
            "growth_over_counted": round(growth / counted, 3),
            "unexplained_mb": round((growth - counted - caches) / MB, 1),
            "fill_s": step["fill_s"],
            "note": (
                f"RSS +{growth / MB:,.1f} MB with {tasks:,} tasks' progress; the budget counts "
                f"{counted / MB:,.1f} MB of its {found['budget_bytes'] / MB:,.0f} MB, task caches "
                f"hold {caches / MB:,.1f} MB ({growth / counted:.2f}x counted; "
                f"{growth / tasks:,.0f} vs {counted / tasks:,.0f} B/task)"
            ),
        },
    )
