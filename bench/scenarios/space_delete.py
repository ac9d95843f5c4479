"""A big space's delete: `DELETE /spaces/{s}` of a space of `--big` tasks (100,000 but in
the smoke run; a tenth of them steps, a hundred to a parent) while another client creates
and finishes tasks in a space of its own, on SQLite and on PostgreSQL.

It runs in this process against a fresh database (as `bench.scenarios.outbox` does): the
big space is written straight into the tables, the writes go through the ASGI app, whose
sweeper removes the deleted space's rows in the background (as `headway serve` runs it).
Four writers, each a create then a finish at a time, run for `WINDOW_S` without any
delete, then through the delete until the last row of the space is removed: each write's
seconds, and every write transaction's hold of the write lock (from the moment it holds
it to its commit), are compared between the two windows. Run it alone with
`python -m bench.scenarios.space_delete [--big 100000] [--postgres URL]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..measure import Harness, Skip
from ..options import Options
from ..report import Row, Target

DELETE_ROWS = ["space_delete", "space_delete_postgres"]
DELETE = "Deleting a big space"
WINDOW_S = {"full": 5.0, "quick": 3.0, "smoke": 0.5}
BIG = 100_000  # when run alone (the run's `--big` otherwise)
WRITERS = 4
SWEEPER = "headway-sweeper"  # the name of the app's sweeper task: its transactions
# The targets: the DELETE answers within DELETE_MS; the removal's transactions last at
# most HOLD_P99_MS at p99 (on SQLite, the write lock of the whole database; PostgreSQL's
# aim at 8 ms and lock only the rows they remove); the writers' p99 during the removal
# within WRITES_RATIO times (plus WRITES_SLACK_MS) their p99 without.
DELETE_MS = 50.0
HOLD_P99_MS = {"space_delete": 10.0, "space_delete_postgres": 20.0}
WRITES_RATIO = 2.0
WRITES_SLACK_MS = 5.0


@dataclass
class Window:
    """One window's writes (seconds each), and the write transactions that ended in it:
    (hold seconds, whether the sweeper ran it)."""

    writes: list[float] = field(default_factory=list)
    holds: list[tuple[float, bool]] = field(default_factory=list)
    seconds: float = 0.0

    def held(self, by_sweeper: bool | None = None) -> list[float]:
        return [s for s, swept in self.holds if by_sweeper is None or swept == by_sweeper]


@dataclass
class Figures:
    tasks: int
    fill_s: float = 0.0
    delete_s: float = 0.0
    quiet: Window = field(default_factory=Window)
    deleting: Window = field(default_factory=Window)


def space_delete(bench: Harness) -> None:
    """Both rows: SQLite in the work directory, then a throwaway PostgreSQL."""
    big, window = bench.o.big, WINDOW_S[bench.o.mode]
    database = bench.workdir / "space_delete.db"
    bench.say(f"space delete: a space of {big:,} tasks on SQLite")
    figures = asyncio.run(measure(f"sqlite:///{database}", big, window, bench.say))
    bench.record(_row("space_delete", bench.titles["space_delete"], figures))
    if not bench.o.scale_out:
        raise Skip("--no-scale-out given")
    try:
        from tests.servers import PostgresServer, ServerError
    except ImportError as exc:
        raise Skip(f"tests/servers.py cannot be imported: {exc}") from None
    try:
        postgres = PostgresServer()
        bench.cleanups.append(postgres.destroy)
        postgres.start()
        postgres.create_database()
    except ServerError as exc:
        raise Skip(f"PostgreSQL not available: {exc}") from None
    bench.say(f"space delete: a space of {big:,} tasks on PostgreSQL")
    figures = asyncio.run(measure(postgres.url, big, window, bench.say))
    bench.record(_row("space_delete_postgres", bench.titles["space_delete_postgres"], figures))


async def measure(url: str, big: int, window_s: float, say: Any = print) -> Figures:
    """Fill the big space, run the writers `window_s` without a delete, then delete the
    space and run them until its rows are all removed."""
    from headway.app import create_app
    from headway.config import Settings

    settings = Settings(database_url=url, run_worker=False, rate_limits=False)
    app = create_app(settings)
    figures = Figures(big)
    async with _serving(app) as client:
        space = (await client.post("/spaces", json={"title": "big"})).json()["uuid"]
        other = (await client.post("/spaces", json={"title": "writes"})).json()["uuid"]
        started = time.perf_counter()
        await _fill(app, space, big)
        figures.fill_s = time.perf_counter() - started
        db = app.state.service.db
        current: list[Window] = [figures.quiet]
        write = db.write

        @contextlib.asynccontextmanager
        async def timed() -> AsyncIterator[Any]:
            async with write() as st:
                started = time.perf_counter()
                yield st
            task = asyncio.current_task()
            by_sweeper = task is not None and task.get_name() == SWEEPER
            current[0].holds.append((time.perf_counter() - started, by_sweeper))

        db.write = timed
        stop = asyncio.Event()
        writers = [
            asyncio.create_task(_writer(client, other, current, stop)) for _ in range(WRITERS)
        ]
        try:
            await asyncio.sleep(0.5)  # connections and caches warm; not measured
            figures.quiet.writes.clear()
            figures.quiet.holds.clear()
            await asyncio.sleep(window_s)
            figures.quiet.seconds = window_s
            current[0] = figures.deleting
            started = time.perf_counter()
            answer = await client.delete(f"/spaces/{space}")
            figures.delete_s = time.perf_counter() - started
            if answer.status_code != 204:
                raise RuntimeError(f"the DELETE answered {answer.status_code}")
            # The app's sweeper, woken by the DELETE, removes the rows: until the last is gone.
            while await db.fetch("SELECT 1 FROM spaces WHERE uuid = ?", (space,)):
                await asyncio.sleep(0.01)
            figures.deleting.seconds = time.perf_counter() - started
        finally:
            stop.set()
            await asyncio.gather(*writers)
            db.write = write
        left = await db.fetch("SELECT count(*) FROM tasks WHERE space_uuid = ?", (space,))
        if left[0][0] or await db.fetch("SELECT 1 FROM spaces WHERE uuid = ?", (space,)):
            raise RuntimeError(f"{left[0][0]} tasks of the deleted space are left")
    say(_line(figures))
    return figures


@contextlib.asynccontextmanager
async def _serving(app: Any) -> AsyncIterator[Any]:
    import httpx

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            yield client


async def _fill(app: Any, space: str, count: int) -> None:
    """`count` tasks into the space through the storage layer (as creates write them): a
    tenth of them steps, a hundred to a parent; 10,000 to a transaction."""
    from headway.domain.tasks import TaskRow
    from headway.storage import queries

    service = app.state.service
    steps = count // 10
    parents = max(1, steps // 100)
    top = count - steps
    async with service.db.write() as st:
        claimed = await queries.claim_created_at(st, space, service.clock.now_us(), count, top)
    assert claimed is not None
    at = claimed[0]
    rows = [TaskRow(str(uuid.uuid4()), space, None, "bench", "bench", at + n) for n in range(top)]
    for n in range(steps):
        parent = rows[n % parents].uuid
        rows.append(TaskRow(str(uuid.uuid4()), space, parent, "step", "bench", at + top + n))
    for start in range(0, len(rows), 10_000):
        async with service.db.write() as st:
            await queries.insert_tasks(st, rows[start : start + 10_000])
    held = Counter(row.parent_uuid for row in rows[top:])
    async with service.db.write() as st:
        await queries.count_children(st, {parent: n for parent, n in held.items() if parent})
    if not service.db.is_sqlite:  # as autovacuum does after a bulk load
        async with service.db.write() as st:
            await st.rows("ANALYZE tasks", ())


async def _writer(client: Any, space: str, current: list[Window], stop: asyncio.Event) -> None:
    """Create and finish tasks, one at a time, until `stop`; each write's seconds go to the
    window under way when it ends."""
    while not stop.is_set():
        started = time.perf_counter()
        made = await client.post(f"/spaces/{space}/tasks", json={"title": "w"})
        current[0].writes.append(time.perf_counter() - started)
        started = time.perf_counter()
        done = await client.put(f"/tasks/{made.json()['uuid']}", json={"done": True})
        current[0].writes.append(time.perf_counter() - started)
        if made.status_code != 201 or done.status_code != 200:
            raise RuntimeError(f"a write failed: {made.status_code}, {done.status_code}")


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _line(f: Figures) -> str:
    quiet, deleting = f.quiet, f.deleting
    removal = deleting.held(by_sweeper=True)
    return (
        f"{f.tasks:,} tasks (filled in {f.fill_s:.1f} s): DELETE answered in "
        f"{_ms(f.delete_s)} ms, rows removed in {deleting.seconds:.2f} s by {len(removal)} "
        f"transactions (hold p50 {_ms(_p(removal, 0.5))}, p99 {_ms(_p(removal, 0.99))}, max "
        f"{_ms(max(removal, default=0))} ms); longest write-lock hold "
        f"{_ms(max(deleting.held(), default=0))} ms vs {_ms(max(quiet.held(), default=0))} ms "
        f"without; other writes p99 {_ms(_p(deleting.writes, 0.99))} ms "
        f"({len(deleting.writes)}) vs {_ms(_p(quiet.writes, 0.99))} ms ({len(quiet.writes)}) "
        "without"
    )


def _row(name: str, title: str, f: Figures) -> Row:
    quiet, deleting = f.quiet, f.deleting
    removal = deleting.held(by_sweeper=True)
    row = Row(
        name,
        title,
        requests_per_s=round(len(deleting.writes) / deleting.seconds, 1),
        p50_ms=_ms(statistics.median(deleting.writes)),
        p99_ms=_ms(_p(deleting.writes, 0.99)),
        requests=len(deleting.writes),
        duration_s=round(deleting.seconds, 2),
    )
    row.extra = {
        "tasks": f.tasks,
        "fill_s": round(f.fill_s, 1),
        "delete_ms": _ms(f.delete_s),
        "removal_s": round(deleting.seconds, 2),
        "removal_transactions": len(removal),
        "removal_hold_p50_ms": _ms(_p(removal, 0.5)),
        "removal_hold_p99_ms": _ms(_p(removal, 0.99)),
        "removal_hold_max_ms": _ms(max(removal, default=0)),
        "longest_hold_ms": _ms(max(deleting.held(), default=0)),
        "longest_hold_without_ms": _ms(max(quiet.held(), default=0)),
        "writes_p99_without_ms": _ms(_p(quiet.writes, 0.99)),
        "writes_p50_without_ms": _ms(statistics.median(quiet.writes)),
        "writes_per_s_without": round(len(quiet.writes) / quiet.seconds, 1),
        "note": _line(f),
    }
    return row


def space_delete_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """The DELETE answers at once, the removal holds the lock briefly, and other writers
    barely notice it."""
    found: list[Target] = []
    big = f"{o.big:,}"
    for name, where in (("space_delete", "SQLite"), ("space_delete_postgres", "PostgreSQL")):
        row = rows.get(name)
        checks = [
            (f"{name}_answer", f"{where}: DELETE of a {big}-task space answers ≤ {DELETE_MS:g} ms"),
            (
                f"{name}_lock",
                f"{where}: its removal's transactions last ≤ {HOLD_P99_MS[name]:g} ms at p99",
            ),
            (
                f"{name}_writes",
                f"{where}: other clients' creates and finishes meanwhile, p99 ≤ "
                f"{WRITES_RATIO:g}x (+{WRITES_SLACK_MS:g} ms) their p99 without",
            ),
        ]
        if row is None or row.status != "ok":
            why = row.reason if row is not None else "not measured"
            found += [Target(key, text, "skipped", "–", why, DELETE) for key, text in checks]
            continue
        extra = row.extra
        delete_ms, hold = extra["delete_ms"], extra["removal_hold_p99_ms"]
        writes, without = row.p99_ms or 0.0, extra["writes_p99_without_ms"]
        results = [
            (delete_ms <= DELETE_MS, f"{delete_ms} ms"),
            (
                hold <= HOLD_P99_MS[name],
                f"p99 {hold} ms, max {extra['removal_hold_max_ms']} ms, "
                f"{extra['removal_transactions']} transactions in {extra['removal_s']} s",
            ),
            (
                writes <= WRITES_RATIO * without + WRITES_SLACK_MS,
                f"{writes} vs {without} ms; longest hold {extra['longest_hold_ms']} vs "
                f"{extra['longest_hold_without_ms']} ms",
            ),
        ]
        for (key, text), (passed, measured) in zip(checks, results, strict=True):
            found.append(Target(key, text, "pass" if passed else "fail", measured, "", DELETE))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--big", type=int, default=BIG, help="tasks in the space")
    parser.add_argument("--window", type=float, default=WINDOW_S["full"], help="seconds")
    parser.add_argument("--postgres", help="a PostgreSQL URL (default: a SQLite file)")
    args = parser.parse_args(argv)
    if args.postgres:
        asyncio.run(measure(args.postgres, args.big, args.window))
        return 0
    import tempfile

    with tempfile.TemporaryDirectory(prefix="headway-space-delete-") as tmp:
        asyncio.run(measure(f"sqlite:///{tmp}/space_delete.db", args.big, args.window))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
