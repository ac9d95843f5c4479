"""`python -m bench.run --compare DIR --paired`: old code against new, both servers at once.

`--compare` alone runs a phase with one side's servers, then with the other's: a sitting's
drift between two runs moves a ratio of medians by ±10 % on these 2-core machines. Here
the old and the new `headway serve` (embedded default, rate limits off) run side by side,
seeded alike, and are measured in short wrk slices, old and new in turn, the order swapped
each round, so that the drift weighs on both alike. Three loads, the hot path's:

- `pair_put_hot`: a report to a task the server already holds (put_report_hot's load);
- `pair_get_task`: a read of one (get_task's);
- `pair_put_first`: a first report to a task the server has not seen yet, its row read
  from the database (the `memory` row's load): each slice reports to tasks of its own.

Each row is a side's CPU µs per request in each round; `compare.py` takes the medians and
their ratio, and writes them as it does for phases. `--rounds` slices of each load a side
(at least 3), `--duration` seconds each (at least 1).
"""

from __future__ import annotations

import asyncio
import time

import httpx

from . import seed
from .load import Load, run_wrk
from .measure import Harness
from .processes import ServerProcess
from .report import Row
from .scenarios import NO_RATE_LIMITS

PAIRED = {
    "pair_put_hot": "paired: PUT /tasks/{t} to a task the server holds",
    "pair_get_task": "paired: GET /tasks/{t}",
    "pair_put_first": "paired: PUT /tasks/{t}, the first report to a task not yet seen",
}
SIDES = ("old", "new")
# Unseen tasks written for each slice of first reports, per second of it: more than the
# server answers in that time on these machines (a slice that runs out reports again to
# tasks it already reached, which the row's note counts).
FIRST_PER_S = 8_000


def measure_pairs(bench: Harness) -> dict[str, dict[str, list[Row]]]:
    """Each load's rows by side, one per round; every server stopped afterwards."""
    o = bench.o
    assert o.compare is not None
    rounds, seconds = max(3, o.rounds), max(1.0, o.duration)
    chunk = round(FIRST_PER_S * seconds)
    servers: dict[str, ServerProcess] = {}
    pools: dict[str, list[str]] = {}
    unseen: dict[str, list[str]] = {}
    try:
        for side, code in zip(SIDES, (o.compare, None), strict=True):
            bench.code = code
            database = bench.workdir / f"{side}.db"
            servers[side] = bench.start_headway(
                f"headway-{side}", f"sqlite:///{database}", env=NO_RATE_LIMITS
            )
            pools[side], space = asyncio.run(_seed(servers[side], o.pool))
            big = seed.insert_tasks_directly(
                str(database), space, rounds * chunk, time.time_ns() // 1000 - 1_000_000
            )
            unseen[side] = [f"/tasks/{t}" for t in big.tasks]
        bench.code = None
        bench.say(
            f"paired: {o.pool:,} pool tasks and {rounds * chunk:,} unseen ones on each side; "
            f"{rounds} rounds of {seconds:g} s slices"
        )
        runs: dict[str, dict[str, list[Row]]] = {name: {s: [] for s in SIDES} for name in PAIRED}
        for round_ in range(rounds):
            order = SIDES if round_ % 2 == 0 else SIDES[::-1]
            for name in PAIRED:
                for side in order:
                    if name == "pair_put_first":
                        paths = unseen[side][round_ * chunk : (round_ + 1) * chunk]
                        load = Load("PUT", paths, seed.PUT_BODY)
                    elif name == "pair_put_hot":
                        load = Load("PUT", pools[side], seed.PUT_BODY)
                    else:
                        load = Load("GET", pools[side])
                    runs[name][side].append(_slice(bench, servers[side], name, load, seconds))
            bench.say(
                f"paired round {round_ + 1}: "
                + ", ".join(
                    f"{name} {runs[name]['old'][-1].cpu_us_per_request} / "
                    f"{runs[name]['new'][-1].cpu_us_per_request}"
                    for name in PAIRED
                )
            )
        return runs
    finally:
        bench.code = None
        bench.stop_everything()


async def _seed(server: ServerProcess, pool: int) -> tuple[list[str], str]:
    """The pool's task paths and the uuid of the space for unseen tasks."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        tasks = await seed.pool(client, pool)
        space = await seed.create_space(client, "unseen")
    return [f"/tasks/{t}" for t in tasks], space


def _slice(bench: Harness, server: ServerProcess, name: str, load: Load, seconds: float) -> Row:
    """One slice of `load` on `server`: its figures and the server's CPU per request."""
    o = bench.o
    before = server.cpu_seconds()
    result = run_wrk(
        server.url,
        load,
        duration=seconds,
        connections=o.connections,
        threads=o.threads,
        workdir=bench.workdir,
    )
    row = Row.measured(name, PAIRED[name], result, server.cpu_seconds() - before)
    if result.error_count:
        row.status, row.reason = "error", f"failed requests: {result.errors}"
    if name == "pair_put_first" and result.requests > len(load.paths):
        row.extra["repeated"] = result.requests - len(load.paths)
    return row
