"""Shared fixtures: a real app on a real database, driven over HTTP (ASGI transport)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis
from redis import Redis as SyncRedis
from starlette.applications import Starlette

from headway.api.visitor import Visitors
from headway.app import create_app
from headway.config import Settings
from headway.domain.clock import ManualClock
from headway.storage.database import Database

from .live_server import LiveServer
from .receiver import Receiver
from .receivers import (  # noqa: F401 (fixtures: channels' receivers)
    form_receiver,
    gotify_receiver,
    json_receiver,
    ntfy_receiver,
    smtp_receiver,
    xml_receiver,
)
from .servers import Pooler, PostgresServer, RedisServer, postgres_and_redis

# A shell without job control starts a background command (`scripts/test &`) with SIGINT
# and SIGQUIT ignored, and every process the tests start would inherit that: a command's
# Ctrl-C would then do nothing. The tests' commands get them as a terminal gives them.
for _number in (signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_number) == signal.SIG_IGN:
        signal.signal(
            _number, signal.default_int_handler if _number == signal.SIGINT else signal.SIG_DFL
        )


# Seconds each of the slowest tests took, setup and teardown included, in a run of
# scripts/test (four processes on two cores, on a busy machine): tests/durations.json.
# Only their order matters, so the file needs no update but when a test becomes one of
# the slowest.
DURATIONS: dict[str, float] = json.loads(Path(__file__).with_name("durations.json").read_text())
TYPICAL_SECONDS = 1.0  # a test the file does not name
SLOW_SECONDS = 5.0  # a test, or the tests of a module sharing a fixture, as long as this


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` deselected theirs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's work stealing, each process is handed a contiguous share of the
    collection (in order: the first quarter to the first of four), runs it from its start,
    and the others take what is left at its end. So each share starts with slow tests,
    the slowest spread evenly over the shares, and ends with quick ones: no slow test is
    left to start last and run alone. The tests of a module that share a fixture of the
    module (a wheel, a browser, servers) stay together, to build it once."""
    # The image tests last of all: their containers' removal (disk work) right before a
    # test that times PostgreSQL's commits would be measured with it.
    items.sort(key=lambda item: item.nodeid.startswith("tests/test_image.py"))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 2:
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        shared = info is not None and any(
            definitions[-1].scope in ("module", "class", "package")
            for definitions in info.name2fixturedefs.values()
            if definitions
        )
        units.setdefault(item.nodeid.split("::")[0] if shared else item.nodeid, []).append(item)

    def cost(unit: list[pytest.Item]) -> float:
        return sum(DURATIONS.get(item.nodeid, TYPICAL_SECONDS) for item in unit)

    slow = sorted((unit for unit in units.values() if cost(unit) >= SLOW_SECONDS), key=cost)
    quick = [item for unit in units.values() if cost(unit) < SLOW_SECONDS for item in unit]
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    seconds = [0.0] * workers
    for unit in reversed(slow):  # the slowest first, each to the share with least so far
        share = min(range(workers), key=seconds.__getitem__)
        shares[share].extend(unit)
        seconds[share] += cost(unit)
    left = len(items)  # xdist's split: each process in turn, an equal part of what is left
    for number, share in enumerate(shares):
        size = left // (workers - number)
        left -= size
        take = max(0, size - len(share))
        share.extend(quick[:take])
        del quick[:take]
    items[:] = [item for share in shares for item in share] + quick


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 that records every delivery."""
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def clock() -> ManualClock:
    """A clock that starts at the real time (so signatures verify) and moves when told."""
    return ManualClock(time.time_ns() // 1000)


@dataclass(frozen=True)
class Backend:
    """What a test's service runs on: a database and a live-progress store."""

    name: str
    database: str  # "sqlite" or "postgres"
    progress: str  # "memory" (this process) or "redis"


# Every pair of a database and a progress store, by the name HEADWAY_TEST_BACKENDS uses.
# Every test that takes `backend` runs on each selected pair: the two mixed pairs add
# about 100 s to the suite (on two cores), cheap enough not to keep them to a few modules.
PAIRS = {
    backend.name: backend
    for backend in (
        Backend("sqlite", "sqlite", "memory"),  # the embedded default
        Backend("sqlite+redis", "sqlite", "redis"),
        Backend("postgres+memory", "postgres", "memory"),
        Backend("postgres", "postgres", "redis"),  # several instances as one service
    )
}

BACKENDS = [
    name.strip()
    for name in os.environ.get("HEADWAY_TEST_BACKENDS", ",".join(PAIRS)).split(",")
    if name.strip()
]
if unknown := set(BACKENDS) - set(PAIRS):
    raise pytest.UsageError(
        f"HEADWAY_TEST_BACKENDS names no pair: {', '.join(sorted(unknown))} "
        f"(the pairs: {', '.join(PAIRS)})"
    )


def pairs(**wanted: str) -> list[str]:
    """The selected pairs that have these properties, for a test about one kind of store:
    `@pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)`."""
    return [
        name
        for name in BACKENDS
        if all(getattr(PAIRS[name], key) == value for key, value in wanted.items())
    ]


needs_redis = pytest.mark.skipif(
    "postgres" not in BACKENDS, reason="HEADWAY_TEST_BACKENDS excludes postgres (and Redis)"
)


@pytest.fixture
def redis_url(shared_servers: tuple[PostgresServer, RedisServer]) -> str:
    """A database of the shared Redis for tests of stores and feeds themselves (no app's),
    emptied before each test."""
    _, redis_server = shared_servers
    url = redis_server.url.rsplit("/", 1)[0] + "/1"
    with SyncRedis.from_url(url) as client:
        client.flushdb()
    return url


@pytest.fixture(scope="session")
def shared_servers() -> Iterator[tuple[PostgresServer, RedisServer]]:
    """One real PostgreSQL and one real Redis for the whole run; failing to start fails."""
    with postgres_and_redis() as servers:
        yield servers


@pytest.fixture(scope="session")
def pooled_postgres(shared_servers: tuple[PostgresServer, RedisServer]) -> Iterator[str]:
    """The shared PostgreSQL's URL through a pooler (`Pooler`): the one the tests' apps use."""
    pooler = Pooler(shared_servers[0])
    yield pooler.url
    pooler.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The pair the test runs on. A test for one pair only names it:
    `@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)`."""
    return PAIRS[request.param]


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database with every migration run, made once by each test process:
    each test's database starts as a copy of it (the start's migration finds it at the
    newest revision), instead of running them all again (0.1 s of CPU a test)."""
    path = tmp_path_factory.mktemp("migrated") / "headway.db"

    async def migrate() -> None:
        database = Database(f"sqlite:///{path}")
        try:
            await database.migrate()
        finally:
            await database.close()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # whatever loop runs here
        thread.submit(asyncio.run, migrate()).result()
    assert [file.name for file in path.parent.iterdir()] == [path.name]  # no WAL left
    return path


@pytest.fixture
def settings(tmp_path: Any, backend: Backend, request: pytest.FixtureRequest) -> Settings:
    """A fresh, empty service on the backend, with the worker left to the tests."""
    database_url, redis_url = f"sqlite:///{tmp_path}/headway.db", None
    if backend.database == "sqlite":
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), tmp_path / "headway.db")
    if backend.database == "postgres" or backend.progress == "redis":
        postgres, redis_server = request.getfixturevalue("shared_servers")
        if backend.database == "postgres":
            # Through the pooler, but for the tests that measure time: their statements'
            # round trips go straight to PostgreSQL, as a deployment's do.
            timed = request.node.get_closest_marker("alone") is not None
            database_url = postgres.url if timed else request.getfixturevalue("pooled_postgres")
        if backend.progress == "redis":
            redis_url = redis_server.url
    return Settings(
        database_url=database_url, redis_url=redis_url, progress_ttl=60, run_worker=False
    )


@pytest.fixture
async def app(settings: Settings, clock: ManualClock) -> AsyncIterator[Starlette]:
    app = create_app(settings, clock)
    async with running(app):
        await empty_backend(app, settings)
        yield app


@contextlib.asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[None]:
    """Run the app's lifespan in a task of its own: fixture setup and teardown happen in
    different tasks, and a lifespan holding a task group must be left where it was entered."""
    ready, stop = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with app.router.lifespan_context(app):
            ready.set()
            await stop.wait()

    task = asyncio.create_task(hold())
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()  # the lifespan failed to start: raise its error
    try:
        yield
    finally:
        stop.set()
        await task


async def empty_backend(app: Starlette, settings: Settings) -> None:
    """Shared servers outlive a test: start each test from empty tables and no progress
    (a SQLite file is the test's own)."""
    if not settings.database_url.startswith("sqlite"):
        # Most tests leave a few rows, which DELETE removes in a fifth of the time TRUNCATE
        # takes to make every table and index anew; TRUNCATE once the tables have grown
        # (rows left, or the dead rows of DELETEs, a test's or these), so that no test
        # runs on the bloat of those before it.
        async with app.state.service.db.write() as st:
            await st.rows(EMPTY_TABLES, ())
    if settings.redis_url:
        client = redis.Redis.from_url(settings.redis_url)
        await client.flushdb()
        await client.aclose()


# The tables a test fills (not `secrets`, made by the first start of all), each before
# those it refers to (by a foreign key).
TABLES = (
    "channel_deliveries",
    "channel_log",
    "stalls",
    "late_runs",
    "live_messages",
    "leases",
    "channels",
    "deliveries",
    "outbox",
    "webhook_log",
    "webhooks",
    "shares",
    "idempotency_keys",
    "worker_heartbeats",
    "jobs",
    "tasks",
    "spaces",
)

LARGE_BYTES = 4 * 1024 * 1024  # the tables with their indexes: 0.4 MB when empty
# In one round trip (a test's start waits on each).
EMPTY_TABLES = f"""DO $$ BEGIN
IF {" + ".join(f"pg_total_relation_size('{table}')" for table in TABLES)} >= {LARGE_BYTES} THEN
TRUNCATE {", ".join(TABLES)} CASCADE;
ELSE {" ".join(f"DELETE FROM {table};" for table in TABLES)}
END IF; END $$"""


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as client:
        yield client


@pytest.fixture
async def space(client: httpx.AsyncClient) -> str:
    """The uuid of a new, empty space on the test's app (`client`); `served_space` is its
    match on the shared `headway serve`."""
    response = await client.post("/spaces", json={"title": "Test space"})
    assert response.status_code == 201, response.text
    return response.json()["uuid"]


@pytest.fixture
def make_task(client: httpx.AsyncClient, space: str) -> Callable[..., Awaitable[str]]:
    """Create a task in `space` (or another space) and return its uuid."""

    async def make(space_uuid: str | None = None, **body: Any) -> str:
        response = await client.post(f"/spaces/{space_uuid or space}/tasks", json=body)
        assert response.status_code == 201, response.text
        return response.json()["uuid"]

    return make


@pytest.fixture
def sql(app: Starlette) -> Callable[..., Awaitable[list[Any]]]:
    """Run a read-only SQL query (`?` placeholders, then its parameters) against the
    app's real database; its rows as tuples."""

    async def run(query: str, *params: Any) -> list[Any]:
        return [tuple(row) for row in await app.state.service.db.fetch(query, params)]

    return run


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The real `headway serve` the client, command-line and page tests share (one per
    run, on SQLite, rate limits off, private addresses allowed so that channels reach
    the tests' receivers on 127.0.0.1)."""
    with LiveServer(
        tmp_path_factory.mktemp("served"),
        HEADWAY_RATE_LIMITS="false",
        HEADWAY_WEBHOOK_ALLOW_PRIVATE="true",
    ) as server:
        yield server


@pytest.fixture
def served_space(server: LiveServer) -> str:
    """The uuid of a new, empty space on the shared `headway serve` (`server`); `space`
    is its match on the test's own app (`client`)."""
    return server.new_space()


@pytest.fixture
async def limited(settings: Settings, clock: ManualClock, request: pytest.FixtureRequest):
    """Start an app with some settings changed: `await limited(rate_tasks="3/minute")`.
    With `rates_on_the_clock`, its rates count on the test's clock (see `time_passes`)."""
    apps: list[Any] = []

    async def start(*, rates_on_the_clock: bool = False, **changes: Any) -> Starlette:
        changed = settings.with_(**changes)
        app = create_app(changed, clock)
        context = running(app)
        await context.__aenter__()
        apps.append(context)
        await empty_backend(app, settings)
        if rates_on_the_clock and changed.redis_url is None:
            # The app counts rates on real time even where a test moves its clock (see
            # create_app), so that moving it refills nobody's buckets; here its token
            # buckets count on the test's clock instead.
            app.state.visitors = Visitors(changed, clock)
        return app

    yield start
    for context in reversed(apps):
        await context.__aexit__(None, None, None)


@pytest.fixture
async def clients() -> AsyncIterator[list[httpx.AsyncClient]]:
    opened: list[httpx.AsyncClient] = []
    yield opened
    for client in opened:
        await client.aclose()
