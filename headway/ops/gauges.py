"""The gauges of the service's state, measured when `/metrics` is scraped: the outbox's
and the channels' backlogs, live progress, what the database holds, and the disk. A
measurement never raises: a dependency that is down or slow leaves its gauges out and
says so in `headway_dependency_up`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from ..storage import channels, queries, webhooks

if TYPE_CHECKING:
    from ..storage.database import Database

log = logging.getLogger("headway.metrics")
SCRAPE_TIMEOUT_S = 2.0  # per dependency; a scraper's own timeout is usually 10 s


class DiskGauges(Protocol):
    """What the gauges ask of the disk budget (`ops.disk.DiskBudget`)."""

    async def current(self) -> Any: ...

    def gauges(self) -> list[tuple[str, str, float]]: ...


class StoreGauges(Protocol):
    """What the gauges ask of the progress store (`progress.ProgressStore.gauges`)."""

    async def gauges(self) -> Sequence[tuple[str, str, float]]: ...


class ServiceState:
    """Gauges of the service's state measured at one moment (a collector)."""

    def __init__(self, gauges: list[Metric], up: dict[str, bool]) -> None:
        self.gauges = gauges
        self.up = up

    def collect(self) -> Iterable[Metric]:
        yield from self.gauges
        up = GaugeMetricFamily(
            "headway_dependency_up",
            "Whether the dependency answered this scrape's measurements (1) or not (0).",
            labels=("dependency",),
        )
        for dependency, answered in self.up.items():
            up.add_metric((dependency,), 1.0 if answered else 0.0)
        yield up


async def measure(
    db: Database, progress: StoreGauges | None, disk: DiskGauges | None = None
) -> ServiceState:
    """The state gauges, now. Never raises for a dependency that is down or slow."""
    (
        (outbox_gauges, database_up),
        (progress_gauges, store_up),
        held,
        disk_gauges,
    ) = await asyncio.gather(
        _measure_outbox(db), _measure_progress(progress), _measure_held(db), _measure_disk(disk)
    )
    up = {"database": database_up}
    if store_up is not None:
        up["progress_store"] = store_up
    return ServiceState(progress_gauges + outbox_gauges + held + disk_gauges, up)


async def _measure_held(db: Database) -> list[Metric]:
    """How many spaces and tasks the database holds (see docs/retention.md, "Data and
    retention")."""
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            spaces, tasks, deleted = await queries.held_counts(db.fetch)
    except Exception as exc:  # whatever the failure, the scrape still answers
        log.warning("metrics: what is held could not be counted: %s", type(exc).__name__)
        return []
    return [
        _gauge("headway_spaces", "Spaces the database holds.", spaces),
        _gauge("headway_tasks", "Tasks the database holds (steps included).", tasks),
        _gauge(
            "headway_spaces_deleted",
            "Spaces deleted whose rows are still being removed (counted in headway_spaces).",
            deleted,
        ),
    ]


async def _measure_disk(disk: DiskGauges | None) -> list[Metric]:
    """The database's size and its disk's free space, as the disk budget last measured
    them (again if that was a period ago: see `headway.ops.disk`)."""
    if disk is None:
        return []
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            await disk.current()
    except Exception as exc:  # whatever the failure, the scrape still answers
        log.warning("metrics: the disk could not be measured: %s", type(exc).__name__)
    return [_gauge(*measurement) for measurement in disk.gauges()]


async def _measure_outbox(db: Database) -> tuple[list[Metric], bool]:
    """The webhooks' and the channels' backlogs, and the open stall episodes: the
    database's gauges, all or none."""
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            pending, events = await webhooks.backlog(db.fetch)
            channel_pending, stalls_open = await channels.backlog(db.fetch)
    except Exception as exc:  # whatever the failure, the scrape still answers
        log.warning("metrics: the outbox could not be measured: %s", type(exc).__name__)
        return [], False
    return [
        _gauge(
            "headway_channel_deliveries_pending",
            "Channel events not yet delivered or given up (due, being sent or waiting to "
            "retry); a digest sends several in one message.",
            channel_pending,
        ),
        _gauge(
            "headway_stall_episodes_open",
            "Stall episodes open: a task told stalled to a channel and not yet recovered.",
            stalls_open,
        ),
        _gauge(
            "headway_outbox_deliveries_pending",
            "Webhook deliveries not yet made or given up (due, in flight or waiting to retry).",
            pending,
        ),
        _gauge(
            "headway_outbox_events",
            "Completion events in the outbox (each leaves once all its deliveries settle).",
            events,
        ),
    ], True


async def _measure_progress(progress: StoreGauges | None) -> tuple[list[Metric], bool | None]:
    """The store's own gauges (see `ProgressStore.gauges`); None: no store to measure."""
    if progress is None:
        return [], None
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            measured = await progress.gauges()
    except Exception as exc:  # whatever the failure, the scrape still answers
        log.warning("metrics: the progress store could not be measured: %s", type(exc).__name__)
        return [], False
    return [_gauge(*measurement) for measurement in measured], True


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
