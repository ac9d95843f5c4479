"""The command line of `python -m bench.run`: its modes and options, and the scenarios it
reports, in table order."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import flood

RESULTS = Path(__file__).resolve().parent / "results"
DESCRIPTION = "Run Headway's benchmarks: `python -m bench.run [--quick | --smoke] [options]`."

PAGE = 50
FLOOD_PHASE_S = 20.0
# The live stream's scenarios (issue "Watch it live"): 1,000 streams on one space.
STREAMS = 1000
STREAM_TASKS = 100
# The busy space: task creates and reports per second each, on one space, through one
# instance; its streams on each instance, opened before the load; the lag's windows.
BUSY_RATE = 300
BUSY_SECONDS = 60
BUSY_STREAMS = 2
BUSY_WINDOW_S = 10.0
# The badges' space: its tasks, each reported once (bench/scenarios/badges.py).
BADGE_SPACE_TASKS = 100


@dataclass
class Options:
    mode: str
    duration: float
    connections: int
    threads: int
    big: int
    small: int
    children: int
    pool: int
    cursors: int
    results: Path
    profile: bool
    scale_out: bool
    flood_s: float
    flood_concurrency: int
    flood_spaces: int
    streams: int
    busy: bool
    busy_s: float
    compare: Path | None = None
    paired: bool = False
    rounds: int = 2
    only: frozenset[str] = frozenset()
    # (k, n): only the phases k, k + n, k + 2n... (1-based), for a run split over processes.
    part: tuple[int, int] | None = None

    @property
    def settle_s(self) -> float:
        """How long, at most, a measurement waits for the machine to calm down first
        (measure.settle): not at all in smoke mode, whose figures nobody reads (it shows
        that every scenario runs, and runs beside other work)."""
        return 0.0 if self.mode == "smoke" else 5.0


MODES: dict[str, dict[str, Any]] = {
    "full": dict(duration=10, connections=64, threads=2, big=100_000, children=1000, pool=1000,
                 flood_s=FLOOD_PHASE_S, flood_spaces=100, busy_s=BUSY_SECONDS),
    "quick": dict(duration=2, connections=16, threads=2, big=100_000, children=1000, pool=1000,
                  flood_s=5, flood_spaces=100, busy_s=15),
    "smoke": dict(duration=1, connections=2, threads=1, big=1000, children=20, pool=20,
                  flood_s=1, flood_spaces=10, busy_s=3),
}  # fmt: skip


def parse_options(argv: list[str] | None) -> Options:
    parser = _parser()
    args = parser.parse_args(argv)
    name = "smoke" if args.smoke else "quick" if args.quick else "full"
    values = dict(MODES[name])
    keys = ("duration", "connections", "threads", "big", "children", "pool", "flood_s", "busy_s")
    for key in keys:
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if values["connections"] < 1 or values["threads"] < 1 or values["big"] < PAGE + 1:
        parser.error(f"connections and threads must be at least 1, --big at least {PAGE + 1}")
    if not 0 < values["flood_s"] <= 600:
        parser.error("--flood-seconds must be above 0 and at most 600")
    if not 3 <= values["busy_s"] <= 600:
        parser.error("--busy-seconds must be at least 3 and at most 600")
    if args.compare is not None and not (args.compare / "headway" / "__init__.py").is_file():
        parser.error(f"--compare {args.compare}: no headway/ there; give a checkout")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    only = frozenset(name.strip() for name in (args.only or "").split(",") if name.strip())
    if only and args.compare is None:
        parser.error("--only goes with --compare")
    if args.paired and (args.compare is None or only):
        parser.error("--paired goes with --compare, without --only")
    part = None
    if args.part is not None:
        k, slash, n = args.part.partition("/")
        if not (slash and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
            parser.error("--part must be K/N, 1 <= K <= N (e.g. 1/2)")
        part = (int(k), int(n))
    return Options(
        mode=name,
        small=100,
        cursors=10 if args.smoke else 100,
        results=args.results,
        profile=args.profile,
        scale_out=args.scale_out,
        busy=args.busy,
        flood_concurrency=64,
        streams=50 if args.smoke else STREAMS,
        compare=args.compare.resolve() if args.compare is not None else None,
        paired=args.paired,
        rounds=args.rounds,
        only=only,
        part=part,
        **values,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=DESCRIPTION)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="2 s runs, 16 connections")
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="seconds in all: 1 s runs, 2 connections, 1,000-task big space (for CI)",
    )
    parser.add_argument("--duration", type=float, help="seconds per wrk run (default 10)")
    parser.add_argument("--connections", type=int, help="wrk connections (default 64)")
    parser.add_argument("--threads", type=int, help="wrk threads (default 2)")
    parser.add_argument("--big", type=int, help="tasks in the big space (default 100,000)")
    parser.add_argument("--children", type=int, help="children of the parent (default 1,000)")
    parser.add_argument("--pool", type=int, help="tasks PUT/GET spread over (default 1,000)")
    parser.add_argument(
        "--flood-seconds",
        dest="flood_s",
        type=float,
        help="seconds of each flood phase, creating then PUTting values (default 20)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="directory for latest.json and latest.md, or with --compare compare.json and "
        "compare.md (default bench/results)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the server with py-spy during each Headway scenario (adds overhead)",
    )
    parser.add_argument(
        "--no-scale-out",
        dest="scale_out",
        action="store_false",
        help="skip the PostgreSQL + Redis scenarios (one vs two instances, the busy space's)",
    )
    _busy_arguments(parser)
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help="run each Headway phase from DIR's code (another checkout) and from this one, "
        "alternately, and report the CPU per request of each (see bench/compare.py)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="with --compare: runs of each side (default 2)"
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="with --compare: the old and the new server at once, measured in turn in short "
        "slices on the hot path's loads (see bench/pairs.py)",
    )
    parser.add_argument(
        "--part",
        metavar="K/N",
        help="only every Nth phase from the Kth (1/2 and 2/2 split a run over two "
        "processes; the smoke test runs both at once); rows of other phases are left out",
    )
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help="with --compare: only the phases that measure these scenarios (comma-separated, "
        "e.g. scale_out_one)",
    )
    return parser


def _busy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--busy-seconds",
        dest="busy_s",
        type=float,
        help="seconds of the busy space's load (default 60, --quick 15, --smoke 3)",
    )
    parser.add_argument(
        "--no-busy",
        dest="busy",
        action="store_false",
        help="skip the busy space's live-stream lag scenarios",
    )


def scenario_titles(o: Options) -> dict[str, str]:
    """Every scenario the run reports, in table order."""
    return {
        "baseline": "bare ASGI baseline: GET / (fixed 325-byte JSON)",
        "put_report": f"PUT /tasks/{{t}} (spread over {o.pool:,} tasks)",
        "put_report_hot": "the same PUT, every connection on one task",
        "put_report_limited": "the same PUT, rate limits on at their defaults",
        "put_report_plain": (
            "the same PUT on a fresh server looking for stalls every second, no channel"
        ),
        "put_report_notified": (
            "the same PUT and server, its pool's space with completed, failed and stalled channels"
        ),
        "put_report_unswept": (
            f"the same PUT on a fresh server holding an idle space of {o.big:,} tasks, kept"
        ),
        "put_report_swept": (
            "the same PUT and server, the sweeper deleting the idle space meanwhile"
        ),
        "outbox_claim": (
            "outbox, SQLite: claiming 8 due deliveries with 10 / 100,000 / 1,000,000 pending "
            "to a dead endpoint (--quick: to 100,000, --smoke: 1,000); creates and finishes "
            "beside a worker meanwhile"
        ),
        "outbox_claim_postgres": "outbox: the same on PostgreSQL",
        "space_delete": (
            f"DELETE of a space of {o.big:,} tasks, SQLite: "
            "other clients' creates and finishes while its rows are removed, against the "
            "same writes just before"
        ),
        "space_delete_postgres": "space delete: the same on PostgreSQL",
        "neighbour_alone": (
            "hostile neighbour: a well-behaved client (100 req/s: creates, reports, reads, "
            "finishes, one stream) alone on a fresh embedded server"
        ),
        "neighbour_beside_greedy": (
            "the same client beside a greedy one (progress, whole reads of a big space, "
            "streams, dead webhooks; never waits for Retry-After)"
        ),
        "stall_latency": (
            "a stall's deadline to its message: 50 tasks reported once over 15 s, "
            "stalled_after 60 s, a look every 15 s (full run only)"
        ),
        "get_report": "GET /tasks/{t}/report?current=5&end=10&values[log]=x",
        "get_task": "GET /tasks/{t}",
        "get_task_limited": "the same GET, rate limits on (reads counted)",
        "post_task": "POST /spaces/{s}/tasks",
        "get_space_small": f"GET /spaces/{{s}}, {o.small} tasks",
        "get_space_small_page": f"GET /spaces/{{s}}?limit={PAGE}&before=…, {o.small} tasks",
        "get_space_big_page": f"GET /spaces/{{s}}?limit={PAGE}&before=…, {o.big:,} tasks",
        "get_space_big": f"GET /spaces/{{s}}, {o.big:,} tasks, no parameters (1 connection)",
        "get_parent": f"GET /tasks/{{t}}, parent of {o.children:,} children",
        "baseline_parent": (
            "bare ASGI baseline sending a fixed body the size of that parent's answer, "
            "after spending its CPU per request"
        ),
        "baseline_put": (
            "bare ASGI baseline (fixed 325-byte JSON) after spending the CPU of one PUT "
            "(spread over 1,000 tasks) per request"
        ),
        "memory": f"memory: RSS with {o.big:,} tasks holding progress",
        **{
            name: (
                f"memory against the progress budget: {count:,} tasks holding progress, "
                "filled in-process"
            )
            for name, count in zip(
                ("memory_budget", "memory_budget_large"),
                (1_000, 10_000) if o.mode == "smoke" else (100_000, 1_000_000),
                strict=True,
            )
        },
        "flood_create": (
            f"flood from {flood.FLOOD_ADDRESS}, defaults: {o.flood_concurrency} at once create "
            f"{o.flood_spaces} spaces, then tasks ({o.flood_s:g} s)"
        ),
        "flood_values": f"flood: PUT ~60 KB values to each task it created ({o.flood_s:g} s)",
        "flood_memory": "flood: server RSS, peak over before the flood",
        "flood_bystander": (
            f"flood: well-behaved client on {flood.BYSTANDER_ADDRESS}, a PUT every "
            f"{flood.REPORT_EVERY_S * 1000:.0f} ms"
        ),
        "streams_none": f"PUT over {STREAM_TASKS} tasks of one space, no stream open",
        "streams_put": f"the same PUT with {o.streams:,} streams of the space open and read",
        "streams_latency": f"report-to-event latency on {o.streams:,} streams, under that PUT",
        "streams_memory": f"memory per open stream ({o.streams:,} streams, server RSS)",
        "badge_get_task": f"GET /tasks/{{t}}, {BADGE_SPACE_TASKS} tasks (the badges' control)",
        "badge": "GET /shared/{s}/tasks/{id}/badge.svg over the same tasks",
        "badge_space": f"GET /shared/{{s}}/badge.svg, a space of {BADGE_SPACE_TASKS} tasks",
        "jobs_few": "GET /spaces/{s}/jobs: 2 jobs holding 100 runs",
        "jobs_many": (
            "GET /spaces/{s}/jobs: 2 jobs holding "
            f"{10_000 if o.mode == 'smoke' else 100_000:,} runs"
        ),
        "put_tracked": "the same PUT on a fresh server keeping tasks' tracks (estimates on)",
        "put_untracked": "the same PUT on a fresh server with HEADWAY_ESTIMATES=false",
        "put_live": "the same PUT on a fresh server, its pool's space with a live channel",
        "put_quiet": "the same PUT on a fresh server with no channel",
        "put_live_hot": "PUTs to one task of the live space as fast as wrk goes, `current` moving",
        "busy_embedded": (
            f"busy space, embedded: {BUSY_RATE} creates/s + {BUSY_RATE} reports/s for "
            f"{o.busy_s:g} s; lag of its {BUSY_STREAMS} streams"
        ),
        "busy_a": (
            f"busy space, PostgreSQL + Redis: the same load on instance A; lag of A's "
            f"{BUSY_STREAMS} streams"
        ),
        "busy_b": f"busy space, PostgreSQL + Redis: lag of instance B's {BUSY_STREAMS} streams",
        "scale_out_one": "PUT, PostgreSQL + Redis, one instance",
        "scale_out_two": "PUT, PostgreSQL + Redis, two instances",
    }
