"""The badges scenarios, on a server of their own (embedded default, rate limits off): a
share link's badge of one task against the read of the same tasks (`GET /tasks/{t}`,
measured right before on the same server), and the badge of the space; and their target.

The space holds BADGE_TASKS tasks, each reported once; the badges are spread over every
task's id under one share link, as READMEs and wikis ask for them (no `If-None-Match`:
each answer is the whole SVG)."""

from __future__ import annotations

import asyncio

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness, _num
from ..options import BADGE_SPACE_TASKS
from ..processes import ServerProcess
from ..report import Row, Target
from . import NO_RATE_LIMITS

BADGE_ROWS = ["badge_get_task", "badge", "badge_space"]
BADGE_TASKS = BADGE_SPACE_TASKS
BADGES = "badges: a badge costs no more than a task read"


def badges(bench: Harness) -> None:
    """The control read, then each badge, on one server seeded for them."""
    database = bench.workdir / "badges.db"
    server = bench.start_headway("headway-badges", f"sqlite:///{database}", env=NO_RATE_LIMITS)
    try:
        tasks, share, ids = asyncio.run(_seed(server))
        reads = Load("GET", [f"/tasks/{t}" for t in tasks])
        control = bench.measure(server, "badge_get_task", reads)
        paths = [f"/shared/{share}/tasks/{task_id}/badge.svg" for task_id in ids]
        badge = bench.measure(server, "badge", Load("GET", paths))
        space = bench.measure(server, "badge_space", Load("GET", [f"/shared/{share}/badge.svg"]))
        for row in (badge, space):
            if row.cpu_us_per_request and control.cpu_us_per_request:
                row.extra["vs_get_task"] = round(
                    row.cpu_us_per_request / control.cpu_us_per_request, 3
                )
                row.extra["note"] = (
                    f"CPU µs/req {_num(row.cpu_us_per_request)} vs GET /tasks/{{t}}'s "
                    f"{_num(control.cpu_us_per_request)} ({row.extra['vs_get_task']:.2f}x)"
                )
                bench.say(f"{row.name}: {row.extra['note']}")
    finally:
        bench.stop(server)


async def _seed(server: ServerProcess) -> tuple[list[str], str, list[str]]:
    """A space of BADGE_TASKS reported tasks and a share link: the tasks' uuids, the
    link, and each task's id under it."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        space = await seed.space_with_tasks(client, "badges", BADGE_TASKS)
        created = await client.post(f"/spaces/{space.uuid}/shares", json={})
        if created.status_code != 201:
            raise seed.SeedError(f"a share link was refused: {created.status_code}")
        share = created.json()["uuid"]
        shown = await client.get(f"/shared/{share}")
        ids = [task["id"] for task in shown.json()["tasks"]]
        for task_id in ids[:1]:
            badge = await client.get(f"/shared/{share}/tasks/{task_id}/badge.svg")
            if badge.status_code != 200 or not badge.content.startswith(b"<svg"):
                raise seed.SeedError(f"a badge did not come: {badge.status_code}")
        return space.tasks, share, ids


def badge_targets(rows: dict[str, Row]) -> list[Target]:
    """A task's badge costs no more CPU per request than reading that task."""
    description = "GET …/tasks/{id}/badge.svg: CPU/req ≤ GET /tasks/{t}'s, same server"
    badge, control = rows.get("badge"), rows.get("badge_get_task")
    measured = [row for row in (badge, control) if row is not None and row.status == "ok"]
    if len(measured) < 2 or not all(row.cpu_us_per_request for row in measured):
        why = next((row.reason for row in (badge, control) if row and row.reason), "")
        return [Target("badge_cpu", description, "skipped", "–", why or "not measured", BADGES)]
    assert badge is not None and control is not None
    cpu, limit = badge.cpu_us_per_request or 0.0, control.cpu_us_per_request or 0.0
    get_task = rows.get("get_task")
    note = ""
    if get_task is not None and get_task.cpu_us_per_request:
        note = f"the run's get_task (1,000-task pool): {_num(get_task.cpu_us_per_request)} µs/req"
    status = "pass" if cpu <= limit else "fail"
    shown = f"{_num(cpu)} vs {_num(limit)} µs/req"
    return [Target("badge_cpu", description, status, shown, note, BADGES)]
