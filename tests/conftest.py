"""Shared fixtures: a real app on a real database, driven over HTTP (ASGI transport)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as redis
from redis import Redis as SyncRedis
from starlette.applications import Starlette

from headway.app import create_app
from headway.clock import ManualClock
from headway.config import Settings
from headway.visitor import Visitors

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
from .servers import PostgresServer, RedisServer, postgres_and_redis

# A shell without job control starts a background command (`scripts/test &`) with SIGINT
# and SIGQUIT ignored, and every process the tests start would inherit that: a command's
# Ctrl-C would then do nothing. The tests' commands get them as a terminal gives them.
for _number in (signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_number) == signal.SIG_IGN:
        signal.signal(
            _number, signal.default_int_handler if _number == signal.SIGINT else signal.SIG_DFL
        )


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


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The pair the test runs on. A test for one pair only names it:
    `@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)`."""
    return PAIRS[request.param]


@pytest.fixture
def settings(tmp_path: Any, backend: Backend, request: pytest.FixtureRequest) -> Settings:
    """A fresh, empty service on the backend, with the worker left to the tests."""
    database_url, redis_url = f"sqlite:///{tmp_path}/headway.db", None
    if backend.database == "postgres" or backend.progress == "redis":
        postgres, redis_server = request.getfixturevalue("shared_servers")
        if backend.database == "postgres":
            database_url = postgres.url
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
        async with app.state.service.db.write() as st:
            await st.rows(f"TRUNCATE {', '.join(TABLES)} CASCADE", ())
    if settings.redis_url:
        client = redis.Redis.from_url(settings.redis_url)
        await client.flushdb()
        await client.aclose()


TABLES = (
    "channel_deliveries",
    "channel_log",
    "stalls",
    "leases",
    "channels",
    "deliveries",
    "outbox",
    "webhook_log",
    "webhooks",
    "shares",
    "idempotency_keys",
    "worker_heartbeats",
    "tasks",
    "spaces",
)


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
