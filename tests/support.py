"""Small readers shared by the tests: outbox rows and row counts, read-only SQL."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

Sql = Callable[..., Awaitable[list[Any]]]


async def outbox_events(sql: Sql, task_uuid: str | None = None) -> list[dict[str, Any]]:
    """The decoded payloads of the outbox rows (of one task, if given), oldest first."""
    if task_uuid is None:
        rows = await sql("SELECT payload FROM outbox ORDER BY created_at_us, id")
    else:
        rows = await sql(
            "SELECT payload FROM outbox WHERE task_uuid = ? ORDER BY created_at_us, id", task_uuid
        )
    return [json.loads(row[0]) for row in rows]


async def stored_counts(sql: Sql) -> dict[str, int]:
    """How many spaces, tasks and outbox rows the database holds."""
    counts = {}
    for table in ("spaces", "tasks", "outbox"):
        rows = await sql(f"SELECT count(*) FROM {table}")
        counts[table] = rows[0][0]
    return counts
