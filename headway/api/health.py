"""`GET /up`: whether the database and the progress store answer (503 if not), and what
runs short without failing the check: the worker, the process's loops, the database's
disk (a low or full disk makes the status `degraded`, still 200: reports and reads work,
so a load balancer must not take the instance out)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from ..delivery.worker import worker_status
from ..domain.clock import Clock
from ..ops.disk import DiskBudget
from ..progress import ProgressStore
from ..storage.database import Database
from .endpoints import Request, Route
from .responses import JSONResponse

CHECK_TIMEOUT = 3.0


@dataclass(frozen=True, slots=True)
class Dependencies:
    """What the app runs on, as `create_app` made it, for `/up` and `/metrics` to look
    at (the use cases reach them only through `headway.service`)."""

    db: Database
    progress: ProgressStore
    disk: DiskBudget
    clock: Clock


async def _check(*probes: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        for probe in probes:
            await asyncio.wait_for(probe(), CHECK_TIMEOUT)
    except Exception as exc:  # any failure of a dependency is what this check reports
        return {"status": "down", "error": type(exc).__name__}
    return {"status": "up", "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


async def up(request: Request) -> Response:
    on: Dependencies = request.app.state.dependencies
    database, progress, disk = await asyncio.gather(
        _check(on.db.ping, on.db.check_writable),
        _check(on.progress.ping),
        _disk(on.disk),
    )
    database["backend"] = "sqlite" if on.db.is_sqlite else "postgresql"
    progress["backend"] = on.progress.name
    healthy = database["status"] == "up" and progress["status"] == "up"
    worker: dict[str, Any] = {"status": "unknown", "heartbeat_age_s": None}
    if database["status"] == "up":
        # The worker is reported, but a dead worker does not fail the check.
        with contextlib.suppress(Exception):
            worker = await asyncio.wait_for(worker_status(on.db, on.clock), CHECK_TIMEOUT)
    status = "ok" if disk["status"] == "ok" else "degraded"
    body = {
        "status": status if healthy else "unavailable",
        "checks": {
            "database": database,
            "progress_store": progress,
            "worker": worker,
            "loops": loops(request),
            "disk": disk,
        },
    }
    return JSONResponse(body, 200 if healthy else 503)


async def _disk(budget: DiskBudget) -> dict[str, Any]:
    """The disk budget's verdict, measured again if it is a period old (see `headway.ops.disk`);
    the last one if measuring takes too long."""
    with contextlib.suppress(Exception):  # a database that is down is the database check's
        return (await asyncio.wait_for(budget.current(), CHECK_TIMEOUT)).check()
    return budget.state.check()


def loops(request: Request) -> dict[str, Any]:
    """The process's long-lived tasks (worker, change feed, live streams' watchdog and
    link check): a loop that ended is named here (each survives any failure, so it should
    not), though, like a dead worker, it does not fail the check."""
    state = request.app.state
    tasks = {**state.loops, **state.live.loops(), **state.live.feed.loops()}
    stopped = sorted(name for name, task in tasks.items() if task.done())
    return {
        "status": "down" if stopped else "up",
        "running": len(tasks) - len(stopped),
        "stopped": stopped,
    }


routes = [Route("/up", up, methods=["GET"])]
