"""`GET /up` tells the truth about writes, not only reads."""

from __future__ import annotations

import sqlite3
import time

import pytest

from .conftest import pairs


@pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)
async def test_up_is_503_while_another_process_holds_the_sqlite_write_lock(app, client, settings):
    assert (await client.get("/up")).status_code == 200
    path = settings.database_url.split(":///", 1)[1]
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # what a stuck writer elsewhere would hold
        started = time.monotonic()
        response = await client.get("/up")
        assert time.monotonic() - started < 5
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
