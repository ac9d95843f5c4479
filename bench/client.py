"""The client's costs to the job it reports on: `python -m bench.client [--smoke]`.

Against a real `headway serve` (fresh SQLite file, rate limits off) on a free port, or the
server at `--url`:

- `tqdm_dropin`: a loop over `headway.tqdm.tqdm` against the same loop over plain
  `tqdm.tqdm`, in the same run, both drawing to /dev/null; nanoseconds per iteration of
  each, best of `--rounds` alternated runs, and their ratio (target: under 1.5x).
- `report`: `Reporter.report(current, end)` on a reporter whose interval holds its next
  request back, so that no request is sent: microseconds per call, best of the rounds
  (target: under 2 µs); and the same with a `log` line.

Prints a table; `--json` prints the figures as JSON instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tqdm as tqdm_module

import headway.tqdm
from headway import Client

from .processes import start_headway

TQDM_RATIO_TARGET = 1.5
REPORT_US_TARGET = 2.0


def tqdm_loop(bar_class: type, iterations: int, **options: Any) -> float:
    """Seconds one loop of `iterations` over a bar of `bar_class` takes."""
    with open(os.devnull, "w") as devnull:
        start = time.perf_counter()
        for _ in bar_class(range(iterations), file=devnull, **options):
            pass
        return time.perf_counter() - start


def tqdm_dropin(client: Client, iterations: int, rounds: int) -> dict[str, float]:
    plain, dropin = [], []
    for _ in range(rounds):
        plain.append(tqdm_loop(tqdm_module.tqdm, iterations))
        dropin.append(tqdm_loop(headway.tqdm.tqdm, iterations, client=client))
    plain_ns, dropin_ns = min(plain) / iterations * 1e9, min(dropin) / iterations * 1e9
    return {
        "iterations": iterations,
        "plain_ns_per_iteration": round(plain_ns, 1),
        "dropin_ns_per_iteration": round(dropin_ns, 1),
        "ratio": round(dropin_ns / plain_ns, 3),
    }


def report_cost(client: Client, calls: int, rounds: int) -> dict[str, float]:
    reporter = client.reporter(title="bench: report", min_interval=3600)
    reporter.report(0, calls)
    reporter.flush(10)  # created and first state sent: the next waits an hour
    report = reporter.report
    bare, logged = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(calls):
            report(i, calls)
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        for i in range(calls):
            report(i, calls, log="copying")
        logged.append(time.perf_counter() - start)
    reporter.finish()
    return {
        "calls": calls,
        "us_per_report": round(min(bare) / calls * 1e6, 3),
        "us_per_report_with_log": round(min(logged) / calls * 1e6, 3),
    }


@contextlib.contextmanager
def _headway_serve() -> Iterator[str]:
    """A `headway serve` of its own, on a fresh SQLite file; its address."""
    with tempfile.TemporaryDirectory(prefix="headway-bench-client-") as workdir:
        server = start_headway(
            "headway",
            Path(workdir),
            f"sqlite:///{workdir}/headway.db",
            env={"HEADWAY_RATE_LIMITS": "false"},
        )
        try:
            yield server.url
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="small counts, one round")
    parser.add_argument("--url", help="measure against this server instead of starting one")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each loop (best kept)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    iterations, calls = (50_000, 50_000) if args.smoke else (3_000_000, 2_000_000)
    rounds = 1 if args.smoke else args.rounds

    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(_headway_serve())
        client = Client(url, min_interval=0.5)
        client.space = client.create_space("bench: client").uuid
        results: dict[str, Any] = {
            "tqdm_dropin": tqdm_dropin(client, iterations, rounds),
            "report": report_cost(client, calls, rounds),
        }
        results["reports_delivered"] = client.close(10)
    results["targets"] = {
        "tqdm_ratio_under_1.5": results["tqdm_dropin"]["ratio"] < TQDM_RATIO_TARGET,
        "report_under_2_us": results["report"]["us_per_report"] < REPORT_US_TARGET,
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    dropin, report = results["tqdm_dropin"], results["report"]
    mark = {True: "PASS", False: "FAIL"}
    print(f"{'measure':<46} {'value':>12}  target")
    print(
        f"{'plain tqdm, ns per iteration':<46} {dropin['plain_ns_per_iteration']:>12.1f}\n"
        f"{'headway.tqdm, ns per iteration':<46} {dropin['dropin_ns_per_iteration']:>12.1f}\n"
        f"{'headway.tqdm / plain tqdm':<46} {dropin['ratio']:>11.3f}x  < 1.5x "
        f"{mark[results['targets']['tqdm_ratio_under_1.5']]}\n"
        f"{'Reporter.report(current, end), µs per call':<46} {report['us_per_report']:>12.3f}  "
        f"< 2 µs {mark[results['targets']['report_under_2_us']]}\n"
        f"{'Reporter.report(current, end, log=...), µs':<46} "
        f"{report['us_per_report_with_log']:>12.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
