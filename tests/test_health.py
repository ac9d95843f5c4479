"""`GET /up` tells the truth about writes, not only reads."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import httpx
import pytest

from .conftest import pairs
from .live_server import serving


@pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)
async def test_up_is_503_while_another_process_holds_the_sqlite_write_lock(app, client, settings):
    assert (await client.get("/up")).status_code == 200
    path = settings.database_url.split(":///", 1)[1]
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # what a stuck writer elsewhere would hold
        started = time.monotonic()
        response = await client.get("/up")
        # A hang guard, below the 30 s busy timeout that a check waiting on the lock would
        # take: the check's own wait is short (see Database.check_writable).
        assert time.monotonic() - started < 20
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["database"]["status"] == "down"
        # Reads still work meanwhile: it is writes that cannot be taken.
        assert (await client.get("/openapi.json")).status_code == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (await client.get("/up")).status_code == 200


async def test_up_names_a_long_lived_task_that_ended_without_failing_the_check(settings):
    from headway.app import create_app

    app = create_app(settings)
    with serving(settings, app=app) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as client:
            space = (await client.post("/spaces", json={})).json()["uuid"]
            async with client.stream("GET", f"/spaces/{space}/events") as stream:
                assert stream.status_code == 200
                running = (await client.get("/up")).json()["checks"]["loops"]
                assert running["status"] == "up" and running["stopped"] == []
                assert running["running"] >= 1  # the watchdog of the live streams, at least
                watchdog = app.state.live.loops()["live_watchdog"]
                # As if it had ended: each loop survives any error of its own.
                watchdog.get_loop().call_soon_threadsafe(watchdog.cancel)
                deadline = time.monotonic() + 5
                while not watchdog.done():
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
                response = await client.get("/up")
    assert response.status_code == 200
    loops = response.json()["checks"]["loops"]
    assert loops["status"] == "down"
    assert loops["stopped"] == ["live_watchdog"]
