"""The measuring every scenario of `python -m bench.run` shares: the run's servers and rows,
one wrk run with its CPU (and RSS) readings, the calibration rows, and the formatting."""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import profile
from .load import Load, LoadResult, run_wrk
from .options import Options, scenario_titles
from .processes import (
    RssSampler,
    ServerProcess,
    machine_cpu,
    postmaster_pid,
    start_baseline,
    start_headway,
    tree_cpu_seconds,
)
from .report import MB, Row

# How many wrk runs a smoke row takes at most, each four times longer than the one before,
# to have an answer (1 + 4 + 16 s for the smoke's one second).
SMOKE_TRIES = 3


class Skip(Exception):
    """A scenario cannot run here; the message says why."""


class Harness:
    """One run: the servers it started, the rows measured so far."""

    def __init__(self, options: Options, workdir: Path) -> None:
        self.o = options
        self.workdir = workdir
        self.titles = scenario_titles(options)
        self.rows: dict[str, Row] = {}
        self.servers: list[ServerProcess] = []
        self.cleanups: list[Callable[[], None]] = []
        self.started = time.monotonic()
        self.profiles: dict[str, dict[str, Any]] = {}
        # The checkout whose `headway` the Headway servers run (--compare); None: this one.
        self.code: Path | None = None

    # --- Output and bookkeeping -------------------------------------------------------

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    def record(self, row: Row) -> Row:
        self.rows[row.name] = row
        if row.status == "skipped":
            self.say(f"{row.name}: skipped: {row.reason}")
        elif row.requests_per_s is not None:
            self.say(
                f"{row.name}: {row.requests_per_s:,.0f} req/s, p50 {_num(row.p50_ms, 2)} ms, "
                f"p99 {_num(row.p99_ms, 2)} ms" + (f" ({row.reason})" if row.reason else "")
            )
        else:
            self.say(f"{row.name}: {row.extra.get('note') or row.reason}")
        return row

    @contextlib.contextmanager
    def phase(self, names: list[str]) -> Iterator[None]:
        """Run a group of scenarios; on failure, mark those not yet measured and go on."""
        try:
            yield
        except Skip as exc:
            for name in names:
                if name not in self.rows:
                    self.record(Row(name, self.titles[name], "skipped", str(exc)))
        except Exception as exc:
            self.say(f"error: {type(exc).__name__}: {exc}")
            traceback.print_exc()
            for name in names:
                if name not in self.rows:
                    reason = f"{type(exc).__name__}: {str(exc)[:300]}"
                    self.record(Row(name, self.titles[name], "error", reason))

    def start(
        self, starter: Callable[..., ServerProcess], *args: Any, **kwargs: Any
    ) -> ServerProcess:
        server = starter(*args, **kwargs)
        self.servers.append(server)
        self.say(f"started {server.name} (pid {server.pid}) on {server.url}")
        return server

    def start_headway(
        self, name: str, database_url: str, redis_url: str | None = None, **kwargs: Any
    ) -> ServerProcess:
        """`headway serve` in the work directory (see `processes.start_headway`), running
        the code of `self.code`."""
        return self.start(
            start_headway, name, self.workdir, database_url, redis_url, code=self.code, **kwargs
        )

    def stop(self, server: ServerProcess) -> None:
        server.stop()
        if server in self.servers:
            self.servers.remove(server)
        self.say(f"stopped {server.name} (pid {server.pid})")

    def stop_everything(self) -> None:
        """Stop every process this run started, each by its own PID."""
        for server in list(reversed(self.servers)):
            try:
                self.stop(server)
            except Exception as exc:
                self.say(f"could not stop {server.name} (pid {server.pid}): {exc}")
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        self.cleanups.clear()

    # --- Measuring --------------------------------------------------------------------

    def measure(
        self,
        server: ServerProcess,
        name: str,
        load: Load,
        *,
        connections: int | None = None,
        threads: int | None = None,
        duration: float | None = None,
        timeout: float = 10.0,
        sample_rss: bool = False,
        others: dict[str, Callable[[], float]] | None = None,
        starting: Callable[[], None] | None = None,
    ) -> Row:
        """One wrk run of `load` against `server`, with the server's CPU time per request.
        `starting`: called once the machine has settled, just before the load starts.

        `sample_rss`: also sample the server's RSS during the run (`rss_growth_mb`: peak
        minus just before). `others`: CPU-seconds readers of other processes (PostgreSQL,
        Redis), whose CPU per request goes in `cpu_us_per_request_of` with the server's,
        and the machine's busy share during the run in `machine_busy`."""
        duration = duration or self.o.duration
        connections = connections or self.o.connections
        self.say(f"{name}: wrk {duration:g} s, {connections} connections")
        profiler = self._profiler(server, name, duration)
        settle(limit_s=self.o.settle_s)
        if starting is not None:
            starting()
        others = others or {}
        others_before = {k: read() for k, read in others.items()}
        machine_before = machine_cpu()
        sampler = RssSampler(server.pid).start() if sample_rss else None
        cpu_before = server.cpu_seconds()
        try:
            # A smoke run proves that the load ran, not how fast: on a machine too busy to
            # answer within its second, it runs again, longer, until something answered.
            tries = SMOKE_TRIES if self.o.mode == "smoke" else 1
            for attempt in range(tries):
                result = run_wrk(
                    server.url,
                    load,
                    duration=duration * 4**attempt,
                    connections=connections,
                    threads=threads or self.o.threads,
                    workdir=self.workdir,
                    timeout=timeout,
                )
                if result.requests:
                    break
                self.say(f"{name}: no answer in {duration * 4**attempt:g} s; again, longer")
        finally:
            if sampler is not None:
                sampler.stop()
        cpu = server.cpu_seconds() - cpu_before
        row = self.finish_row(Row.measured(name, self.titles[name], result, cpu), result)
        if sampler is not None:
            row.extra.update(rss_extra(sampler))
        if others:
            spent = {k: read() - others_before[k] for k, read in others.items()}
            row.extra.update(others_extra(cpu, spent, result.requests))
            row.extra["machine_busy"] = machine_busy(machine_before)
        if profiler is not None:
            self.profiles[name] = profile.finish(profiler)
        return self.record(row)

    def _profiler(self, server: ServerProcess, name: str, duration: float) -> Any:
        """With --profile, py-spy on a Headway server for the run (None otherwise)."""
        if self.o.profile and server.name != "baseline":
            out = self.workdir / f"profile-{name}.txt"
            return profile.start(server.pid, duration, out)
        return None

    def finish_row(self, row: Row, result: LoadResult) -> Row:
        if result.requests == 0:
            row.status = "error"
            row.reason = "no request completed within the run"
        baseline = self.rows.get("baseline")
        if baseline and baseline.requests_per_s and row.requests_per_s is not None:
            row.ratio_to_baseline = round(row.requests_per_s / baseline.requests_per_s, 3)
        return row

    def calibrate(
        self, name: str, scenario: Row, what: str, env: dict[str, str] | None = None
    ) -> None:
        """Measure the bare server as row `name`, spending `scenario`'s CPU per request
        before each answer (and sending the body `env` sets): its p99 beside the
        scenario's."""
        assert scenario.cpu_us_per_request is not None
        burn = scenario.cpu_us_per_request
        server = self.start(
            start_baseline, self.workdir, {**(env or {}), "BENCH_BURN_US": str(round(burn))}
        )
        try:
            row = self.measure(server, name, Load("GET", ["/"]))
            body = env.get("BENCH_BODY_BYTES") if env else None
            row.extra["note"] = (
                (f"{int(body):,}-byte body after " if body else "after ")
                + f"{burn:,.0f} µs of CPU: p99 {_num(row.p99_ms)} ms vs "
                + f"{_num(scenario.p99_ms)} ms for {what}"
            )
        finally:
            self.stop(server)


def backend_cpu_readers(
    postgres_data: Path, redis_pid: int | None
) -> dict[str, Callable[[], float]]:
    """CPU-seconds readers of PostgreSQL (its postmaster and every backend: the process
    tree under the PID in postmaster.pid) and Redis (its one process, threads included)."""
    readers: dict[str, Callable[[], float]] = {}
    postmaster = postmaster_pid(postgres_data)
    if postmaster is not None:
        readers["postgresql"] = lambda: tree_cpu_seconds(postmaster)
    if redis_pid is not None:
        readers["redis"] = lambda: tree_cpu_seconds(redis_pid)
    return readers


def rss_extra(sampler: RssSampler) -> dict[str, Any]:
    """A run's RSS figures: before it, its peak, the growth."""
    return {
        "rss_before_mb": round(sampler.before / MB, 1),
        "peak_rss_mb": round(sampler.peak / MB, 1),
        "rss_growth_mb": round(sampler.growth / MB, 1),
        "rss_samples": sampler.samples,
    }


def others_extra(cpu: float, spent: dict[str, float], requests: int) -> dict[str, Any]:
    """CPU per request of the Headway server(s) and of the other processes measured."""
    if not requests:
        return {}
    per = {"headway": round(cpu * 1e6 / requests, 1)}
    per.update({k: round(v * 1e6 / requests, 1) for k, v in spent.items()})
    return {"cpu_us_per_request_of": per}


def settle(quiet: float = 0.15, window_s: float = 0.25, limit_s: float = 5.0) -> None:
    """Before a measurement: write back what earlier phases left to write (a stopped
    server's database pages), then wait, up to `limit_s`, until the machine is at most
    `quiet` busy over `window_s`, so that one scenario does not pay for the last."""
    os.sync()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = machine_cpu()
        time.sleep(window_s)
        if machine_busy(before) <= quiet:
            return


def machine_busy(before: tuple[float, float]) -> float:
    """The machine's busy share of all its CPUs' time since `before` (machine_cpu())."""
    busy, total = machine_cpu()
    elapsed = total - before[1]
    return round((busy - before[0]) / elapsed, 3) if elapsed > 0 else 0.0


def cpu_note(extra: dict[str, Any]) -> str:
    per = extra.get("cpu_us_per_request_of")
    if not per:
        return ""
    parts = ", ".join(f"{k} {v:,.1f}" for k, v in per.items())
    busy = extra.get("machine_busy")
    return f"CPU µs/req: {parts}" + (f"; machine {busy:.0%} busy" if busy is not None else "")


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"
