"""The notification channels' scenarios: what channels and stall detection cost the PUT
(two fresh servers alike but for the channels, measured one right after the other), and
how long after its deadline a stall is told (a stall takes 60 s at the least: the full
run only)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from .. import seed
from ..flood import percentile
from ..load import Load
from ..measure import Harness, Skip, _num
from ..processes import ServerProcess
from ..receiver import Receiver
from ..report import Row
from . import NO_RATE_LIMITS

# Both PUT servers: looks for stalls every second (so that many run during the load), and
# channels allowed to reach the receiver on 127.0.0.1.
NOTIFIED = {
    **NO_RATE_LIMITS,
    "HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true",
    "HEADWAY_STALL_SCAN": "1",
}
STALLED_AFTER_S = 60  # the shortest a channel may ask for
# The stall latency: tasks reported once each, over SPREAD_S, in spaces of SPACE_TASKS
# tasks with a channel each (a digest names at most 20 tasks; a space's channel here
# tells at most SPACE_TASKS at once, so every task is named in its message). SPREAD_S is
# the default wait between two looks (15 s): the deadlines fall at every point of the
# looks' cycle, rather than all in the few seconds between two of them.
STALL_TASKS = 50
SPACE_TASKS = 10
SPREAD_S = 15.0
# How long to wait for the last message after the last deadline: the contract's 30 s, and
# room to see a late one as late rather than lost.
WAIT_AFTER_S = 45.0
STALL_LINE = re.compile(r"⏸ (stall-\d+) stalled")
CHANNEL_ROWS = ["put_report_plain", "put_report_notified"]


def notified(bench: Harness) -> None:
    """`put_report_plain`, then `put_report_notified`: the same PUT over a fresh pool on
    two fresh embedded servers with the same settings (`NOTIFIED`), the second's pool
    space with a channel wanting `completed`, one `failed` and one `stalled`."""
    receiver = Receiver()
    bench.cleanups.append(receiver.stop)
    try:
        plain = _put(bench, "put_report_plain", None)
        notified = _put(bench, "put_report_notified", receiver)
    finally:
        receiver.stop()
        bench.cleanups.remove(receiver.stop)
    if plain.cpu_us_per_request and notified.cpu_us_per_request:
        ratio = round(notified.cpu_us_per_request / plain.cpu_us_per_request, 3)
        notified.extra["cpu_vs_plain"] = ratio
        notified.extra["note"] = (
            f"CPU µs/req {_num(notified.cpu_us_per_request)} vs "
            f"{_num(plain.cpu_us_per_request)} without channels: {ratio:.3f}x; "
            f"req/s {_num(notified.requests_per_s, 0)} vs {_num(plain.requests_per_s, 0)}"
            + (f"; {notified.extra['check']}" if "check" in notified.extra else "")
        )
        bench.say(f"put_report_notified: {notified.extra['note']}")


def _put(bench: Harness, name: str, receiver: Receiver | None) -> Row:
    """One fresh server, its pool seeded (with channels if `receiver`), the PUT measured."""
    database = bench.workdir / f"{name}.db"
    server = bench.start_headway(f"headway-{name}", f"sqlite:///{database}", env=NOTIFIED)
    try:
        channels = ", 3 channels" if receiver is not None else ""
        bench.say(f"seeding over HTTP: {bench.o.pool:,} pool tasks{channels}")
        pool = asyncio.run(_seed(server, bench.o.pool, receiver))
        load = Load("PUT", [f"/tasks/{t}" for t in pool], seed.PUT_BODY)
        row = bench.measure(server, name, load)
        if receiver is not None:
            _check_notified(row, server, database, pool[0], receiver)
        return row
    finally:
        bench.stop(server)


async def _seed(server: ServerProcess, size: int, receiver: Receiver | None) -> list[str]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        pool = await seed.pool(client, size)
        if receiver is not None:
            space = (await client.get(f"/tasks/{pool[0]}")).json()["space_uuid"]
            for events in (["completed"], ["failed"], ["stalled"]):
                body = {"url": receiver.url, "events": events, "stalled_after": STALLED_AFTER_S}
                answer = await client.post(f"/spaces/{space}/channels", json=body)
                if answer.status_code != 201:
                    raise seed.SeedError(f"a channel was refused: {answer.text}")
        return pool


def _check_notified(
    row: Row, server: ServerProcess, database: Path, task: str, receiver: Receiver
) -> None:
    """After the load: stall looks were still running (the lease is ahead of now), and
    a failed finish reaches the `completed` and `failed` channels. Either missing marks
    the row an error: the channels would not have been doing their work."""
    with sqlite3.connect(database) as connection:
        lease = connection.execute("SELECT until_us FROM leases WHERE name = 'stalls'").fetchone()
    ahead_s = None if lease is None else lease[0] / 1e6 - time.time()
    row.extra["stall_lease_ahead_s"] = None if ahead_s is None else round(ahead_s, 2)
    body = {"done": True, "values": {"error": "bench check"}}
    answer = httpx.put(f"{server.url}/tasks/{task}", json=body, timeout=10)
    deadline = time.monotonic() + 20
    while len(receiver.received()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    told = receiver.received()
    row.extra["check"] = f"a failed finish told to {len(told)} of 2 channels"
    if ahead_s is None or ahead_s < 0:
        row.status, row.reason = "error", "no stall look held the lease at the end of the load"
    elif answer.status_code != 200 or len(told) < 2:
        row.status, row.reason = "error", row.extra["check"]


def stall_latency(bench: Harness) -> None:
    """`stall_latency`: STALL_TASKS tasks reported once each over SPREAD_S, in spaces
    with a `stalled` channel (stalled_after 60 s) each, on a fresh embedded server with
    HEADWAY_STALL_SCAN at its default; per task, the time from its deadline (its report's
    `updated_at` + 60 s) to the arrival of the message that names it."""
    if bench.o.mode != "full":
        raise Skip(
            f"a stall takes {STALLED_AFTER_S} s at the least: this row takes about 90 s, "
            "and runs in the full bench only"
        )
    name = "stall_latency"
    database = bench.workdir / "stalls.db"
    env = {**NO_RATE_LIMITS, "HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true"}
    receiver = Receiver()
    bench.cleanups.append(receiver.stop)
    server = bench.start_headway("headway-stalls", f"sqlite:///{database}", env=env)
    try:
        cpu_before = server.cpu_seconds()
        deadlines = asyncio.run(_report_once(server, receiver.url))
        last = max(deadlines.values())
        bench.say(
            f"{name}: {len(deadlines)} tasks reported; waiting for their stalls "
            f"(the last is due in {last - time.time():.0f} s)"
        )
        latencies = _wait_for_stalls(receiver, deadlines, last + WAIT_AFTER_S)
        cpu = server.cpu_seconds() - cpu_before
    finally:
        bench.stop(server)
        receiver.stop()
        bench.cleanups.remove(receiver.stop)
    bench.record(_latency_row(bench, name, deadlines, latencies, receiver, cpu))


async def _report_once(server: ServerProcess, channel_url: str) -> dict[str, float]:
    """The tasks, each reported once, spread over SPREAD_S; each one's stall deadline
    (epoch seconds), by title."""
    deadlines: dict[str, float] = {}
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        tasks: list[tuple[str, str]] = []
        for first in range(0, STALL_TASKS, SPACE_TASKS):
            space = await seed.create_space(client, f"stalls {first // SPACE_TASKS}")
            body = {"url": channel_url, "events": ["stalled"], "stalled_after": STALLED_AFTER_S}
            answer = await client.post(f"/spaces/{space}/channels", json=body)
            if answer.status_code != 201:
                raise seed.SeedError(f"a channel was refused: {answer.text}")
            for n in range(first, min(first + SPACE_TASKS, STALL_TASKS)):
                made = await client.post(f"/spaces/{space}/tasks", json={"title": f"stall-{n}"})
                tasks.append((f"stall-{n}", made.json()["uuid"]))
        started, every = time.monotonic(), SPREAD_S / len(tasks)
        for index, (title, task) in enumerate(tasks):
            await asyncio.sleep(max(0.0, started + index * every - time.monotonic()))
            answer = await client.put(f"/tasks/{task}", json={"current": 1, "end": 10})
            if answer.status_code != 200:
                raise seed.SeedError(f"a report was refused: {answer.text}")
            updated = answer.json()["progress"]["updated_at"]
            deadlines[title] = datetime.fromisoformat(updated).timestamp() + STALLED_AFTER_S
    return deadlines


def _wait_for_stalls(
    receiver: Receiver, deadlines: dict[str, float], until: float
) -> dict[str, float]:
    """Seconds from each task's deadline to the first message naming it, for those told
    by `until` (epoch seconds)."""
    latencies: dict[str, float] = {}
    seen = 0
    while len(latencies) < len(deadlines) and time.time() < until:
        time.sleep(0.2)
        messages = receiver.received()
        for message in messages[seen:]:
            for title in STALL_LINE.findall(f"{message.title}\n{message.text}"):
                if title in deadlines and title not in latencies:
                    latencies[title] = message.at - deadlines[title]
        seen = len(messages)
    return latencies


def _latency_row(
    bench: Harness,
    name: str,
    deadlines: dict[str, float],
    latencies: dict[str, float],
    receiver: Receiver,
    cpu: float,
) -> Row:
    values = list(latencies.values())
    missing = len(deadlines) - len(values)
    extra: dict[str, Any] = {
        "tasks": len(deadlines),
        "told": len(values),
        "messages": len(receiver.received()),
        "p50_s": _s(percentile(values, 0.50)),
        "p99_s": _s(percentile(values, 0.99)),
        "max_s": _s(max(values, default=None)),
        "min_s": _s(min(values, default=None)),
        "server_cpu_s": round(cpu, 2),
    }
    extra["note"] = (
        f"{len(values)} of {len(deadlines)} stalls told in {extra['messages']} messages; "
        f"deadline to arrival p50 {_num(extra['p50_s'])} s, p99 {_num(extra['p99_s'])} s, "
        f"max {_num(extra['max_s'])} s (min {_num(extra['min_s'])} s)"
    )
    row = Row(
        name,
        bench.titles[name],
        "ok" if not missing else "error",
        "" if not missing else f"{missing} stalls not told within {WAIT_AFTER_S:g} s",
        p50_ms=_ms(percentile(values, 0.50)),
        p99_ms=_ms(percentile(values, 0.99)),
        extra=extra,
    )
    return row


def _s(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
