"""Run Headway's benchmarks: `python -m bench.run [--quick | --smoke] [options]`.

Starts a bare-ASGI baseline and real `headway serve` processes on 127.0.0.1, seeds
them over HTTP, drives every scenario with wrk for a bounded time, floods a server left
at its defaults from 127.0.0.2 while a well-behaved client reports from 127.0.0.1
(bench/flood.py), writes to one busy space at a fixed rate while its live streams are read
(bench/busy.py), times stalls told to a channel's receiver (bench/receiver.py), prints a
table with each scenario's ratio to the baseline measured in the same run and the
targets (issue 6's and the abuse limits'; the issue "Reads and creates at the cost they
must have"'s; the live stream's, the busy space's and the notification channels'), and
writes `latest.json` and `latest.md` into the results directory.
Every process the run starts is stopped by its PID before it returns.

This module runs the phases in order; the scenarios are in bench/scenarios/ (a module
per family), the shared measuring in bench/measure.py, the options in bench/options.py,
the targets in bench/targets.py and bench/cost_targets.py. With `--compare DIR`, every
phase that runs Headway runs from DIR's code and from this checkout's, alternately, and
the run reports the CPU per request of each instead (bench/compare.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import profile, report
from .compare import Phase, compare
from .cost_targets import reads_creates_targets
from .load import Load, wrk_binary
from .measure import Harness
from .options import Options, parse_options
from .processes import start_baseline
from .report import Row, Target
from .scenarios import budget, busy, channels, embedded, reads, reports, scale_out, sweep
from .scenarios.badges import BADGE_ROWS, badge_targets, badges
from .scenarios.budget import BUDGET_ROWS
from .scenarios.busy import BUSY_ROWS
from .scenarios.channels import CHANNEL_ROWS
from .scenarios.estimates import ESTIMATE_ROWS, estimates_cost, estimates_targets
from .scenarios.flood import FLOOD_ROWS, flood
from .scenarios.jobs import JOBS_ROWS, jobs, jobs_targets
from .scenarios.live import LIVE_ROWS, live_cost, live_targets
from .scenarios.neighbour import NEIGHBOUR_ROWS, neighbour, neighbour_targets
from .scenarios.outbox import OUTBOX_ROWS, outbox, outbox_targets
from .scenarios.space_delete import DELETE_ROWS, space_delete, space_delete_targets
from .scenarios.streams import STREAM_ROWS, streams
from .scenarios.sweep import SWEEP_ROWS
from .targets import (
    budget_targets,
    busy_targets,
    issue6_targets,
    notify_targets,
    streams_targets,
    sweep_targets,
)

# The phases that run only the bare baseline, or measure no CPU per request (a stall's
# latency): --compare leaves them out.
BARE = {
    "baseline",
    "baseline_parent",
    "baseline_put",
    "stall_latency",
    *OUTBOX_ROWS,
    *DELETE_ROWS,
    *NEIGHBOUR_ROWS,
    *BUDGET_ROWS,
}


def phases(bench: Harness) -> list[Phase]:
    """The run's phases in order: the rows each one measures, and the function that does."""
    others = [
        "baseline",
        "baseline_parent",
        "baseline_put",
        "put_report_limited",
        "get_task_limited",
        *CHANNEL_ROWS,
        *SWEEP_ROWS,
        "stall_latency",
        *BUDGET_ROWS,
        *OUTBOX_ROWS,
        *DELETE_ROWS,
        *NEIGHBOUR_ROWS,
        *FLOOD_ROWS,
        *STREAM_ROWS,
        *BADGE_ROWS,
        *JOBS_ROWS,
        *ESTIMATE_ROWS,
        *LIVE_ROWS,
        *BUSY_ROWS,
        "scale_out_one",
        "scale_out_two",
    ]
    on_embedded = [n for n in bench.titles if n not in others]
    return [
        (["baseline"], baseline),
        (on_embedded, embedded.embedded),
        (["baseline_parent"], reads.baseline_parent),
        # Beside the embedded phase in a run split in two (`--part`): judged against it.
        (["put_report_limited", "get_task_limited"], reports.limited),
        (["baseline_put"], reports.baseline_put),
        (CHANNEL_ROWS, channels.notified),
        (SWEEP_ROWS, sweep.swept),
        (["stall_latency"], channels.stall_latency),
        (BUDGET_ROWS, budget.budget),
        (OUTBOX_ROWS, outbox),
        (DELETE_ROWS, space_delete),
        (NEIGHBOUR_ROWS, neighbour),
        (FLOOD_ROWS, flood),
        (STREAM_ROWS, streams),
        (BADGE_ROWS, badges),
        (JOBS_ROWS, jobs),
        (ESTIMATE_ROWS, estimates_cost),
        (LIVE_ROWS, live_cost),
        (["busy_embedded"], busy.embedded),
        (["busy_a", "busy_b"], busy.scale_out_busy),
        (["scale_out_one", "scale_out_two"], scale_out.scale_out),
    ]


def run(bench: Harness) -> list[str]:
    """Every phase of the run (of its part, with `--part`); the rows it measured."""
    wrk_binary()  # no wrk, no run: fail before starting anything
    ran = []
    for names, measure in chosen(bench):
        ran += names
        with bench.phase(names):
            measure(bench)
    return ran


def chosen(bench: Harness) -> list[Phase]:
    """The phases of this run: all of them, or those of its `--part` (the baseline in
    every part: most rows are judged against it)."""
    found = phases(bench)
    if bench.o.part is None:
        return found
    k, n = bench.o.part
    return found[:1] + found[1:][k - 1 :: n]


def baseline(bench: Harness) -> None:
    server = bench.start(start_baseline, bench.workdir)
    try:
        bench.measure(server, "baseline", Load("GET", ["/"]))
    finally:
        bench.stop(server)


def targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """Every target, in table order: issue 6's, the reads and creates', the live stream's,
    the busy space's, the notification channels', the sweeper's, the badges', the jobs'."""
    return (
        issue6_targets(rows, o)
        + reads_creates_targets(rows, o)
        + streams_targets(rows)
        + busy_targets(rows, o)
        + notify_targets(rows, o)
        + sweep_targets(rows, o)
        + outbox_targets(rows, o)
        + space_delete_targets(rows, o)
        + neighbour_targets(rows, o)
        + badge_targets(rows)
        + jobs_targets(rows)
        + estimates_targets(rows)
        + live_targets(rows)
        + budget_targets(rows)
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    load_at_start = os.getloadavg()
    machine = report.machine()  # before the run: the commit measured, not a later one
    with tempfile.TemporaryDirectory(prefix="headway-bench-") as tmp:
        bench = Harness(options, Path(tmp))
        bench.say(f"headway bench, mode {options.mode}; work directory {tmp}")
        if load_at_start[0] > (os.cpu_count() or 1) / 2:
            bench.say(
                f"warning: load average {load_at_start[0]:.1f} on {os.cpu_count()} CPUs: "
                "other work is running, so figures will be low and noisy"
            )
        if options.compare is not None:
            if unknown := options.only - set(bench.titles):
                print(f"--only: no such scenario: {', '.join(sorted(unknown))}", file=sys.stderr)
                return 2
            chosen = [
                phase
                for phase in phases(bench)
                if not set(phase[0]) <= BARE and (not options.only or options.only & set(phase[0]))
            ]
            return compare(bench, chosen)
        try:
            ran = run(bench)
        finally:
            bench.stop_everything()
        rows = [
            bench.rows.get(name) or Row(name, title, "error", "not run")
            for name, title in bench.titles.items()
            if name in ran
        ]
        found = targets(bench.rows, options)
        record = run_record(bench, started_at, load_at_start, machine)
        if bench.profiles:
            record["profiles"] = bench.profiles
            text = "".join(profile.render(n, s) for n, s in bench.profiles.items())
            options.results.mkdir(parents=True, exist_ok=True)
            (options.results / "profile.txt").write_text(text)
        report.write(options.results, record, rows, found)
    print()
    print(report.table(rows))
    print()
    print("\n".join(report.targets_sections(found)).rstrip())
    print(f"\nwritten: {options.results / 'latest.json'}, {options.results / 'latest.md'}")
    return 1 if any(row.status == "error" for row in rows) else 0


def run_record(
    bench: Harness,
    started_at: str,
    load_at_start: tuple[float, float, float],
    machine: dict[str, Any],
) -> dict[str, Any]:
    """What `latest.json` says of the run itself: when, its options, the machine."""
    options = bench.o
    return {
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
            "busy": options.busy,
            "busy_seconds": options.busy_s,
        },
        "machine": machine,
        # Other work on the machine skews everything; the run records how much there was.
        "load_average": {
            "at_start": [round(x, 2) for x in load_at_start],
            "at_end": [round(x, 2) for x in os.getloadavg()],
        },
    }


if __name__ == "__main__":
    sys.exit(main())
