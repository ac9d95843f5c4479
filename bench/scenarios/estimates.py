"""What keeping estimates costs a report: the same PUT on two fresh embedded servers (rate
limits off), one keeping each task's track of reports (the default) and one with
`HEADWAY_ESTIMATES=false`, measured alternately, so that the machine's drift weighs on
both alike; and its target."""

from __future__ import annotations

import asyncio
import statistics

from .. import seed
from ..load import Load
from ..measure import Harness, _num
from ..report import Row, Target
from . import NO_RATE_LIMITS
from .reports import _seed_pool

ESTIMATE_ROWS = ["put_tracked", "put_untracked"]
ESTIMATES_TARGET = "estimates: keeping each task's track costs a report little"
RATIO = 1.05  # a report's CPU with tracks against without, at most


def estimates_cost(bench: Harness) -> None:
    """Both servers at once, each measured `rounds` times, one after the other: each row
    is the median of its runs (all of them in `runs_us`)."""
    rounds = 1 if bench.o.mode == "smoke" else 3
    servers = {}
    try:
        for name in ESTIMATE_ROWS:
            env = dict(NO_RATE_LIMITS)
            if name == "put_untracked":
                env["HEADWAY_ESTIMATES"] = "false"
            servers[name] = bench.start_headway(
                f"headway-{name}", f"sqlite:///{bench.workdir / name}.db", env=env
            )
        bench.say(f"seeding over HTTP: {bench.o.pool:,} pool tasks on each server")
        paths = {
            name: [f"/tasks/{t}" for t in asyncio.run(_seed_pool(server, bench.o.pool))]
            for name, server in servers.items()
        }
        runs: dict[str, list[float]] = {name: [] for name in ESTIMATE_ROWS}
        for _ in range(rounds):
            for name, server in servers.items():
                row = bench.measure(server, name, Load("PUT", paths[name], seed.PUT_BODY))
                if row.cpu_us_per_request:
                    runs[name].append(row.cpu_us_per_request)
    finally:
        for server in servers.values():
            bench.stop(server)
    for name, found in runs.items():
        row = bench.rows[name]
        if found:
            row.cpu_us_per_request = round(statistics.median(found), 1)
            row.extra["runs_us"] = found
    tracked, untracked = bench.rows["put_tracked"], bench.rows["put_untracked"]
    if tracked.cpu_us_per_request and untracked.cpu_us_per_request:
        ratio = tracked.cpu_us_per_request / untracked.cpu_us_per_request
        tracked.extra["vs_untracked"] = round(ratio, 3)
        bench.say(
            f"put_tracked: CPU µs/req {_num(tracked.cpu_us_per_request)} vs "
            f"{_num(untracked.cpu_us_per_request)} without tracks ({ratio:.3f}x, medians)"
        )


def estimates_targets(rows: dict[str, Row]) -> list[Target]:
    """A report keeping its task's track costs at most RATIO times one that does not."""
    description = f"PUT /tasks/{{t}} with estimates on: CPU/req ≤ {RATIO}x of off"
    tracked, untracked = rows.get("put_tracked"), rows.get("put_untracked")
    measured = [row for row in (tracked, untracked) if row is not None and row.status == "ok"]
    if len(measured) < 2 or not all(row.cpu_us_per_request for row in measured):
        why = next((row.reason for row in (tracked, untracked) if row and row.reason), "")
        return [
            Target(
                "estimates_cpu",
                description,
                "skipped",
                "–",
                why or "not measured",
                ESTIMATES_TARGET,
            )
        ]
    assert tracked is not None and untracked is not None
    ratio = (tracked.cpu_us_per_request or 0.0) / (untracked.cpu_us_per_request or 1.0)
    shown = (
        f"{ratio:.3f}x ({_num(tracked.cpu_us_per_request)} vs "
        f"{_num(untracked.cpu_us_per_request)} µs/req)"
    )
    note = f"medians of {len(tracked.extra.get('runs_us', []))} alternate runs each"
    status = "pass" if ratio <= RATIO else "fail"
    return [Target("estimates_cpu", description, status, shown, note, ESTIMATES_TARGET)]
