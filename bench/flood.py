"""The flood scenario: one anonymous address floods a default server while a
well-behaved client keeps reporting from another.

The server is `headway serve` with every setting at its default (rate limits on, the
live-progress budget sized from the machine). While it runs:

- the **bystander**, on 127.0.0.1 in the harness process, creates one space and one task,
  then reports to it every 200 ms with a small body, recording each answer's latency and
  status, from before the flood until after it;
- the **flood**, a separate process (`python -m bench.flood`, so its CPU never delays the
  bystander's event loop) bound to 127.0.0.2, keeps `concurrency` requests in flight: for
  one phase it creates `spaces` spaces, then tasks across them, as fast as it can; for a
  second phase it PUTs maximal `values` (60 members of 1,000 characters, ~60 KB) to every
  task it managed to create, round and round. It ignores `Retry-After`;
- a thread samples the server's `VmRSS` every 150 ms; `VmHWM` gives the peak.

Every phase lasts its time, and longer only until it has had LEAST_ANSWERS answers (a
busy machine may answer none within a short phase: the smoke test's one second), and the
flood process is killed by its PID if it overruns. Both clients talk only to 127.0.0.1
(the flood from source address 127.0.0.2: the whole of 127/8 is loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import ssl
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

FLOOD_ADDRESS = "127.0.0.2"
BYSTANDER_ADDRESS = "127.0.0.1"
MARKER = "FLOOD_RESULT "
REPORT_EVERY_S = 0.2
SAMPLE_EVERY_S = 0.15
VALUE_MEMBERS = 60
VALUE_CHARS = 1000
ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The answers each phase has at least, however long they take (see above).
LEAST_ANSWERS = 20


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1) of `values`, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def big_report() -> bytes:
    """A report whose `values` are as large as the service accepts: 60 members of 1,000
    characters (~60 KB of JSON, under the 64 KiB body limit)."""
    values = {
        f"k{i:02d}": "".join(chr(97 + (i * 7 + j) % 26) for j in range(VALUE_CHARS))
        for i in range(VALUE_MEMBERS)
    }
    return json.dumps({"current": 1, "end": 2, "values": values}).encode()


# --- The flood (runs in its own process) ---------------------------------------------------


@dataclass
class Tally:
    """One phase's answers: counted by status, with their latencies."""

    started: float = 0.0
    ended: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)

    def answered(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> dict[str, Any]:
        elapsed = max(1e-9, self.ended - self.started)
        answered = self.answered()
        return {
            "started": self.started,
            "ended": self.ended,
            "seconds": round(self.ended - self.started, 2),
            "requests": answered,
            "requests_per_s": round(answered / elapsed, 1),
            "statuses": dict(self.statuses),
            "p50_ms": percentile(self.latencies_ms, 0.50),
            "p99_ms": percentile(self.latencies_ms, 0.99),
        }


async def _send(client: httpx.AsyncClient, tally: Tally, method: str, path: str,
                **kwargs: Any) -> httpx.Response | None:  # fmt: skip
    started = time.perf_counter()
    try:
        response = await client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        tally.statuses[type(exc).__name__] += 1
        await asyncio.sleep(0.01)  # a dead server must not turn this into a busy loop
        return None
    tally.latencies_ms.append((time.perf_counter() - started) * 1000)
    tally.statuses[str(response.status_code)] += 1
    return response


async def flood(url: str, *, phase_s: float, concurrency: int, spaces: int) -> dict[str, Any]:
    """Create `spaces` spaces then tasks for `phase_s`, then PUT big values to every task
    created for `phase_s`, `concurrency` requests at a time, from FLOOD_ADDRESS.

    Each of the `concurrency` workers has its own client and connection: httpx's pool
    slows down sharply with many connections in one client (46 vs 305 PUTs/s measured
    at 64), and the flood should be as fast as this process can make it.
    """
    tls = ssl.create_default_context()  # unused over http, but costly to make 64 times
    clients = [
        httpx.AsyncClient(
            base_url=url,
            transport=httpx.AsyncHTTPTransport(
                verify=tls, local_address=FLOOD_ADDRESS, limits=httpx.Limits(max_connections=1)
            ),
            timeout=30.0,
        )
        for _ in range(concurrency)
    ]
    space_ids: list[str] = []
    task_ids: list[str] = []
    held: set[str] = set()
    create, values = Tally(), Tally()
    tasks_asked = 0
    try:
        create.started = time.monotonic()
        deadline = create.started + phase_s
        pending = 0

        async def make_spaces(client: httpx.AsyncClient) -> None:
            nonlocal pending
            while len(space_ids) + pending < spaces and time.monotonic() < deadline:
                pending += 1
                try:
                    response = await _send(client, create, "POST", "/spaces", json={"title": "x"})
                finally:
                    pending -= 1
                if response is not None and response.status_code == 201:
                    space_ids.append(response.json()["uuid"])

        await asyncio.gather(*(make_spaces(c) for c in clients))
        spaces_at = time.monotonic()
        turn = itertools.count()

        async def make_tasks(client: httpx.AsyncClient) -> None:
            nonlocal tasks_asked
            while space_ids and (time.monotonic() < deadline or tasks_asked < LEAST_ANSWERS):
                tasks_asked += 1
                space = space_ids[next(turn) % len(space_ids)]
                response = await _send(
                    client, create, "POST", f"/spaces/{space}/tasks", json={"title": "x"}
                )
                if response is not None and response.status_code == 201:
                    task_ids.append(response.json()["uuid"])

        await asyncio.gather(*(make_tasks(c) for c in clients))
        create.ended = time.monotonic()

        body = big_report()
        headers = {"content-type": "application/json"}
        values.started = time.monotonic()
        deadline = values.started + phase_s
        turn = itertools.count()

        async def put_values(client: httpx.AsyncClient) -> None:
            while task_ids and (time.monotonic() < deadline or values.answered() < LEAST_ANSWERS):
                task = task_ids[next(turn) % len(task_ids)]
                response = await _send(
                    client, values, "PUT", f"/tasks/{task}", content=body, headers=headers
                )
                if response is not None and response.status_code == 200:
                    held.add(task)

        await asyncio.gather(*(put_values(c) for c in clients))
        values.ended = time.monotonic()
    finally:
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
    return {
        "address": FLOOD_ADDRESS,
        "concurrency": concurrency,
        "spaces_created": len(space_ids),
        "spaces_seconds": round(spaces_at - create.started, 2),
        "tasks_created": len(task_ids),
        "tasks_holding_values": len(held),
        "values_body_bytes": len(body),
        "create": create.summary(),
        "values": values.summary(),
    }


def main(argv: list[str]) -> int:
    """`python -m bench.flood URL '{"phase_s": .., "concurrency": .., "spaces": ..}'`"""
    url, params = argv[0], json.loads(argv[1])
    result = asyncio.run(flood(url, **params))
    print(MARKER + json.dumps(result), flush=True)
    return 0


# --- The harness's side: the bystander, the RSS samples, the flood process ---------------


@dataclass
class FloodRun:
    """Everything the scenario measured (times are `time.monotonic()`, shared by both
    processes: CLOCK_MONOTONIC is system-wide)."""

    flood: dict[str, Any]
    reports: list[tuple[float, float | None, str]]  # (sent at, latency ms, status)
    rss_before: int
    samples: list[tuple[float, int, float]]  # the server's (when, RSS bytes, CPU seconds)
    peak_rss: int
    rss_after: int
    server_alive: bool
    server_after: str

    def cpu_between(self, start: float, end: float) -> float | None:
        """The server's CPU seconds between two moments, from the nearest samples."""
        before = [cpu for when, _, cpu in self.samples if when <= start]
        after = [cpu for when, _, cpu in self.samples if when >= end]
        if not before or not after:
            return None
        return after[0] - before[-1]

    def bystander(self, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        """The bystander's reports sent within [start, end): latency and answers."""
        chosen = [
            r for r in self.reports
            if (start is None or r[0] >= start) and (end is None or r[0] < end)
        ]  # fmt: skip
        latencies = [ms for _, ms, status in chosen if status == "200" and ms is not None]
        statuses = Counter(status for _, _, status in chosen)
        return {
            "reports": len(chosen),
            "statuses": dict(statuses),
            "refused": statuses["429"] + statuses["503"],
            "failed": sum(n for s, n in statuses.items() if s not in ("200", "429", "503")),
            "p50_ms": percentile(latencies, 0.50),
            "p99_ms": percentile(latencies, 0.99),
            "max_ms": max(latencies, default=None),
        }


class Sampler(threading.Thread):
    """VmRSS and CPU time of one process every SAMPLE_EVERY_S, until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, int, float]] = []  # (when, RSS bytes, CPU seconds)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                rss = status_kib(self.pid, "VmRSS") * 1024
                self.samples.append((time.monotonic(), rss, cpu_seconds(self.pid)))
            except (OSError, RuntimeError, IndexError):
                return  # the process is gone
            self.halt.wait(SAMPLE_EVERY_S)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


async def _bystander(url: str, stop: asyncio.Event, ready: asyncio.Event,
                     reports: list[tuple[float, float | None, str]]) -> None:  # fmt: skip
    """One space, one task, then a small report every REPORT_EVERY_S until `stop`."""
    transport = httpx.AsyncHTTPTransport(local_address=BYSTANDER_ADDRESS)
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=10.0) as client:
        response = await client.post("/spaces", json={"title": "well-behaved"})
        response.raise_for_status()
        space = response.json()["uuid"]
        response = await client.post(f"/spaces/{space}/tasks", json={"title": "steady"})
        response.raise_for_status()
        task = response.json()["uuid"]
        ready.set()
        next_at = time.monotonic()
        for step in itertools.count(1):
            if stop.is_set():
                return
            body = {"current": step, "end": 1_000_000_000, "values": {"log": f"step {step:08d}"}}
            sent = time.monotonic()
            started = time.perf_counter()
            try:
                response = await client.put(f"/tasks/{task}", json=body)
                latency: float | None = (time.perf_counter() - started) * 1000
                status = str(response.status_code)
            except httpx.HTTPError as exc:
                latency, status = None, type(exc).__name__
            reports.append((sent, latency, status))
            # A steady cadence: a late answer delays the next report, never doubles it.
            next_at = max(next_at + REPORT_EVERY_S, time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), next_at - time.monotonic())


async def run(
    url: str,
    pid: int,
    *,
    phase_s: float,
    concurrency: int,
    spaces: int,
    settle_s: float,
    say: Any = print,
) -> FloodRun:
    """The whole scenario against the server at `url` (process `pid`)."""
    sampler = Sampler(pid)
    sampler.start()
    stop, ready = asyncio.Event(), asyncio.Event()
    reports: list[tuple[float, float | None, str]] = []
    bystander = asyncio.create_task(_bystander(url, stop, ready, reports))
    process: asyncio.subprocess.Process | None = None
    try:
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({bystander, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if bystander.done():
            bystander.result()  # its setup failed: raise why
        if not ready.is_set():
            raise RuntimeError("the well-behaved client could not create its task in 30 s")
        await asyncio.sleep(settle_s)  # a few calm reports first
        rss_before = status_kib(pid, "VmRSS") * 1024
        params = {"phase_s": phase_s, "concurrency": concurrency, "spaces": spaces}
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.flood", url, json.dumps(params),
            cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        say(f"flood: pid {process.pid} from {FLOOD_ADDRESS}, {concurrency} at once, "
            f"{phase_s:g} s creating, {phase_s:g} s PUTting values")  # fmt: skip
        limit = 2 * phase_s + 60
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), limit)
        except TimeoutError:
            raise RuntimeError(f"the flood did not finish within {limit:.0f} s") from None
        found = None
        for line in stdout.decode(errors="replace").splitlines():
            if line.startswith(MARKER):
                found = json.loads(line[len(MARKER) :])
        if found is None:
            tail = (stderr or stdout).decode(errors="replace").strip()[-800:]
            raise RuntimeError(f"the flood exited {process.returncode}: {tail}")
        await asyncio.sleep(settle_s)  # and a few after it
        if bystander.done():
            bystander.result()  # raise what stopped it early
    finally:
        if process is not None and process.returncode is None:
            process.kill()  # our own child, by its PID
            await process.wait()
        stop.set()
        await asyncio.wait({bystander}, timeout=15)
        if not bystander.done():
            bystander.cancel()
        sampler.halt.set()
        sampler.join(timeout=5)
    alive = True
    try:
        peak = status_kib(pid, "VmHWM") * 1024
        after = status_kib(pid, "VmRSS") * 1024
    except (OSError, RuntimeError):
        alive, peak, after = False, 0, 0
    peak = max([peak, *(rss for _, rss, _ in sampler.samples)])
    server_after = "gone"
    if alive:
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
                server_after = str((await client.get("/up")).status_code)
        except httpx.HTTPError as exc:
            server_after = type(exc).__name__
    return FloodRun(
        flood=found,
        reports=reports,
        rss_before=rss_before,
        samples=sampler.samples,
        peak_rss=peak,
        rss_after=after,
        server_alive=alive,
        server_after=server_after,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
