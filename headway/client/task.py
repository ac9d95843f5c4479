"""A task around a block of code, or around each call of a function: `client.task(...)`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar

from .reporter import Reporter

F = TypeVar("F", bound=Callable[..., Any])

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

    def __init__(self, reporter: Callable[..., Reporter], **options: Any) -> None:
        """`reporter`: what makes the reporter of a new task (a client's `reporter`),
        given `options` (`title`, `space`, `source`, `parent`, `min_interval`)."""
        self._reporter = reporter
        self._options = options
        self._entered: list[tuple[Reporter, Token[Reporter | None]]] = []

    def __enter__(self) -> Reporter:
        reporter = self._reporter(**self._options)
        reporter.report()
        self._entered.append((reporter, _current.set(reporter)))
        return reporter

    def __exit__(self, *exc_info: Any) -> None:
        reporter, token = self._entered.pop()
        _current.reset(token)
        reporter.__exit__(*exc_info)

    async def __aenter__(self) -> Reporter:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)

    def __call__(self, function: F) -> F:
        def scope() -> TaskScope:  # one per call: calls may overlap in threads or tasks
            return TaskScope(self._reporter, **self._options)

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
