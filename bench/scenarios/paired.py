"""The same PUT on two fresh embedded servers (rate limits off) that differ in one thing,
measured alternately, so that the machine's drift weighs on both alike: what that one
thing costs a report, as a ratio of medians, and its target."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Mapping

from .. import seed
from ..load import Load
from ..measure import Harness, _num
from ..processes import ServerProcess
from ..report import Row, Target
from . import NO_RATE_LIMITS
from .reports import _seed_pool

# Seeds a server's pool of tasks; the paths the PUTs go to.
Prepare = Callable[[ServerProcess, list[str]], None]


def paired(
    bench: Harness,
    names: tuple[str, str],
    envs: Mapping[str, Mapping[str, str]],
    prepare: Mapping[str, Prepare] | None = None,
    after: Callable[[dict[str, ServerProcess], dict[str, list[str]]], None] | None = None,
) -> None:
    """Both servers of `names` at once, each with its `envs`, seeded with the pool (then
    `prepare`d, if it says how), measured `rounds` times one after the other: each row is
    the median of its runs (all of them in `runs_us`), the first's ratio to the second's
    in `vs_<second>`. `after(servers, paths)` runs before the servers stop."""
    rounds = 1 if bench.o.mode == "smoke" else 3
    servers: dict[str, ServerProcess] = {}
    try:
        for name in names:
            servers[name] = bench.start_headway(
                f"headway-{name}",
                f"sqlite:///{bench.workdir / name}.db",
                env={**NO_RATE_LIMITS, **envs.get(name, {})},
            )
        bench.say(f"seeding over HTTP: {bench.o.pool:,} pool tasks on each server")
        paths: dict[str, list[str]] = {}
        for name, server in servers.items():
            tasks = asyncio.run(_seed_pool(server, bench.o.pool))
            if prepare and name in prepare:
                prepare[name](server, tasks)
            paths[name] = [f"/tasks/{t}" for t in tasks]
        runs: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(rounds):
            for name, server in servers.items():
                row = bench.measure(server, name, Load("PUT", paths[name], seed.PUT_BODY))
                if row.cpu_us_per_request:
                    runs[name].append(row.cpu_us_per_request)
        if after is not None:
            after(servers, paths)
    finally:
        for server in servers.values():
            bench.stop(server)
    for name, found in runs.items():
        row = bench.rows[name]
        if found:
            row.cpu_us_per_request = round(statistics.median(found), 1)
            row.extra["runs_us"] = found
    first, second = (bench.rows[name] for name in names)
    if first.cpu_us_per_request and second.cpu_us_per_request:
        ratio = first.cpu_us_per_request / second.cpu_us_per_request
        first.extra[f"vs_{names[1]}"] = round(ratio, 3)
        bench.say(
            f"{names[0]}: CPU µs/req {_num(first.cpu_us_per_request)} vs "
            f"{_num(second.cpu_us_per_request)} {names[1]} ({ratio:.3f}x, medians)"
        )


def paired_target(
    rows: dict[str, Row],
    names: tuple[str, str],
    *,
    target: str,
    description: str,
    group: str,
    most: float,
) -> Target:
    """The first row's CPU per request at most `most` times the second's."""
    first, second = rows.get(names[0]), rows.get(names[1])
    measured = [row for row in (first, second) if row is not None and row.status == "ok"]
    if len(measured) < 2 or not all(row.cpu_us_per_request for row in measured):
        why = next((row.reason for row in (first, second) if row and row.reason), "")
        return Target(target, description, "skipped", "–", why or "not measured", group)
    assert first is not None and second is not None
    ratio = (first.cpu_us_per_request or 0.0) / (second.cpu_us_per_request or 1.0)
    shown = (
        f"{ratio:.3f}x ({_num(first.cpu_us_per_request)} vs "
        f"{_num(second.cpu_us_per_request)} µs/req)"
    )
    note = f"medians of {len(first.extra.get('runs_us', []))} alternate runs each"
    return Target(target, description, "pass" if ratio <= most else "fail", shown, note, group)
