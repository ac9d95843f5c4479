"""Shared fixtures: a real app on a real database, driven over HTTP (ASGI transport)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from starlette.applications import Starlette

from headway.app import create_app
from headway.clock import ManualClock
from headway.config import Settings


@pytest.fixture
def clock() -> ManualClock:
    """A clock that starts at the real time (so signatures verify) and moves when told."""
    return ManualClock(time.time_ns() // 1000)


@pytest.fixture
def settings(tmp_path: Any) -> Settings:
    """The embedded default on a fresh SQLite file, with the worker left to the tests."""
    return Settings(
        database_url=f"sqlite:///{tmp_path}/headway.db",
        progress_ttl=60,
        run_worker=False,
    )


@pytest.fixture
async def app(settings: Settings, clock: ManualClock) -> AsyncIterator[Starlette]:
    app = create_app(settings, clock)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as client:
        yield client


@pytest.fixture
async def space(client: httpx.AsyncClient) -> str:
    """The uuid of a new, empty space."""
    response = await client.post("/spaces", json={"title": "Test space"})
    assert response.status_code == 201, response.text
    return response.json()["uuid"]


@pytest.fixture
def make_task(
    client: httpx.AsyncClient, space: str
) -> Callable[..., Awaitable[str]]:
    """Create a task in `space` (or another space) and return its uuid."""

    async def make(space_uuid: str | None = None, **body: Any) -> str:
        response = await client.post(f"/spaces/{space_uuid or space}/tasks", json=body)
        assert response.status_code == 201, response.text
        return response.json()["uuid"]

    return make


@pytest.fixture
def sql(app: Starlette) -> Callable[[str], Awaitable[list[Any]]]:
    """Run a read-only SQL query against the app's real database."""

    async def run(query: str, **params: Any) -> list[Any]:
        async with app.state.service.db.read() as conn:
            return list(await conn.execute(text(query), params))

    return run
