"""`create_app(settings, clock)`: the ASGI application. Nothing is created at import time;
the lifespan opens the database and the progress store and closes them again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from time import perf_counter
from typing import Any, cast

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from . import logs, metrics
from .api import badges as badge_routes
from .api import channels as channel_routes
from .api import client_wheel, events, health, hot, openapi
from .api import mcp as mcp_routes
from .api import metrics as metrics_routes
from .api import shares as share_routes
from .api import webhooks as webhook_routes
from .api.hot import HotRoute, short_way
from .api.mcp import MCPEndpoint
from .api.responses import (
    CORS_NAMES,
    EVERY_ANSWER,
    REST_ANSWER,
    JSONResponse,
    SendWithHeaders,
    error_response,
    preflight_response,
)
from .clock import Clock, SystemClock
from .coherence import Coherence
from .coherence.local import OneProcess
from .config import Settings
from .dependencies import unavailable
from .disk import DiskBudget
from .errors import UNAVAILABLE_MESSAGE, HeadwayError, Unavailable, error_body
from .limits import RateLimiter
from .live import Live
from .notify.deliver import channel_sender
from .notify.stalls import StallWatch
from .progress import ProgressStore
from .progress.memory import MemoryProgressStore
from .scope import RAW_SEND
from .service import ChannelRules, Service, Wake
from .storage.database import Database
from .sweeper import Sweeper
from .web import routes as web_routes
from .worker import Worker

log = logging.getLogger("headway")

RETRY_SOON = {"retry-after": "5"}


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
        # Rates run on real time even where a test moves the service's clock.
        app.state.limiter = limiter = RateLimiter(settings)
        app.state.loops = {}  # the app's own long-lived tasks, by name (see api.health)
        coherence = make_coherence(progress)
        feed = coherence.feed
        # Set by a write that queued an event (the worker's), or deleted a space (the
        # sweeper's): each wakes at once rather than at its next poll.
        app.state.events_queued = events_queued = asyncio.Event()
        app.state.spaces_dropped = spaces_dropped = asyncio.Event()
        worker_task = None
        stalls_task = None
        sweeper_task = None
        disk_task = None
        live = None
        try:
            await db.migrate()
            await disk.refresh()
            if disk.watched:
                disk_task = asyncio.create_task(disk.run(), name="headway-disk")
                app.state.loops["disk"] = disk_task
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
                per_client=settings.streams_per_client if settings.rate_limits else None,
                per_network=settings.streams_per_network if settings.rate_limits else None,
            )
            stalls = StallWatch(
                db,
                progress,
                clock,
                service.event_views,
                scan_s=settings.stall_scan,
                outbox_per_endpoint=settings.outbox_per_endpoint,
                on_queued=events_queued.set,
            )
            app.state.stalls = stalls
            if settings.run_worker:
                worker = Worker(
                    db,
                    clock,
                    allow_private=settings.webhook_allow_private,
                    channels=channel_sender(settings, db, clock, on_end=events_queued.set),
                    give_up_s=settings.delivery_give_up,
                    woken=events_queued,
                )
                worker_task = asyncio.create_task(worker.run(), name="headway-worker")
                app.state.loops["worker"] = worker_task
            stalls_task = asyncio.create_task(stalls.run(), name="headway-stalls")
            app.state.loops["stalls"] = stalls_task
            retention_us = (
                None if settings.space_retention is None else settings.space_retention * 1_000_000
            )
            app.state.sweeper = sweeper = Sweeper(
                service, clock, retention_us, step_s=settings.sweep_every, woken=spaces_dropped
            )
            sweeper_task = asyncio.create_task(sweeper.run(), name="headway-sweeper")
            app.state.loops["sweeper"] = sweeper_task
            async with mcp_endpoint.running():
                yield
            log.info("Headway shutting down: streams end, background work stops")
        finally:
            if live is not None:
                live.end_all()
            for task in (stalls_task, sweeper_task, disk_task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if worker_task is not None:
                worker_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker_task
                await worker.close()
            await limiter.close()
            await coherence.close()
            await progress.close()
            await db.close()

    # A fresh MCP server per app; its tools call the Service the lifespan builds.
    mcp_endpoint = MCPEndpoint(settings, lambda: app.state.service)
    # `/metrics` is on this port unless metrics are off or have a port of their own.
    scraped_here = settings.metrics and settings.metrics_port is None
    app_class = logs.logged(HeadwayApp) if settings.access_log else HeadwayApp
    app = app_class(
        instruments=metrics.instruments() if settings.metrics else None,
        routes=[
            *hot.routes,
            *events.routes,
            *share_routes.routes,
            *badge_routes.routes,
            *webhook_routes.routes,
            *channel_routes.routes,
            *health.routes,
            *client_wheel.routes,
            *openapi.routes,
            *web_routes.routes,
            Route("/mcp", mcp_endpoint),
            *(metrics_routes.routes if scraped_here else []),
        ],
        exception_handlers={
            HeadwayError: _headway_error,
            HTTPException: _http_error,
            # 503 where a dependency is unavailable, else 500 (see headway.dependencies).
            Exception: _failure,
        },
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # `/spaces/` is a JSON 404, never a redirect
    app.state.settings = settings
    app.state.client_wheel = client_wheel.ClientWheel()
    app.state.refusals = logs.RefusalLog()
    app.state.openapi = openapi.build_document(
        {
            **web_routes.openapi_paths,
            **events.openapi_paths,
            **share_routes.openapi_paths,
            **badge_routes.openapi_paths,
            **webhook_routes.openapi_paths,
            **channel_routes.openapi_paths,
            **client_wheel.openapi_paths,
            **mcp_routes.openapi_paths,
            **(metrics_routes.openapi_paths if scraped_here else {}),
        }
    )
    return app


class HeadwayApp(Starlette):
    """Starlette, with a short way in for the most used routes.

    Task reads and reports (`GET`, `PUT /tasks/{uuid}`, `GET /tasks/{uuid}/report`),
    creates of tasks, space reads and share links' badges are most of the traffic. They go
    straight to their endpoint (`api.hot`, where each is declared once for both ways),
    skipping the router and the two exception middlewares (together about a tenth of a
    report's cost, and more for routes later in the list); their errors are rendered by
    the same handlers. Every other request takes the ordinary way
    (`_ordinary`). Both ways count each request (headway.metrics) under its route's
    template as its answer starts.

    Every answer says `X-Content-Type-Options: nosniff`; every answer but those of /mcp
    (which checks Host and Origin itself) says `Access-Control-Allow-Origin: *`. An
    unexpected error is answered 500 and logged once, and the connection lives on.
    """

    def __init__(
        self,
        *,
        instruments: metrics.Instruments | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._metrics = instruments  # None: metrics are off, nothing is counted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        short = short_way(scope["method"], scope["path"])
        if short is None:
            await self._ordinary(scope, receive, send)
        else:
            await self._straight(scope, receive, send, *short)

    async def _ordinary(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The server's own `send`, for the many body messages of a live stream once its
        # answer has started through the wrappers below (see `api.events`).
        scope[RAW_SEND] = send
        if self._metrics is not None:
            send = self._metrics.timed_send(scope, send)
        path = scope["path"]
        if path == "/mcp" or path.startswith("/mcp/"):
            answer = SendWithHeaders(send, EVERY_ANSWER, drop=CORS_NAMES)
        else:
            if scope["method"] == "OPTIONS" and (methods := self._methods_of(scope)):
                requested = Headers(scope=scope).get("access-control-request-headers")
                await preflight_response(methods, requested)(scope, receive, send)
                return
            answer = SendWithHeaders(send, REST_ANSWER)
        try:
            await super().__call__(scope, receive, answer)
        except Exception:
            if not answer.answered:
                raise  # cut short: the server logs it and drops the connection
            # Starlette's ServerErrorMiddleware answered with `_failure` (a 503, or a 500
            # it logged), then re-raised for the server, which would log it again and
            # drop the connection. The answer went out whole: the connection can serve on.

    def _methods_of(self, scope: Scope) -> set[str]:
        """The methods the routes of this path serve; empty if none has this path."""
        methods: set[str] = set()
        for route in self.router.routes:
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                methods |= getattr(route, "methods", None) or set()
        return methods

    async def _straight(
        self, scope: Scope, receive: Receive, send: Send, way: HotRoute, params: dict[str, str]
    ) -> None:
        if way.pages:  # a browser's page, built by templates, lacks REST's headers
            send = SendWithHeaders(send, REST_ANSWER)
        started = perf_counter()
        scope["app"] = self
        scope["path_params"] = params
        request = Request(scope, receive, send)
        try:
            response = await way.endpoint(request)
        except HeadwayError as exc:
            _note_refusal(scope, exc)
            response = error_response(exc)
        except Exception as exc:
            response = await _failure(request, exc)
        if self._metrics is not None:
            elapsed = perf_counter() - started
            self._metrics.observe(way.template, scope["method"], response.status_code, elapsed)
        await response(scope, receive, send)


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
        )
    return MemoryProgressStore(
        settings.progress_ttl,
        clock,
        budget_bytes=budget,
        space_bytes=space_bytes,
        client_bytes=client_bytes,
    )


def make_coherence(progress: ProgressStore) -> Coherence:
    """How instances agree (see `headway.coherence`): several, sharing the Redis store,
    or this process alone, with progress in its memory."""
    if progress.name != "redis":
        return OneProcess(progress)
    from .coherence.shared import SeveralInstances
    from .progress.redis import RedisProgressStore

    return SeveralInstances(cast(RedisProgressStore, progress))


async def _headway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HeadwayError)
    _note_refusal(request.scope, exc)
    return error_response(exc)


def _note_refusal(scope: Scope, exc: HeadwayError) -> None:
    """Log a 429 or 503 refusal (see `logs.RefusalLog`): which limit, and to whom."""
    if exc.status not in (429, 503):
        return
    state = scope["app"].state
    limiter = getattr(state, "limiter", None)
    client = limiter.address_of(scope) if limiter is not None else "unknown"
    state.refusals.refused(exc.status, exc.message, client)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"No such path: {request.url.path}. See /openapi.json for the API."
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"Method {request.method} is not allowed here; allowed: {allowed}."
    else:
        message = exc.detail
    return JSONResponse(error_body(message), exc.status_code, dict(exc.headers or {}))


async def _failure(request: Request, exc: Exception) -> Response:
    """A failure that is no `HeadwayError`: 503 if a dependency is unavailable (see
    `headway.dependencies`), else 500, logged once."""
    if not unavailable(exc):
        return await _unexpected_error(request, exc)
    log.warning("dependency unavailable: %s: %s", type(exc).__name__, exc)
    return error_response(Unavailable(UNAVAILABLE_MESSAGE, headers=RETRY_SOON))


async def _unexpected_error(_request: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    return JSONResponse(error_body("Internal error; it has been logged."), 500)


def app_from_env() -> Any:
    """Factory for ASGI servers: `uvicorn --factory headway.app:app_from_env`."""
    return create_app(Settings.from_env())
