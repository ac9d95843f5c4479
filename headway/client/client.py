"""`Client` and `AsyncClient`: the same operations from the rules in `calls`, over a
blocking or an asyncio transport; and what both share (`BaseClient`): settings from the
environment, and reporters, which both deliver from one background thread."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from datetime import datetime
from types import TracebackType
from typing import TypeVar

import httpx

from . import calls
from .errors import NetworkError, NoSpaceError
from .models import Space, Task, Value
from .reporter import Reporter, Sender
from .task import TaskScope

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8000"


class BaseClient:
    """Settings and reporters, shared by `Client` and `AsyncClient`.

    `url` defaults to HEADWAY_URL (else http://127.0.0.1:8000), `space` to HEADWAY_SPACE.
    `timeout` bounds each request. Reporters send at most one report per task every
    `min_interval` seconds, retry a failing server after `backoff[0]` seconds doubling up
    to `backoff[1]` (or after its Retry-After), and get `exit_timeout` seconds at
    interpreter exit (or `close()`) to deliver what is pending.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        space: str | None = None,
        timeout: float = 10.0,
        min_interval: float = 0.5,
        backoff: tuple[float, float] = (0.5, 30.0),
        exit_timeout: float = 5.0,
    ) -> None:
        self.url = (url or os.environ.get("HEADWAY_URL") or DEFAULT_URL).rstrip("/")
        self.space = space or os.environ.get("HEADWAY_SPACE") or None
        self.timeout = timeout
        self.min_interval = min_interval
        self.backoff = backoff
        self.exit_timeout = exit_timeout
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
            self, title, space=space, source=source, parent=parent, min_interval=min_interval
        )

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
    """The API over blocking HTTP. Each method sends one request and raises `APIError`
    (the server's status and message) or `NetworkError`; reporters never raise."""

    def __init__(
        self,
        url: str | None = None,
        *,
        space: str | None = None,
        timeout: float = 10.0,
        min_interval: float = 0.5,
        backoff: tuple[float, float] = (0.5, 30.0),
        exit_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            url,
            space=space,
            timeout=timeout,
            min_interval=min_interval,
            backoff=backoff,
            exit_timeout=exit_timeout,
        )
        self._http: httpx.Client | None = None  # made on first use: reporters need none

    def _send(self, call: calls.Call[T]) -> T:
        if self._http is None:
            self._http = httpx.Client(
                base_url=self.url, timeout=self.timeout, headers={"user-agent": calls.user_agent()}
            )
        try:
            response = self._http.send(call.request(self._http))
        except httpx.TransportError as exc:
            raise NetworkError(f"cannot reach {self.url}: {exc}") from exc
        return call.result(response)

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
        """A space with its tasks (see the README for `limit`, `before`, `after`, `state`)."""
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

    def report(
        self,
        task: str,
        current: float | None = None,
        end: float | None = None,
        *,
        values: Mapping[str, Value] | None = None,
        log: str | None = None,
        done: bool = False,
    ) -> Task:
        """Replace the task's whole state now; returns the task as it then stands."""
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient(BaseClient):
    """The API over asyncio HTTP, with the same methods as `Client`, awaited. Reporters
    are the same as `Client`'s: `report()` never awaits, a thread delivers."""

    def __init__(
        self,
        url: str | None = None,
        *,
        space: str | None = None,
        timeout: float = 10.0,
        min_interval: float = 0.5,
        backoff: tuple[float, float] = (0.5, 30.0),
        exit_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            url,
            space=space,
            timeout=timeout,
            min_interval=min_interval,
            backoff=backoff,
            exit_timeout=exit_timeout,
        )
        self._http: httpx.AsyncClient | None = None  # made on first use: reporters need none

    async def _send(self, call: calls.Call[T]) -> T:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.url, timeout=self.timeout, headers={"user-agent": calls.user_agent()}
            )
        try:
            response = await self._http.send(call.request(self._http))
        except httpx.TransportError as exc:
            raise NetworkError(f"cannot reach {self.url}: {exc}") from exc
        return call.result(response)

    async def create_space(self, title: str | None = None, icon: str | None = None) -> Space:
        return await self._send(calls.create_space(title, icon))

    async def get_space(
        self,
        space: str | None = None,
        *,
        limit: int | None = None,
        before: datetime | str | None = None,
        after: datetime | str | None = None,
        state: str | None = None,
    ) -> Space:
        call = calls.read_space(
            self._space(space), limit=limit, before=before, after=after, state=state
        )
        return await self._send(call)

    async def create_task(
        self,
        title: str | None = None,
        *,
        space: str | None = None,
        source: str | None = None,
        parent: str | None = None,
    ) -> str:
        return await self._send(calls.create_task(self._space(space), title, source, parent))

    async def get_task(self, task: str) -> Task:
        return await self._send(calls.read_task(task))

    async def report(
        self,
        task: str,
        current: float | None = None,
        end: float | None = None,
        *,
        values: Mapping[str, Value] | None = None,
        log: str | None = None,
        done: bool = False,
    ) -> Task:
        body = calls.report_body(current, end, values, log, done)
        return await self._send(calls.report(task, body))

    async def finish(self, task: str) -> Task:
        return await self._send(calls.report(task, {"done": True}))

    async def aclose(self, timeout: float | None = None) -> bool:
        """Like `Client.close`, without blocking the event loop."""
        delivered = await asyncio.to_thread(self._flush_reports, timeout)
        if self._http is not None:
            await self._http.aclose()
        return delivered

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
