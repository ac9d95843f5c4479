"""What Headway counts for Prometheus, and the text a scrape answers.

Counters, the histogram and the stream gauge live in one registry per process, built on
first use and never at import: every app a process builds (tests build many) counts into
the same series, and nothing is registered twice. `refused`, `delivery`, `stream_opened`
and `stream_closed` may be called from anywhere, with or without an app.

Labels never hold what a client sent: a route is its template (`/tasks/{task_uuid}`) or
`unmatched`, a method outside the standard ones is `other`. Space and task uuids are
credentials and never appear in a label; the series stay few whatever clients send.

Under `headway serve --workers N` (N > 1), the server sets PROMETHEUS_MULTIPROC_DIR to a
fresh directory before its worker processes start; each writes its values to files there
and a scrape merges every process's files (prometheus_client's multiprocess mode).

Gauges of the service's state (live progress, the backlogs of webhooks and channels,
open stall episodes) are measured when scraped, each with a short timeout: a scrape
answers while a dependency is down, without that dependency's gauges, and
`headway_dependency_up` says which one did not answer. The metrics port's scrape, in a
thread of its own, measures what this process serves from (`serving`) on their own
event loop and connections: it opens nothing per scrape.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import math
import os
import threading
import weakref
from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .gauges import SCRAPE_TIMEOUT_S, DiskGauges, ServiceState, StoreGauges, measure

if TYPE_CHECKING:
    from ..config import Settings
    from ..storage.database import Database

log = logging.getLogger("headway.metrics")

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what `generate_latest` writes
UNMATCHED = "unmatched"  # the route label of a request no route matched
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Known reasons are counted from 0, so that a rate over them works from the start.
REFUSAL_REASONS = (
    "rate_spaces",
    "rate_tasks",
    "rate_webhooks",
    "rate_shares",
    "rate_reports",
    "rate_channels",
    "rate_creates",
    "rate_streams",
    "network_streams",
    "streams",
    "progress_budget",
    "space_budget",
    "client_budget",
    "redis_oom",
    "connections",
    "header_too_large",
    "timeout",
    "disk",
)
DELIVERY_OUTCOMES = ("delivered", "retry", "given_up")
STALL_CHANGES = ("stalled", "recovered")
# A report takes well under a millisecond, a space read a few; 10 s is a dependency's limit.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


# `observe(route, method, status, seconds)` counts one answered request: `route` is a
# template and `method` one of METHODS or "other", never what a client sent as it was.
REQUESTS_HELP = "HTTP requests answered, by route template, method and status."
DURATION_HELP = "Seconds from a request's arrival to the start of its answer."
_BOUNDS = (*DURATION_BUCKETS, math.inf)
_LE = tuple(floatToGoString(bound) for bound in _BOUNDS)


class RequestTallies:
    """Requests counted in plain numbers, for a process that serves alone: a report pays
    a dictionary lookup and three additions, about 2 µs in all, against 5 µs for
    prometheus_client's locked values. A collector: the series are built from the
    tallies when scraped. All counting happens on the event loop's thread."""

    def __init__(self) -> None:
        # (route, method, status) -> [requests, seconds, then requests per bucket]
        self._tallies: dict[tuple[str, str, int], list[float]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        tally = self._tallies.get((route, method, status))
        if tally is None:
            tally = self._tallies[route, method, status] = [0] * (len(_BOUNDS) + 2)
        tally[0] += 1
        tally[1] += seconds
        tally[2 + bisect_left(_BOUNDS, seconds)] += 1

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        requests, durations = self._families()
        by_route: dict[tuple[str, str], list[float]] = {}
        # A copy taken at once: the metrics port scrapes from a thread of its own.
        for (route, method, status), tally in list(self._tallies.items()):
            requests.add_metric((route, method, str(status)), tally[0])
            total = by_route.setdefault((route, method), [0.0] * (len(_BOUNDS) + 1))
            for index, amount in enumerate(tally[1:]):
                total[index] += amount
        for (route, method), total in by_route.items():
            cumulative = zip(_LE, accumulate(total[1:]), strict=True)
            durations.add_metric((route, method), list(cumulative), sum_value=total[0])
        return [requests, durations]

    @staticmethod
    def _families() -> list[Metric]:
        return [
            CounterMetricFamily(
                "headway_http_requests", REQUESTS_HELP, labels=("route", "method", "status")
            ),
            HistogramMetricFamily(
                "headway_http_request_duration_seconds", DURATION_HELP, labels=("route", "method")
            ),
        ]


class RequestSeries:
    """Requests counted in prometheus_client's values, which in multiprocess mode are
    files that every process's scrape adds up. Each series is bound once and kept."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "headway_http_requests",
            REQUESTS_HELP,
            ("route", "method", "status"),
            registry=registry,
        )
        self._duration = Histogram(
            "headway_http_request_duration_seconds",
            DURATION_HELP,
            ("route", "method"),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        series = self._series.get((route, method, status))
        if series is None:
            series = self._series[route, method, status] = (
                self._requests.labels(route, method, str(status)),
                self._duration.labels(route, method),
            )
        series[0].inc()
        series[1].observe(seconds)


class Instruments:
    """This process's metrics. `observe` counts requests in the cheapest way that works
    here: tallies for a process serving alone, prometheus_client's values (files) for one
    of several worker processes."""

    def __init__(self) -> None:
        self.multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        # No `_created` series: one more series per counter, which neither the tallies
        # nor multiprocess mode write (a setting of prometheus_client's, for the process).
        disable_created_metrics()
        self.registry = registry = CollectorRegistry()
        requests: RequestTallies | RequestSeries
        if self.multiprocess_dir is None:
            requests = RequestTallies()
            registry.register(requests)
        else:
            requests = RequestSeries(registry)
        self.observe = requests.observe
        self.refusals = Counter(
            "headway_refusals",
            "Requests and connections refused to protect the service, by reason.",
            ("reason",),
            registry=registry,
        )
        self.deliveries = Counter(
            "headway_webhook_deliveries",
            "Webhook deliveries, by outcome: delivered, retry (a later attempt is "
            "scheduled) or given_up (after the last attempt, by age, or beyond the "
            "webhook's cap: see headway_deliveries_given_up).",
            ("outcome",),
            registry=registry,
        )
        self.given_up = Counter(
            "headway_deliveries_given_up",
            "Events given up undelivered, by endpoint (webhook or channel) and reason: "
            "attempts (the last failed), age (HEADWAY_DELIVERY_GIVE_UP) or cap (the "
            "oldest beyond HEADWAY_OUTBOX_PER_ENDPOINT).",
            ("endpoint", "reason"),
            registry=registry,
        )
        self.channel_messages = Counter(
            "headway_channel_events",
            "Events for notification channels, by outcome: delivered (alone or in a "
            "digest), retry (a later attempt is scheduled) or given_up.",
            ("outcome",),
            registry=registry,
        )
        self.live_messages = Counter(
            "headway_live_messages",
            "Sends of live messages, by outcome: created, edited, failed (tried again) or "
            "given_up.",
            ("outcome",),
            registry=registry,
        )
        self.stalls = Counter(
            "headway_stall_episodes",
            "Stall episodes told to channels: stalled (began) and recovered (ended).",
            ("change",),
            registry=registry,
        )
        self.deleted_tasks = Counter(
            "headway_deleted_tasks",
            "Tasks deleted, by reason: owner (a DELETE of the task), cap (a full space "
            "made room for a new task), space (removed after their space's delete, its "
            "owner's or retention's: see headway_deleted_spaces).",
            ("reason",),
            registry=registry,
        )
        self.deleted_spaces = Counter(
            "headway_deleted_spaces",
            "Spaces deleted, by reason: owner or retention.",
            ("reason",),
            registry=registry,
        )
        self.removals = Histogram(
            "headway_space_removal_transaction_seconds",
            "Transactions removing deleted spaces' rows a batch at a time, by how long each "
            "held the database's write lock (sized to take about 3 ms on SQLite, 8 ms on "
            "PostgreSQL).",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=registry,
        )
        self.longest_removal = Gauge(
            "headway_space_removal_longest_seconds",
            "The longest of those transactions since the process started.",
            registry=registry,
            multiprocess_mode="max",
        )
        self.loop_failures = Counter(
            "headway_loop_failures",
            "Unexpected errors of background loops (live_render, worker, ...), each logged "
            "with its traceback, after which the loop went on.",
            ("loop",),
            registry=registry,
        )
        self.open_streams = Gauge(
            "headway_open_streams",
            "Live streams open now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.longest_seconds = 0.0
        self._refusals = {reason: self.refusals.labels(reason) for reason in REFUSAL_REASONS}
        self._deliveries = {o: self.deliveries.labels(o) for o in DELIVERY_OUTCOMES}
        for outcome in DELIVERY_OUTCOMES:  # counted from 0, like the webhooks' outcomes
            self.channel_messages.labels(outcome)
        for change in STALL_CHANGES:
            self.stalls.labels(change)
        if self.multiprocess_dir is None:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
        else:
            # This process's share of live gauges (open streams) ends with it; its
            # counters stay, so that the totals of the service never go back.
            atexit.register(mark_process_dead, os.getpid(), self.multiprocess_dir)

    def refused(self, reason: str) -> None:
        child = self._refusals.get(reason)
        if child is None:
            child = self._refusals[reason] = self.refusals.labels(reason)
        child.inc()

    def delivery(self, outcome: str, count: int = 1) -> None:
        self._deliveries[outcome].inc(count)


_instruments: Instruments | None = None
_lock = threading.Lock()


def instruments() -> Instruments:
    """This process's instruments, built on first use."""
    global _instruments
    if _instruments is None:
        with _lock:
            if _instruments is None:
                _instruments = Instruments()
    return _instruments


def refused(reason: str) -> None:
    """Count one refusal: `rate_<kind>`, `progress_budget`, `space_budget`, `client_budget`,
    `redis_oom`, `connections`, `header_too_large`, `timeout` (see REFUSAL_REASONS). A reason is a
    constant of the caller's, never client input. Cheap; needs no app."""
    (_instruments or instruments()).refused(reason)


def delivery(outcome: str, count: int = 1) -> None:
    """Count webhook deliveries with one outcome: delivered, retry or given_up."""
    if count:
        (_instruments or instruments()).delivery(outcome, count)


def given_up(endpoint: str, reason: str, count: int = 1) -> None:
    """Count events given up undelivered: `endpoint` webhook or channel, `reason`
    attempts, age or cap (constants of the caller's)."""
    if count:
        (_instruments or instruments()).given_up.labels(endpoint, reason).inc(count)


def channel_delivery(outcome: str, events: int = 1) -> None:
    """Count `events` channel events with one outcome: delivered, retry or given_up."""
    if events:
        (_instruments or instruments()).channel_messages.labels(outcome).inc(events)


def live_message(outcome: str) -> None:
    """Count one send of a live message: created, edited, failed or given_up."""
    (_instruments or instruments()).live_messages.labels(outcome).inc()


def stall(change: str) -> None:
    """Count one stall episode's `stalled` or `recovered`, or a run told `late`."""
    (_instruments or instruments()).stalls.labels(change).inc()


def deleted(reason: str, tasks: int, spaces: int = 0) -> None:
    """Count what was deleted and why: `owner`, `retention`, `cap` or (tasks removed
    after their space's delete) `space`."""
    instruments_ = _instruments or instruments()
    if tasks:
        instruments_.deleted_tasks.labels(reason).inc(tasks)
    if spaces:
        instruments_.deleted_spaces.labels(reason).inc(spaces)


def removal_transaction(seconds: float) -> None:
    """Count one transaction that removed a batch of a deleted space's rows, and how long
    it held the write lock."""
    instruments_ = _instruments or instruments()
    instruments_.removals.observe(seconds)
    if seconds > instruments_.longest_seconds:
        instruments_.longest_seconds = seconds
        instruments_.longest_removal.set(seconds)


def loop_failed(loop: str) -> None:
    """Count one unexpected error of a background loop (`loop` a constant of the
    caller's): `live_render`, `live_links`, `worker`, `feed_publish`, `feed_subscribe`."""
    (_instruments or instruments()).loop_failures.labels(loop).inc()


def stream_opened() -> None:
    """A live stream opened (pair each with `stream_closed`)."""
    (_instruments or instruments()).open_streams.inc()


def stream_closed() -> None:
    (_instruments or instruments()).open_streams.dec()


# --- Scraping (the state gauges are measured in `gauges`) ------------------------------


def _counted() -> Collector:
    """What this process counted; in multiprocess mode, what every process did (the
    server's parent process, which serves no request, builds no instruments)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        return MultiProcessCollector(None, directory)
    return instruments().registry


def _together(*collectors: Collector) -> CollectorRegistry:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return registry


async def scrape(db: Database, progress: StoreGauges, disk: DiskGauges | None = None) -> bytes:
    """The text of `GET /metrics`: the counters and the state gauges."""
    state = await measure(db, progress, disk)
    return generate_latest(_together(_counted(), state))


class _PortScrape:
    """What the metrics port answers (a collector, run in the port server's thread): the
    counters, and the state of what this process serves from (`serving`)."""

    def collect(self) -> Iterable[Metric]:
        yield from _counted().collect()
        yield from _measure_served().collect()


class _Served(NamedTuple):
    """What this process serves from, for the metrics port (weak references: see
    `serving`), and the event loop whose connections they use."""

    db: weakref.ReferenceType[Database]
    progress: weakref.ReferenceType[StoreGauges] | None
    disk: weakref.ReferenceType[DiskGauges] | None
    loop: asyncio.AbstractEventLoop


_served: _Served | None = None


def serving(db: Database, progress: StoreGauges | None, disk: DiskGauges | None = None) -> None:
    """Name the database, the progress store and the disk budget (None: none to measure)
    this process serves from, for the metrics port's scrape, which measures them on the
    event loop this is called from: call it from theirs. Weak references: what an app
    that is gone used is not kept alive."""
    global _served
    store = None if progress is None else weakref.ref(progress)
    budget = None if disk is None else weakref.ref(disk)
    _served = _Served(weakref.ref(db), store, budget, asyncio.get_running_loop())


def _measure_served() -> ServiceState:
    """The state gauges of what `serving` named, measured on its event loop from this
    thread; none while nothing is named or once its loop has stopped."""
    served = _served
    db = None if served is None else served.db()
    if served is None or db is None or not served.loop.is_running():
        return ServiceState([], {})
    progress = None if served.progress is None else served.progress()
    disk = None if served.disk is None else served.disk()
    measuring = asyncio.run_coroutine_threadsafe(measure(db, progress, disk), served.loop)
    try:
        # `measure` bounds each dependency; this bounds a loop too busy to run it at all.
        return measuring.result(timeout=2 * SCRAPE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        measuring.cancel()
        log.warning("metrics: the serving event loop did not measure in time")
        down = ("database",) if progress is None else ("database", "progress_store")
        return ServiceState([], dict.fromkeys(down, False))


def serve_port(settings: Settings) -> None:
    """Serve the metrics on `settings.metrics_port` (and `settings.host`) from a thread
    of this process: prometheus_client's own server. Raises OSError if the port is taken."""
    from prometheus_client import start_http_server

    assert settings.metrics_port is not None
    start_http_server(settings.metrics_port, addr=settings.host, registry=_together(_PortScrape()))
