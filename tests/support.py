"""Small helpers shared by the tests: outbox rows and row counts, read-only SQL, pip's
environment for clean virtualenvs."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
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


def from_wheelhouse(env: dict[str, str]) -> dict[str, str]:
    """`env` for a pip (and `python -m build`'s) that installs from the wheels `scripts/test`
    keeps ($HEADWAY_WHEELHOUSE: every dependency's, at the versions of constraints.txt)
    without asking the index, when they are there; `env` as it is otherwise."""
    wheelhouse = os.environ.get("HEADWAY_WHEELHOUSE")
    if wheelhouse and (Path(wheelhouse) / ".complete").is_file():
        return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse}
    return env
