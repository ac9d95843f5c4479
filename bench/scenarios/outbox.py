"""The delivery backlog: what claiming due webhook deliveries costs with 10, 100,000 and
1,000,000 of them pending to a dead endpoint (the full run; `--quick` stops at 100,000,
`--smoke` at 1,000), on SQLite and on PostgreSQL, and how long creates and finishes
take meanwhile, beside a worker claiming and retrying them.

It runs in this process against a fresh database: the backlog is written straight into
the tables (as fan-outs leave them), the claims are `storage.deliveries.claim_due` itself
(each of 8 deliveries, every one due again since the last lapsed), and the writes go
through the ASGI app, a worker on its database claiming and retrying meanwhile (as
`headway serve` runs it). Run it alone with
`python -m bench.scenarios.outbox [--sizes 10,100000] [--postgres URL]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import socket
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..measure import Harness, Skip
from ..options import Options
from ..report import Row, Target

OUTBOX_ROWS = ["outbox_claim", "outbox_claim_postgres"]
OUTBOX = "Bounded delivery (issue 22)"
SIZES = {"full": (10, 100_000, 1_000_000), "quick": (10, 100_000), "smoke": (10, 1_000)}
CLAIMS = 40  # claims measured at each size
WARM_UP = 3  # claims before them, not measured (the first opens connections and threads)
CLAIMED = 8  # deliveries per claim
WRITES_S = {"full": 5.0, "quick": 3.0, "smoke": 1.0}  # creates and finishes at each size
# The targets: claiming at the largest backlog within this ratio of claiming at 10 (plus
# a millisecond of timer noise); its write transaction, and creates and finishes, within.
CLAIM_RATIO = 2.0
CLAIM_WRITE_MS = 10.0
WRITES_P99_MS = 50.0
LEASE_US = 61_000_000  # past a claim's lease (60 s): its rows are due again


@dataclass
class Figures:
    """Per backlog size: claims' seconds (all told, and in their write transaction), and
    the seconds of each create or finish made beside a worker."""

    claims: dict[int, list[float]] = field(default_factory=dict)
    held: dict[int, list[float]] = field(default_factory=dict)
    writes: dict[int, list[float]] = field(default_factory=dict)
    fill_s: dict[int, float] = field(default_factory=dict)


def outbox(bench: Harness) -> None:
    """Both rows: SQLite in the work directory, then a throwaway PostgreSQL."""
    sizes, writes_s = SIZES[bench.o.mode], WRITES_S[bench.o.mode]
    database = bench.workdir / "outbox.db"
    bench.say(f"outbox: filling a SQLite backlog to {sizes[-1]:,} pending")
    figures = asyncio.run(measure(f"sqlite:///{database}", sizes, writes_s, bench.say))
    bench.record(_row("outbox_claim", bench.titles["outbox_claim"], figures))
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
    bench.say(f"outbox: filling a PostgreSQL backlog to {sizes[-1]:,} pending")
    figures = asyncio.run(measure(postgres.url, sizes, writes_s, bench.say))
    bench.record(_row("outbox_claim_postgres", bench.titles["outbox_claim_postgres"], figures))


async def measure(url: str, sizes: Sequence[int], writes_s: float, say: Any = print) -> Figures:
    """Fill the backlog of one dead webhook to each size in turn; at each, time the claims,
    then creates and finishes beside the app's own worker."""
    from headway.app import create_app
    from headway.config import Settings
    from headway.storage.database import Database

    settings = Settings(
        database_url=url,
        run_worker=False,  # started for the writes only: the claims are timed alone
        webhook_allow_private=True,
        rate_limits=False,
        # Every event kept: the cap would give the backlog up down to 10,000.
        outbox_per_endpoint=10 * sizes[-1],
    )
    app = create_app(settings)
    figures = Figures()
    async with _serving(app) as client:
        space = (await client.post("/spaces", json={"title": "outbox"})).json()["uuid"]
        answer = await client.post(f"/spaces/{space}/webhooks", json={"url": _dead_url()})
        webhook = answer.json()["uuid"]
        db = Database(url)
        try:
            pending, virtual_now = 0, time.time_ns() // 1000
            for size in sizes:
                started = time.perf_counter()
                await _fill(db, space, webhook, size - pending, pending, virtual_now)
                figures.fill_s[size] = time.perf_counter() - started
                pending = size
                virtual_now = await _claims(db, virtual_now, size, figures)
                figures.writes[size] = await _writes(app, client, space, writes_s)
                say(_line(size, figures))
        finally:
            await db.close()
    return figures


@contextlib.asynccontextmanager
async def _serving(app: Any) -> AsyncIterator[Any]:
    import httpx

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            yield client


def _dead_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: every attempt is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/dead"


async def _fill(db: Any, space: str, webhook: str, count: int, first: int, now_us: int) -> None:
    """`count` more undelivered events for `webhook`, numbered from `first`, created and
    due now, written in batches (as fan-outs leave them), counted in the webhook."""
    series = (
        "WITH RECURSIVE n(i) AS (SELECT CAST(? AS BIGINT) UNION ALL SELECT i + 1 FROM n "
        "WHERE i < ?) "
    )
    ids = "CAST('bench_' AS VARCHAR(16)) || CAST(i AS VARCHAR(16))"
    task = str(uuid.uuid4())
    for start in range(first, first + count, 100_000):
        end = min(start + 100_000, first + count) - 1
        async with db.write() as st:
            await st.rows(
                f"{series}INSERT INTO outbox (id, space_uuid, task_uuid, type, payload, "
                f"created_at_us, webhooks) SELECT {ids}, CAST(? AS VARCHAR(36)), "
                "CAST(? AS VARCHAR(36)), 'task.completed', '{}', CAST(? AS BIGINT), 1 FROM n",
                (start, end, space, task, now_us),
            )
            await st.rows(
                f"{series}INSERT INTO deliveries (event_id, webhook_uuid, attempts, "
                f"next_attempt_at_us, created_at_us) SELECT {ids}, CAST(? AS VARCHAR(36)), 0, "
                "CAST(? AS BIGINT), CAST(? AS BIGINT) FROM n",
                (start, end, webhook, now_us, now_us),
            )
            await st.rows(
                "UPDATE webhooks SET undelivered = undelivered + ?, next_due_at_us = ? "
                "WHERE uuid = ?",
                (end - start + 1, now_us, webhook),
            )
    if not db.is_sqlite:  # as autovacuum does after a bulk load
        async with db.write() as st:
            await st.rows("ANALYZE outbox, deliveries, webhooks", ())


async def _claims(db: Any, now_us: int, size: int, figures: Figures) -> int:
    """Time CLAIMS claims at `size` pending; the virtual time reached (each claim comes a
    lease later, so that what the last claimed is due again)."""
    from headway.storage import deliveries

    took, held = [], []
    write = db.write

    @contextlib.asynccontextmanager
    async def timed() -> AsyncIterator[Any]:
        async with write() as st:
            started = time.perf_counter()
            yield st
        held.append(time.perf_counter() - started)

    db.write = timed
    gc.collect()  # the start's garbage, collected now rather than inside a timed claim
    try:
        for _ in range(WARM_UP):
            now_us += LEASE_US
            await deliveries.claim_due(
                db, now_us, now_us + LEASE_US, CLAIMED, per_space=64, per_receiver=64
            )
        took.clear()
        held.clear()
        for _ in range(CLAIMS):
            now_us += LEASE_US
            started = time.perf_counter()
            found = await deliveries.claim_due(
                db, now_us, now_us + LEASE_US, CLAIMED, per_space=64, per_receiver=64
            )
            took.append(time.perf_counter() - started)
            if len(found.claims) != min(CLAIMED, size):
                raise RuntimeError(f"a claim at {size:,} pending won {len(found.claims)}")
    finally:
        db.write = write
    figures.claims[size], figures.held[size] = took, held
    return now_us


async def _writes(app: Any, client: Any, space: str, seconds: float) -> list[float]:
    """Create and finish tasks in the backlog's space for `seconds` (each finish queues
    one more event for the dead webhook), while a worker on the app's database claims
    and retries (as `headway serve` runs it)."""
    from headway.delivery.worker import Worker
    from headway.domain.clock import SystemClock

    worker = Worker(
        app.state.service.db, SystemClock(), allow_private=True, woken=app.state.events_queued
    )
    running = asyncio.create_task(worker.run())
    try:
        return await _create_and_finish(client, space, seconds)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await worker.close()


async def _create_and_finish(client: Any, space: str, seconds: float) -> list[float]:
    took: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        made = await client.post(f"/spaces/{space}/tasks", json={})
        took.append(time.perf_counter() - started)
        started = time.perf_counter()
        done = await client.put(f"/tasks/{made.json()['uuid']}", json={"done": True})
        took.append(time.perf_counter() - started)
        if made.status_code != 201 or done.status_code != 200:
            raise RuntimeError(f"a write failed: {made.status_code}, {done.status_code}")
    return took


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _line(size: int, f: Figures) -> str:
    return (
        f"{size:,} pending (filled in {f.fill_s[size]:.1f} s): claim of {CLAIMED} median "
        f"{_ms(statistics.median(f.claims[size]))} ms, p99 {_ms(_p(f.claims[size], 0.99))} ms; "
        f"its write transaction p99 {_ms(_p(f.held[size], 0.99))} ms; "
        f"{len(f.writes[size])} creates and finishes p99 {_ms(_p(f.writes[size], 0.99))} ms"
    )


def _row(name: str, title: str, f: Figures) -> Row:
    sizes = sorted(f.claims)
    smallest, largest = sizes[0], sizes[-1]
    median = {n: statistics.median(f.claims[n]) for n in sizes}
    ratio = median[largest] / median[smallest]
    row = Row(name, title)
    row.p50_ms = _ms(statistics.median(f.writes[largest]))
    row.p99_ms = _ms(_p(f.writes[largest], 0.99))
    row.extra = {
        "pending": sizes,
        "claim_median_ms": {str(n): _ms(median[n]) for n in sizes},
        "claim_p99_ms": {str(n): _ms(_p(f.claims[n], 0.99)) for n in sizes},
        "claim_write_p99_ms": {str(n): _ms(_p(f.held[n], 0.99)) for n in sizes},
        "writes_p99_ms": {str(n): _ms(_p(f.writes[n], 0.99)) for n in sizes},
        "writes": {str(n): len(f.writes[n]) for n in sizes},
        "fill_s": {str(n): round(f.fill_s[n], 1) for n in sizes},
        "claim_ratio": round(ratio, 2),
        "note": (
            f"claim of {CLAIMED}: "
            + " / ".join(f"{_ms(median[n])}" for n in sizes)
            + f" ms at {' / '.join(f'{n:,}' for n in sizes)} pending ({ratio:.2f}x); "
            f"write transaction p99 ≤ {max(_ms(_p(f.held[n], 0.99)) for n in sizes)} ms; "
            f"creates and finishes p99 {_ms(_p(f.writes[largest], 0.99))} ms at {largest:,}"
        ),
    }
    return row


def outbox_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """Claiming is flat in the backlog, holds the write lock briefly, and writes stay fast."""
    found: list[Target] = []
    largest = f"{SIZES[o.mode][-1]:,}"
    for name, where in (("outbox_claim", "SQLite"), ("outbox_claim_postgres", "PostgreSQL")):
        row = rows.get(name)
        checks = [
            (
                f"{name}_flat",
                f"{where}: claiming with {largest} pending ≤ {CLAIM_RATIO:g}x (+1 ms) the "
                "cost with 10",
            ),
            (
                f"{name}_lock",
                f"{where}: a claim's write transaction p99 ≤ {CLAIM_WRITE_MS:g} ms",
            ),
            (
                f"{name}_writes",
                f"{where}: creates and finishes beside a worker and {largest} pending, "
                f"p99 < {WRITES_P99_MS:g} ms",
            ),
        ]
        if row is None or row.status != "ok":
            why = row.reason if row is not None else "not measured"
            found += [Target(key, text, "skipped", "–", why, OUTBOX) for key, text in checks]
            continue
        claims = row.extra["claim_median_ms"]
        small, big = claims[min(claims, key=int)], claims[max(claims, key=int)]
        lock = max(row.extra["claim_write_p99_ms"].values())
        writes = row.p99_ms or 0.0
        results = [
            (big <= CLAIM_RATIO * small + 1.0, f"{small} → {big} ms ({row.extra['claim_ratio']}x)"),
            (lock <= CLAIM_WRITE_MS, f"{lock} ms"),
            (writes < WRITES_P99_MS, f"{writes} ms"),
        ]
        for (key, text), (passed, measured) in zip(checks, results, strict=True):
            found.append(Target(key, text, "pass" if passed else "fail", measured, "", OUTBOX))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="10,100000,1000000", help="backlog sizes, ascending")
    parser.add_argument("--writes-seconds", type=float, default=3.0)
    parser.add_argument("--postgres", help="a PostgreSQL URL (default: a SQLite file)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",")]
    if args.postgres:
        url = args.postgres
        asyncio.run(measure(url, sizes, args.writes_seconds))
        return 0
    import tempfile

    with tempfile.TemporaryDirectory(prefix="headway-outbox-") as tmp:
        asyncio.run(measure(f"sqlite:///{tmp}/outbox.db", sizes, args.writes_seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
