"""The hostile neighbour: a well-behaved client's success rate and latency with one greedy
client beside it, against the same client alone on the same server, one right after the
other.

The server is the embedded default with every limit at its default but two: its
live-progress budget is 64 MiB (`HEADWAY_PROGRESS_MEMORY`), so that the greedy client can
reach its share within the run, and 127.0.0.1 is a trusted proxy, so that each client
is known by the `X-Forwarded-For` it sends: the well-behaved one as 203.0.113.10, the
greedy one as addresses of one IPv6 /64 (2001:db8:bad:1::/64, a new address for each
request).

The well-behaved client, paced at `GOOD_RATE` requests a second, creates tasks in its
space, reports each a few times, reads it and its space (50 tasks), and finishes it; one
live stream of its space stays open throughout. The greedy client, a process of its own,
does everything at once and never waits for `Retry-After`: it fills the live-progress
budget (64 members of 1,000 characters in each report, in ever more spaces), reads a
space of `--big` tasks whole in a loop, opens as many streams as it is allowed, and
finishes tasks in a space with `WEBHOOKS` webhooks to an endpoint that never answers.

Goal: beside the greedy client, the well-behaved one succeeds ≥ 99.9% of the time and its
p99 stays within 2x its p99 alone. Run it alone with
`python -m bench.scenarios.neighbour [--seconds 20] [--big 20000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .. import seed
from ..measure import Harness
from ..options import Options
from ..report import Row, Target

NEIGHBOUR_ROWS = ["neighbour_alone", "neighbour_beside_greedy"]
NEIGHBOUR = "The hostile neighbour (issue 22)"
SECONDS = {"full": 30.0, "quick": 10.0, "smoke": 1.0}
BIG = {"full": 20_000, "quick": 20_000, "smoke": 2_000}
WARM_UP_S = 3.0  # the greedy client runs this long before the well-behaved one is measured
GOOD = "203.0.113.10"
GREEDY_NETWORK = "2001:db8:bad:1"  # one /64; each greedy request from a new address in it
GOOD_RATE = 100.0  # the well-behaved client's requests a second
GOOD_WORKERS = 4
REPORTS_PER_TASK = 3
WEBHOOKS = 20
SETTINGS = {
    "HEADWAY_PROGRESS_MEMORY": "64MiB",
    "HEADWAY_TRUSTED_PROXIES": "127.0.0.1",
    "HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true",
}
# The targets.
SUCCESS_MIN = 0.999
P99_RATIO_MAX = 2.0
BIG_VALUES = {f"k{i:02d}": "x" * 1000 for i in range(64)}


@dataclass
class Outcomes:
    """Each request's seconds, and its status (None: no answer)."""

    seconds: list[float] = field(default_factory=list)
    statuses: Counter[int | None] = field(default_factory=Counter)
    stream_events: int = 0
    stream_error: str | None = None

    def note(self, seconds: float, status: int | None) -> None:
        self.seconds.append(seconds)
        self.statuses[status] += 1

    @property
    def success(self) -> float:
        total = sum(self.statuses.values())
        good = sum(n for status, n in self.statuses.items() if status and status < 400)
        return good / total if total else 0.0

    def p(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


# --- the well-behaved client ----------------------------------------------------------


async def well_behaved(url: str, space: str, seconds: float) -> Outcomes:
    """`GOOD_WORKERS` workers paced together at `GOOD_RATE` requests a second, and one live
    stream of the space, for `seconds`."""
    out = Outcomes()
    headers = {"x-forwarded-for": GOOD}
    limits = httpx.Limits(max_connections=GOOD_WORKERS + 2)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=30, limits=limits
    ) as client:
        stop = time.monotonic() + seconds
        interval = GOOD_WORKERS / GOOD_RATE
        stream = asyncio.create_task(_watch(client, space, out))
        await asyncio.gather(
            *(_good_worker(client, space, stop, interval, out) for _ in range(GOOD_WORKERS))
        )
        stream.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stream
    return out


async def _good_worker(
    client: httpx.AsyncClient, space: str, stop: float, interval: float, out: Outcomes
) -> None:
    next_at = time.monotonic()

    async def call(method: str, path: str, **kw: Any) -> httpx.Response | None:
        nonlocal next_at
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        started = time.perf_counter()
        try:
            response = await client.request(method, path, **kw)
        except httpx.HTTPError:
            out.note(time.perf_counter() - started, None)
            return None
        out.note(time.perf_counter() - started, response.status_code)
        return response

    while time.monotonic() < stop:
        created = await call("POST", f"/spaces/{space}/tasks", json={"title": "nightly job"})
        if created is None or created.status_code != 201:
            continue
        task = created.json()["uuid"]
        for step in range(1, REPORTS_PER_TASK + 1):
            body = {"current": step, "end": REPORTS_PER_TASK + 1, "values": {"log": f"step {step}"}}
            await call("PUT", f"/tasks/{task}", json=body)
        await call("GET", f"/tasks/{task}")
        await call("GET", f"/spaces/{space}", params={"limit": 50})
        await call("PUT", f"/tasks/{task}", json={"done": True})


async def _watch(client: httpx.AsyncClient, space: str, out: Outcomes) -> None:
    """The space's live stream, open until cancelled: counts the events it brings."""
    try:
        async with client.stream("GET", f"/spaces/{space}/events", timeout=None) as response:
            if response.status_code != 200:
                out.stream_error = f"status {response.status_code}"
                return
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    out.stream_events += 1
    except httpx.HTTPError as exc:
        out.stream_error = type(exc).__name__


# --- the greedy client (a process of its own) ------------------------------------------


class Greedy:
    """Everything at once, from addresses of one /64, never waiting for `Retry-After`."""

    def __init__(self, url: str, big: str, hooked: str, dead: str) -> None:
        self.url, self.big, self.hooked, self.dead = url, big, hooked, dead
        self.counts: dict[str, Counter[str]] = {}
        self._host = itertools.count(1)

    def headers(self) -> dict[str, str]:
        return {"x-forwarded-for": f"{GREEDY_NETWORK}::{next(self._host) % 65_535 + 1:x}"}

    def count(self, what: str, status: int | str) -> None:
        self.counts.setdefault(what, Counter())[str(status)] += 1

    async def run(self, seconds: float) -> dict[str, dict[str, int]]:
        limits = httpx.Limits(max_connections=1_000, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=self.url, timeout=30, limits=limits) as client:
            stop = time.monotonic() + seconds
            jobs = [self._fill(client, stop) for _ in range(8)]
            jobs += [self._read(client, stop) for _ in range(4)]
            jobs += [self._finish(client, stop) for _ in range(2)]
            jobs.append(self._streams(client, stop))
            await asyncio.gather(*jobs)
        return {what: dict(counter) for what, counter in self.counts.items()}

    async def _call(self, client: httpx.AsyncClient, what: str, method: str, path: str, **kw: Any):
        try:
            response = await client.request(method, path, headers=self.headers(), **kw)
        except httpx.HTTPError as exc:
            self.count(what, type(exc).__name__)
            return None
        self.count(what, response.status_code)
        return response

    async def _fill(self, client: httpx.AsyncClient, stop: float) -> None:
        """Tasks with as much progress as a report may carry, 50 to a space."""
        space = None
        made = 0
        while time.monotonic() < stop:
            if space is None or made >= 50:
                created = await self._call(client, "fill: spaces", "POST", "/spaces", json={})
                space = created.json()["uuid"] if created and created.status_code == 201 else None
                made = 0
                continue
            created = await self._call(
                client, "fill: tasks", "POST", f"/spaces/{space}/tasks", json={"title": "x"}
            )
            made += 1
            if created is not None and created.status_code == 201:
                body = {"current": 1, "end": 2, "values": BIG_VALUES}
                path = f"/tasks/{created.json()['uuid']}"
                await self._call(client, "fill: reports", "PUT", path, json=body)

    async def _read(self, client: httpx.AsyncClient, stop: float) -> None:
        while time.monotonic() < stop:
            await self._call(client, "reads of the big space", "GET", f"/spaces/{self.big}")

    async def _finish(self, client: httpx.AsyncClient, stop: float) -> None:
        """Tasks made and finished in the space whose webhooks go nowhere."""
        while time.monotonic() < stop:
            path = f"/spaces/{self.hooked}/tasks"
            created = await self._call(client, "finishes", "POST", path, json={"title": "hook"})
            if created is not None and created.status_code == 201:
                task = f"/tasks/{created.json()['uuid']}"
                await self._call(client, "finishes", "PUT", task, json={"done": True})

    async def _streams(self, client: httpx.AsyncClient, stop: float) -> None:
        """As many live streams of the big space as it is allowed, held to the end."""
        held: list[contextlib.AsyncExitStack] = []
        try:
            while time.monotonic() < stop:
                stack = contextlib.AsyncExitStack()
                try:
                    response = await stack.enter_async_context(
                        client.stream(
                            "GET", f"/spaces/{self.big}/events", headers=self.headers(), timeout=5
                        )
                    )
                except httpx.HTTPError as exc:
                    self.count("streams", type(exc).__name__)
                    await stack.aclose()
                    continue
                self.count("streams", response.status_code)
                if response.status_code == 200:
                    held.append(stack)
                else:
                    await stack.aclose()
                    await asyncio.sleep(0.05)
            await asyncio.sleep(max(0.0, stop - time.monotonic()))
        finally:
            for stack in held:
                with contextlib.suppress(Exception):
                    await stack.aclose()


# --- the run ---------------------------------------------------------------------------


def neighbour(bench: Harness) -> None:
    """Both rows on one fresh embedded server: the well-behaved client alone, then beside
    the greedy one."""
    seconds, big = SECONDS[bench.o.mode], BIG[bench.o.mode]
    database = bench.workdir / "neighbour.db"
    server = bench.start_headway("headway-neighbour", f"sqlite:///{database}", env=SETTINGS)
    try:
        alone, beside, greedy = run(
            server.url, str(database), seconds, big, say=bench.say, code=bench.code
        )
    finally:
        bench.stop(server)
    bench.record(_row("neighbour_alone", "well-behaved client, alone", alone, seconds))
    row = bench.record(
        _row("neighbour_beside_greedy", "well-behaved client, a greedy one beside", beside, seconds)
    )
    row.extra["greedy"] = greedy
    row.extra["p99_vs_alone"] = round(beside.p(0.99) / alone.p(0.99), 2) if alone.p(0.99) else None
    bench.say(f"neighbour: {_line(alone, beside)}")


def run(
    url: str,
    database: str,
    seconds: float,
    big: int,
    say: Any = print,
    code: Path | None = None,
) -> tuple[Outcomes, Outcomes, dict[str, Any]]:
    """Seed, measure the well-behaved client alone, then beside the greedy one."""
    with _dead_endpoint() as dead:
        spaces = asyncio.run(_seed(url, database, big, dead))
        say(f"neighbour: the well-behaved client alone for {seconds:g} s")
        alone = asyncio.run(well_behaved(url, spaces["good"], seconds))
        say(f"neighbour: the greedy client ({WARM_UP_S:g} s ahead), then both for {seconds:g} s")
        command = [
            sys.executable,
            "-m",
            "bench.scenarios.neighbour",
            "--greedy",
            url,
            "--seconds",
            str(seconds + WARM_UP_S),
            "--space",
            spaces["big"],
            "--hooked",
            spaces["hooked"],
            "--dead",
            dead,
        ]
        env = dict(os.environ)
        if code is not None:
            env["PYTHONPATH"] = str(code)
        with subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True) as greedy:
            try:
                time.sleep(WARM_UP_S)
                beside = asyncio.run(well_behaved(url, spaces["good"], seconds))
                output, _ = greedy.communicate(timeout=seconds + 60)
            finally:
                if greedy.poll() is None:
                    greedy.kill()
        counts = json.loads(output) if output.strip() else {"error": "no figures"}
    return alone, beside, counts


async def _seed(url: str, database: str, big: int, dead: str) -> dict[str, str]:
    """The well-behaved client's space; the greedy client's big space (written into the
    file) and its space with webhooks to the dead endpoint."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        good = await seed.create_space(client, "well-behaved")
        big_space = await seed.create_space(client, "greedy, big")
        hooked = await seed.create_space(client, "greedy, hooked")
        for _ in range(WEBHOOKS):
            response = await client.post(f"/spaces/{hooked}/webhooks", json={"url": dead})
            response.raise_for_status()
    seed.insert_tasks_directly(database, big_space, big, time.time_ns() // 1000)
    return {"good": good, "big": big_space, "hooked": hooked}


@contextlib.contextmanager
def _dead_endpoint():
    """A URL whose server accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    finally:
        listener.close()


def _row(name: str, title: str, out: Outcomes, seconds: float) -> Row:
    total = sum(out.statuses.values())
    row = Row(
        name,
        title,
        requests_per_s=round(total / seconds, 1),
        p50_ms=round(out.p(0.50), 2),
        p99_ms=round(out.p(0.99), 2),
        requests=total,
        duration_s=seconds,
        errors={str(s): n for s, n in out.statuses.items() if not s or s >= 400},
    )
    row.extra["success"] = round(out.success, 5)
    row.extra["stream_events"] = out.stream_events
    if out.stream_error:
        row.extra["stream_error"] = out.stream_error
    row.extra["mean_ms"] = round(statistics.fmean(out.seconds) * 1000, 2) if out.seconds else None
    return row


def _line(alone: Outcomes, beside: Outcomes) -> str:
    ratio = beside.p(0.99) / alone.p(0.99) if alone.p(0.99) else float("nan")
    return (
        f"success {alone.success:.2%} alone, {beside.success:.2%} beside; p99 "
        f"{alone.p(0.99):.1f} → {beside.p(0.99):.1f} ms ({ratio:.2f}x); stream events "
        f"{alone.stream_events} / {beside.stream_events}"
    )


def neighbour_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """Success ≥ 99.9% and p99 within 2x of alone, beside the greedy client."""
    alone, beside = rows.get("neighbour_alone"), rows.get("neighbour_beside_greedy")
    if alone is None or beside is None or beside.status == "skipped":
        return []
    success = beside.extra.get("success", 0.0)
    ratio = beside.extra.get("p99_vs_alone")
    return [
        Target(
            "neighbour_success",
            f"the well-behaved client succeeds ≥ {SUCCESS_MIN:.1%} beside the greedy one",
            "pass" if success >= SUCCESS_MIN else "fail",
            f"{success:.3%} ({beside.requests} requests)",
            group=NEIGHBOUR,
        ),
        Target(
            "neighbour_p99",
            f"its p99 beside the greedy client ≤ {P99_RATIO_MAX:g}x its p99 alone",
            "pass" if ratio is not None and ratio <= P99_RATIO_MAX else "fail",
            f"{beside.p99_ms} vs {alone.p99_ms} ms ({ratio}x)",
            group=NEIGHBOUR,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=SECONDS["quick"])
    parser.add_argument("--big", type=int, default=BIG["quick"])
    parser.add_argument("--greedy", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--space", help=argparse.SUPPRESS)
    parser.add_argument("--hooked", help=argparse.SUPPRESS)
    parser.add_argument("--dead", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.greedy:  # the greedy client's own process: its counts as JSON on stdout
        greedy = Greedy(args.greedy, args.space, args.hooked, args.dead)
        print(json.dumps(asyncio.run(greedy.run(args.seconds))))
        return 0
    from ..processes import start_headway

    with tempfile.TemporaryDirectory(prefix="headway-neighbour-") as work:
        database = Path(work) / "neighbour.db"
        server = start_headway(
            "headway-neighbour", Path(work), f"sqlite:///{database}", env=SETTINGS
        )
        try:
            alone, beside, greedy = run(server.url, str(database), args.seconds, args.big)
        finally:
            server.stop()
    print(_line(alone, beside))
    for name, out in (("alone", alone), ("beside", beside)):
        print(f"{name}: {dict(out.statuses)}, p50 {out.p(0.5):.1f} ms")
    print(json.dumps(greedy, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
