"""`create_app(settings, clock)`: the ASGI application. Nothing is created at import time;
the lifespan opens the database and the progress store and closes them again."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any, cast

from starlette.applications import Starlette

from .api import badges as badge_routes
from .api import channels as channel_routes
from .api import client_wheel, events, health, openapi, rest
from .api import estimates as estimate_routes
from .api import jobs as job_routes
from .api import mcp as mcp_routes
from .api import metrics as metrics_routes
from .api import shares as share_routes
from .api import webhooks as webhook_routes
from .api.dispatch import HeadwayApp
from .api.endpoints import Route
from .api.mcp import MCPEndpoint
from .api.visitor import Visitors
from .background.loops import stop
from .background.sweeper import Sweeper
from .coherence import Coherence
from .coherence.local import OneProcess
from .config import Settings
from .delivery.worker import Worker
from .domain.clock import Clock, SystemClock
from .live.streams import Live
from .notify.deliver import channel_sender
from .notify.late import LateWatch
from .notify.live import LiveWatch
from .notify.stalls import StallWatch
from .ops import logs, metrics
from .ops.disk import DiskBudget
from .progress import ProgressStore
from .progress.memory import MemoryProgressStore
from .service import ChannelRules, Service, Wake
from .storage.database import Database
from .web import routes as web_routes

log = logging.getLogger("headway")


def create_app(settings: Settings | None = None, clock: Clock | None = None) -> Starlette:
    """Build the service from settings; the lifespan wires storage and progress store."""
    settings = settings or Settings()
    clock = clock or SystemClock()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        progress = make_progress_store(settings, clock)
        disk = DiskBudget.from_settings(settings, db)
        # For HEADWAY_METRICS_PORT's scrape, in another thread.
        metrics.serving(db, progress, disk)
        app.state.dependencies = health.Dependencies(db, progress, disk, clock)
        # Rates run on real time even where a test moves the service's clock. With Redis,
        # rate counters share its memory with progress (see `limits.Room`).
        app.state.visitors = visitors = Visitors(settings, room=progress.retry_with_room)
        loops: dict[str, asyncio.Task[Any]] = {}  # the app's long-lived tasks (api.health)
        app.state.loops = loops

        def start(name: str, run: Any) -> None:
            loops[name] = asyncio.create_task(run, name=f"headway-{name}")

        coherence = make_coherence(progress)
        feed = coherence.feed
        # Set by a write that queued an event (the worker's), or deleted a space (the
        # sweeper's): each wakes at once rather than at its next poll.
        app.state.events_queued = events_queued = asyncio.Event()
        app.state.spaces_dropped = spaces_dropped = asyncio.Event()
        worker = live = None
        try:
            await db.migrate()
            await disk.refresh()
            if disk.watched:
                start("disk", disk.run())
            service = Service(
                db,
                progress,
                clock,
                coherence,
                allow_private_webhooks=settings.webhook_allow_private,
                webhooks_per_space=settings.webhooks_per_space,
                shares_per_space=settings.shares_per_space,
                outbox_per_endpoint=settings.outbox_per_endpoint,
                channel_rules=ChannelRules(
                    settings.channel_schemes,
                    settings.webhook_allow_private,
                    settings.channels_per_space,
                    settings.public_url,
                ),
                disk=disk,
                wake=Wake(worker=events_queued.set, sweeper=spaces_dropped.set),
            )
            await service.shares.load_secret()  # made by the first start of all
            service.caps.steps_per_parent = settings.children_per_parent
            service.caps.tasks_per_space = settings.tasks_per_space
            app.state.service = service
            app.state.live = live = Live(
                service,
                feed,
                max_streams=settings.max_streams,
            )
            stalls = StallWatch(
                db,
                progress,
                clock,
                service.tasks.event_views,
                scan_s=settings.stall_scan,
                outbox_per_endpoint=settings.outbox_per_endpoint,
                on_queued=events_queued.set,
                also=LateWatch(
                    db,
                    service.estimates.of_tasks,
                    service.tasks.event_views,
                    cap=settings.outbox_per_endpoint,
                ).step,
            )
            app.state.stalls = stalls
            app.state.live_watch = live_watch = LiveWatch(
                db,
                progress,
                clock,
                service.tasks.event_views,
                service.estimates.of_tasks,
                interval_s=settings.live_edit_interval,
                cap=settings.live_messages,
                allow_private=settings.webhook_allow_private,
                link=service.channels.link,
                schemes=settings.channel_schemes,
                endpoints=dict(settings.live_endpoints),
            )
            if settings.run_worker:
                worker = make_worker(settings, db, clock, events_queued)
                start("worker", worker.run())
            start("stalls", stalls.run())
            start("live", live_watch.run())
            retention_us = (
                None if settings.space_retention is None else settings.space_retention * 1_000_000
            )
            app.state.sweeper = sweeper = Sweeper(
                service, db, clock, retention_us, step_s=settings.sweep_every, woken=spaces_dropped
            )
            start("sweeper", sweeper.run())
            async with mcp_endpoint.running():
                yield
            log.info("Headway shutting down: streams end, background work stops")
        finally:
            if live is not None:
                live.end_all()
            await stop(*loops.values())
            if worker is not None:
                await worker.close()
            await visitors.close()
            await coherence.close()
            await progress.close()
            await db.close()

    # A fresh MCP server per app; its tools call the Service the lifespan builds.
    mcp_endpoint = MCPEndpoint(settings, lambda: app.state.service, lambda: app.state.visitors)
    # `/metrics` is on this port unless metrics are off or have a port of their own.
    scraped_here = settings.metrics and settings.metrics_port is None
    app_class = logs.logged(HeadwayApp) if settings.access_log else HeadwayApp
    app = app_class(
        instruments=metrics.instruments() if settings.metrics else None,
        routes=[
            *(
                route
                for surface in surfaces(with_metrics=scraped_here)
                for route in getattr(surface, "routes", ())
            ),
            Route("/mcp", mcp_endpoint.answer),
        ],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.client_wheel = client_wheel.ClientWheel()
    app.state.refusals = logs.RefusalLog()
    app.state.openapi = openapi_document(with_metrics=scraped_here)
    return app


# Every way in but /mcp (whose endpoint each app makes), each a module with its `routes`
# and the OpenAPI `openapi_paths` it adds (the core's are `api.openapi_paths`). The most
# used first: REST's (task reads and reports, creates, space reads), and the share links'
# badges, asked for by every view of every page that shows one.
SURFACES: tuple[ModuleType, ...] = (
    rest,
    badge_routes,
    events,
    share_routes,
    job_routes,
    estimate_routes,
    webhook_routes,
    channel_routes,
    health,
    client_wheel,
    openapi,
    web_routes,
    mcp_routes,
)


def surfaces(*, with_metrics: bool) -> tuple[ModuleType, ...]:
    """The route modules an app serves: `SURFACES`, and `/metrics` when it is scraped on
    the service's own port."""
    return (*SURFACES, metrics_routes) if with_metrics else SURFACES


@functools.cache
def openapi_document(*, with_metrics: bool) -> dict[str, Any]:
    """The OpenAPI document, built once per process (a tenth of an app's start): it
    depends on nothing but whether `/metrics` is served on the service's port."""
    paths: dict[str, Any] = {}
    for surface in surfaces(with_metrics=with_metrics):
        paths.update(getattr(surface, "openapi_paths", {}))
    return openapi.build_document(paths)


def make_worker(
    settings: Settings, db: Database, clock: Clock, woken: asyncio.Event | None = None
) -> Worker:
    """The worker that sends the outbox's webhooks and runs the channels' sends: the one
    in `headway serve`'s process, or `headway worker`'s. `woken` is set by a write that
    queued an event, and by the end of a channel's send."""
    woken = woken or asyncio.Event()
    return Worker(
        db,
        clock,
        allow_private=settings.webhook_allow_private,
        channels=channel_sender(settings, db, clock, on_end=woken.set),
        give_up_s=settings.delivery_give_up,
        woken=woken,
    )


def make_progress_store(settings: Settings, clock: Clock) -> ProgressStore:
    """The progress store the settings ask for: Redis when HEADWAY_REDIS_URL is set."""
    budget = settings.progress_memory_budget
    client_bytes = int(budget * settings.progress_memory_per_client)
    space_bytes = int(budget * settings.progress_memory_per_space)
    if settings.redis_url is not None:
        from .progress.redis import RedisProgressStore

        return RedisProgressStore(
            settings.redis_url,
            settings.progress_ttl,
            clock,
            client_bytes=client_bytes,
            space_bytes=space_bytes,
            tracks=settings.estimates,
        )
    return MemoryProgressStore(
        settings.progress_ttl,
        clock,
        budget_bytes=budget,
        space_bytes=space_bytes,
        client_bytes=client_bytes,
        tracks=settings.estimates,
    )


def make_coherence(progress: ProgressStore) -> Coherence:
    """How instances agree (see `headway.coherence`): several, sharing the Redis store,
    or this process alone, with progress in its memory."""
    if progress.name != "redis":
        return OneProcess(progress)
    from .coherence.shared import SeveralInstances
    from .progress.redis import RedisProgressStore

    return SeveralInstances(cast(RedisProgressStore, progress))


def app_from_env() -> Any:
    """Factory for ASGI servers: `uvicorn --factory headway.app:app_from_env`."""
    return create_app(Settings.from_env())
