"""`create_app(settings, clock)`: the ASGI application. Nothing is created at import time;
the lifespan opens the database and the progress store and closes them again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import sqlalchemy.exc
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .api import health, openapi, rest
from .api import mcp as mcp_routes
from .api import webhooks as webhook_routes
from .api.mcp import MCPEndpoint
from .api.responses import JSONResponse, error_response
from .clock import Clock, SystemClock
from .config import Settings
from .errors import UNAVAILABLE_MESSAGE, HeadwayError, Unavailable, error_body
from .progress import ProgressStore
from .progress.memory import MemoryProgressStore
from .service import Service
from .storage.database import Database, DatabaseUnavailable
from .storage.families import FamilyCache
from .worker import Worker

log = logging.getLogger("headway")

# Failures of a dependency (database, progress store) rather than of the request: 503.
DEPENDENCY_ERRORS: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
    DatabaseUnavailable,
    ConnectionError,
    TimeoutError,
    OSError,
)


def dependency_errors(settings: Settings) -> tuple[type[BaseException], ...]:
    """The exceptions that mean a dependency is down, for the backends `settings` name."""
    if settings.redis_url is None:
        return DEPENDENCY_ERRORS  # and the Redis client is never imported
    from .progress.redis import REDIS_ERRORS

    return DEPENDENCY_ERRORS + REDIS_ERRORS


def create_app(settings: Settings | None = None, clock: Clock | None = None) -> Starlette:
    """Build the service from settings; the lifespan wires storage and progress store."""
    settings = settings or Settings()
    clock = clock or SystemClock()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        progress = make_progress_store(settings, clock)
        worker_task = None
        try:
            await db.migrate()
            service = Service(
                db,
                progress,
                clock,
                allow_private_webhooks=settings.webhook_allow_private,
                # Progress in this process's memory means this process serves alone.
                families=None if settings.shares_progress else FamilyCache(),
            )
            app.state.service = service
            if settings.run_worker:
                worker = Worker(db, clock, allow_private=settings.webhook_allow_private)
                service.on_event = worker.wake
                worker_task = asyncio.create_task(worker.run(), name="headway-worker")
            async with mcp_endpoint.running():
                yield
        finally:
            if worker_task is not None:
                worker_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker_task
                await worker.close()
            await progress.close()
            await db.close()

    errors = dependency_errors(settings)
    # A fresh MCP server per app; its tools call the Service the lifespan builds.
    mcp_endpoint = MCPEndpoint(settings, lambda: app.state.service, dependency_errors=errors)
    app = HeadwayApp(
        dependency_errors=errors,
        routes=[
            *rest.routes,
            *webhook_routes.routes,
            *health.routes,
            *openapi.routes,
            Route("/mcp", mcp_endpoint),
        ],
        exception_handlers={
            HeadwayError: _headway_error,
            HTTPException: _http_error,
            **{cls: _dependency_error for cls in errors},
            Exception: _unexpected_error,
        },
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.openapi = openapi.build_document(
        {**webhook_routes.openapi_paths, **mcp_routes.openapi_paths}
    )
    return app


class HeadwayApp(Starlette):
    """Starlette, with a short way in for task reads and reports.

    `GET` and `PUT /tasks/{uuid}` are most of the traffic. They go straight to their
    endpoint, skipping the router and the two exception middlewares (together about a
    tenth of a report's cost); their errors are rendered by the same handlers. Every
    other request takes the ordinary way.
    """

    def __init__(
        self, *, dependency_errors: tuple[type[BaseException], ...], **options: Any
    ) -> None:
        super().__init__(**options)
        self._dependency_errors = dependency_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "PUT"):
            path = scope["path"]
            if path.startswith("/tasks/") and path.count("/") == 2 and len(path) > 7:
                await self._task(scope, receive, send, path[7:])
                return
        await super().__call__(scope, receive, send)

    async def _task(self, scope: Scope, receive: Receive, send: Send, task_uuid: str) -> None:
        scope["app"] = self
        scope["path_params"] = {"task_uuid": task_uuid}
        request = Request(scope, receive, send)
        try:
            response = await rest.task(request)
        except HeadwayError as exc:
            response = error_response(exc)
        except self._dependency_errors as exc:
            response = await _dependency_error(request, exc)
        except Exception as exc:
            response = await _unexpected_error(request, exc)
        await response(scope, receive, send)


def make_progress_store(settings: Settings, clock: Clock) -> ProgressStore:
    """The progress store the settings ask for: Redis when HEADWAY_REDIS_URL is set."""
    if settings.redis_url is not None:
        from .progress.redis import RedisProgressStore

        return RedisProgressStore(settings.redis_url, settings.progress_ttl, clock)
    return MemoryProgressStore(settings.progress_ttl, clock)


async def _headway_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HeadwayError)
    return error_response(exc)


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


async def _dependency_error(_request: Request, exc: Exception) -> Response:
    log.warning("dependency unavailable: %s: %s", type(exc).__name__, exc)
    return error_response(Unavailable(UNAVAILABLE_MESSAGE))


async def _unexpected_error(_request: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    return JSONResponse(error_body("Internal error; it has been logged."), 500)


def app_from_env() -> Any:
    """Factory for ASGI servers: `uvicorn --factory headway.app:app_from_env`."""
    return create_app(Settings.from_env())
