"""`Client` and `AsyncClient`: the same operations from the rules in `calls`, over a
blocking or an asyncio transport; and what both share (`BaseClient`): settings from the
environment, when a failed request is tried again, and reporters, which both deliver
from one background thread."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, Never, TypeVar

import httpx

from . import calls
from .errors import APIError, NetworkError, NoSpaceError
from .models import Estimate, Space, Task, Value
from .reporter import Reporter
from .sender import Sender
from .task import TaskScope

T = TypeVar("T")

log = logging.getLogger("headway")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_FLUSH_TIMEOUT = 10.0
FLUSH_TIMEOUT_VARIABLE = "HEADWAY_FLUSH_TIMEOUT"


def flush_timeout_from_environment() -> float:
    """HEADWAY_FLUSH_TIMEOUT: the seconds pending reports get at exit (default 10). A value
    that is not a finite number of seconds, at least 0, is logged and the default used:
    a setting of the reporting never stops the job."""
    text = os.environ.get(FLUSH_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_FLUSH_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    log.warning(
        "Headway: %s must be a number of seconds, at least 0, not %r: %g s it is",
        FLUSH_TIMEOUT_VARIABLE,
        text,
        DEFAULT_FLUSH_TIMEOUT,
    )
    return DEFAULT_FLUSH_TIMEOUT


class BaseClient:
    """Settings and reporters, shared by `Client` and `AsyncClient`.

    `url` defaults to HEADWAY_URL (else http://127.0.0.1:8000), `space` to HEADWAY_SPACE.
    `timeout` bounds each request. Creates (`create_space`, `create_task`) send an
    Idempotency-Key and are tried again up to `retries` times after a network error, a 429
    or a 5xx, with the same key, after `backoff[0]` seconds doubling up to `backoff[1]` (or
    the answer's Retry-After, read as at most 60 s). Reporters send at most one report per
    task every `min_interval` seconds, retry a failing server with the same backoff for as
    long as the process runs, and get `exit_timeout` seconds (default HEADWAY_FLUSH_TIMEOUT,
    else 10) at interpreter exit (or `close()`) to deliver what is pending.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        space: str | None = None,
        timeout: float = 10.0,
        min_interval: float = 0.5,
        backoff: tuple[float, float] = (0.5, 30.0),
        exit_timeout: float | None = None,
        retries: int = 3,
    ) -> None:
        self.url = (url or os.environ.get("HEADWAY_URL") or DEFAULT_URL).rstrip("/")
        self.space = space or os.environ.get("HEADWAY_SPACE") or None
        self.timeout = timeout
        self.min_interval = min_interval
        self.backoff = backoff
        self.exit_timeout = (
            flush_timeout_from_environment() if exit_timeout is None else exit_timeout
        )
        self.retries = retries
        self._sender: Sender | None = None
        self._sender_lock = threading.Lock()

    def dashboard_url(self, space: str | None = None) -> str:
        """The address of the space's page (a browser gets the dashboard there)."""
        return f"{self.url}/spaces/{self._space(space)}"

    def reporter(
        self,
        task: str | None = None,
        *,
        title: str | None = None,
        space: str | None = None,
        source: str | None = None,
        parent: str | Reporter | None = None,
        min_interval: float | None = None,
    ) -> Reporter:
        """A reporter for the existing task `task` (a uuid), or for a new task (`title`,
        `source`, a step of `parent` if given, in `space`) created in the background."""
        sender = self._reporting()
        interval = self.min_interval if min_interval is None else min_interval
        if task is not None:
            return Reporter(sender, uuid=task, space=space, min_interval=interval)
        if isinstance(parent, str):
            parent = Reporter(sender, uuid=parent, space=space, min_interval=interval)
        if parent is not None:
            space = space or parent.space
        return Reporter(
            sender,
            space=space or self.space,
            title=title,
            source=source,
            parent=parent,
            min_interval=interval,
        )

    def task(
        self,
        title: str | None = None,
        *,
        space: str | None = None,
        source: str | None = None,
        parent: str | Reporter | None = None,
        min_interval: float | None = None,
    ) -> TaskScope:
        """A new task for a `with` block or for each call of a decorated function."""
        return TaskScope(
            self.reporter,
            title=title,
            space=space,
            source=source,
            parent=parent,
            min_interval=min_interval,
        )

    def _retry_in(self, call: calls.Call[T], attempt: int, error: Exception) -> float:
        """Seconds to wait before sending `call` again after `error` ended its try number
        `attempt` (0: the first); raises `error` when it is not to be tried again: it is
        not a create (only creates carry a key that makes a second try safe), its tries are
        spent, or the answer will not change."""
        if call.key is None or attempt >= self.retries:
            raise error
        if isinstance(error, APIError) and not error.retryable:
            raise error
        wait = min(self.backoff[0] * 2**attempt, self.backoff[1])
        if isinstance(error, APIError) and error.retry_after is not None:
            wait = max(wait, error.retry_after)
        return wait

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """An httpx error (no answer, or one that cannot be read) as a NetworkError."""
        try:
            yield
        except httpx.HTTPError as exc:
            raise NetworkError(
                f"cannot reach {self.url}: {str(exc) or type(exc).__name__}"
            ) from exc

    def _space(self, space: str | None) -> str:
        chosen = space or self.space
        if not chosen:
            raise NoSpaceError()
        return chosen

    def _reporting(self) -> Sender:
        with self._sender_lock:
            if self._sender is None:
                self._sender = Sender(
                    self.url,
                    timeout=self.timeout,
                    backoff=self.backoff,
                    exit_timeout=self.exit_timeout,
                )
            return self._sender

    def _flush_reports(self, timeout: float | None) -> bool:
        with self._sender_lock:
            sender, self._sender = self._sender, None
        return True if sender is None else sender.close(timeout)


class Client(BaseClient):
    """The API over blocking HTTP. Each method sends one request (a create, a few if it
    must: see `BaseClient`) and raises `APIError` (the server's status and message) or
    `NetworkError`; reporters never raise."""

    _http: httpx.Client | None = None  # made on first use: reporters need none

    def _send(self, call: calls.Call[T]) -> T:
        if self._http is None:
            self._http = calls.http_client(httpx.Client, self.url, self.timeout)
        attempt = 0
        while True:
            try:
                with self._reaching():
                    response = self._http.send(call.request(self._http))
                return call.result(response)
            except (NetworkError, APIError) as exc:
                wait = self._retry_in(call, attempt, exc)
            time.sleep(wait)
            attempt += 1

    def create_space(self, title: str | None = None, icon: str | None = None) -> Space:
        """A new space; its `uuid` is the credential, shown only now."""
        return self._send(calls.create_space(title, icon))

    def get_space(
        self,
        space: str | None = None,
        *,
        limit: int | None = None,
        before: datetime | str | None = None,
        after: datetime | str | None = None,
        state: str | None = None,
    ) -> Space:
        """A space with its tasks (docs/walkthrough.md says what `limit`, `before`,
        `after` and `state` do)."""
        call = calls.read_space(
            self._space(space), limit=limit, before=before, after=after, state=state
        )
        return self._send(call)

    def create_task(
        self,
        title: str | None = None,
        *,
        space: str | None = None,
        source: str | None = None,
        parent: str | None = None,
    ) -> str:
        """A new task (a step of `parent` if given); returns its uuid."""
        return self._send(calls.create_task(self._space(space), title, source, parent))

    def get_task(self, task: str) -> Task:
        return self._send(calls.read_task(task))

    def get_estimate(self, task: str) -> Estimate:
        """When the task will end, as the server sees it (see `Estimate`)."""
        return self._send(calls.read_estimate(task))

    def report(
        self,
        task: str,
        current: float | None = None,
        end: float | None = None,
        *,
        values: Mapping[str, Value] | None = None,
        log: str | None = None,
        done: bool = False,
        **unknown: Never,
    ) -> Task:
        """Replace the task's whole state now; returns the task as it then stands. Any
        other keyword is a TypeError naming `values={...}`."""
        if unknown:
            raise calls.misplaced_values("client.report", unknown)
        return self._send(calls.report(task, calls.report_body(current, end, values, log, done)))

    def finish(self, task: str) -> Task:
        """Finish the task, keeping its last numbers (`{"done": true}`)."""
        return self._send(calls.report(task, {"done": True}))

    def close(self, timeout: float | None = None) -> bool:
        """Deliver pending reports (at most `timeout`, default `exit_timeout` seconds),
        then close the connections. True if every report was delivered."""
        delivered = self._flush_reports(timeout)
        if self._http is not None:
            self._http.close()
        return delivered

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _awaited(method: Callable[..., Any]) -> Callable[..., Any]:
    """`Client`'s `method` as `AsyncClient`'s: the same call, sent by `AsyncClient._send`
    and awaited, so that a mistake (no space, a misplaced keyword) raises on the await."""

    @functools.wraps(method)
    async def awaited(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        return await method(self, *args, **kwargs)

    awaited.__qualname__ = f"AsyncClient.{method.__name__}"
    return awaited


class AsyncClient(BaseClient):
    """The API over asyncio HTTP, with the same methods as `Client`, awaited. Reporters
    are the same as `Client`'s: `report()` never awaits, a thread delivers."""

    _http: httpx.AsyncClient | None = None  # made on first use: reporters need none

    async def _send(self, call: calls.Call[T]) -> T:
        if self._http is None:
            self._http = calls.http_client(httpx.AsyncClient, self.url, self.timeout)
        attempt = 0
        while True:
            try:
                with self._reaching():
                    response = await self._http.send(call.request(self._http))
                return call.result(response)
            except (NetworkError, APIError) as exc:
                wait = self._retry_in(call, attempt, exc)
            await asyncio.sleep(wait)
            attempt += 1

    create_space = _awaited(Client.create_space)
    get_space = _awaited(Client.get_space)
    create_task = _awaited(Client.create_task)
    get_task = _awaited(Client.get_task)
    get_estimate = _awaited(Client.get_estimate)
    report = _awaited(Client.report)
    finish = _awaited(Client.finish)

    async def aclose(self, timeout: float | None = None) -> bool:
        """Like `Client.close`, without blocking the event loop."""
        delivered = await asyncio.to_thread(self._flush_reports, timeout)
        if self._http is not None:
            await self._http.aclose()
        return delivered

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
