"""A task around a block of code, or around each call of a function: `client.task(...)`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Protocol, TypeVar

from .reporter import Reporter

F = TypeVar("F", bound=Callable[..., Any])


class Reporters(Protocol):
    """What a task scope needs of a client (`BaseClient` is one): a reporter for a new
    task, each option given (None: the client's default)."""

    def reporter(
        self,
        *,
        title: str | None,
        space: str | None,
        source: str | None,
        parent: str | Reporter | None,
        min_interval: float | None,
    ) -> Reporter: ...


_current: ContextVar[Reporter | None] = ContextVar("headway_task", default=None)


def current_task() -> Reporter | None:
    """The reporter of the innermost `client.task(...)` block or decorated call running in
    this thread or asyncio task; None outside any."""
    return _current.get()


class TaskScope:
    """`with client.task("Nightly") as task:` creates the task, reports that work started,
    and on leaving finishes it (`done`), or on an exception reports the error and
    finishes it (see `Reporter.fail`) before the exception propagates. `async with` works
    the same. As a decorator, each call of the function (sync or async) is a new task,
    reachable inside through `headway.current_task()`."""

    def __init__(
        self,
        client: Reporters,
        title: str | None,
        *,
        space: str | None,
        source: str | None,
        parent: str | Reporter | None,
        min_interval: float | None,
    ) -> None:
        self._client = client
        self._options: dict[str, Any] = {
            "title": title,
            "space": space,
            "source": source,
            "parent": parent,
            "min_interval": min_interval,
        }
        self._entered: list[tuple[Reporter, Token[Reporter | None]]] = []

    def __enter__(self) -> Reporter:
        reporter = self._client.reporter(**self._options)
        reporter.report()
        self._entered.append((reporter, _current.set(reporter)))
        return reporter

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        reporter, token = self._entered.pop()
        _current.reset(token)
        reporter.__exit__(exc_type, exc, traceback)

    async def __aenter__(self) -> Reporter:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)

    def __call__(self, function: F) -> F:
        def scope() -> TaskScope:  # one per call: calls may overlap in threads or tasks
            return TaskScope(self._client, **self._options)

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with scope():
                    return await function(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with scope():
                return function(*args, **kwargs)

        return run  # type: ignore[return-value]
