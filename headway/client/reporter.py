"""Reports that never hurt the job: a `Reporter` per task, whose latest state one
background thread per client delivers (`sender` says how: coalescing, retries, exit)."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Never, Protocol, TypeVar

from . import calls
from .errors import HeadwayError
from .models import Estimate, Value

T = TypeVar("T")


class Sender(Protocol):
    """What a reporter asks of the thread that sends for it (`sender.Sender`)."""

    def schedule(self, reporter: Reporter, due: float, place: int | None = None) -> None: ...

    def flush(self, timeout: float, reporter: Reporter | None = None) -> bool: ...

    def ask(self, call: calls.Call[T]) -> T: ...


# (current, end, values, log): the arguments of the latest `report()`.
State = tuple[float | None, float | None, Mapping[str, Value] | None, str | None]


class Reporter:
    """One task, reported from the job's code.

    Made by `Client.reporter()`, `Client.task()` or `Reporter.step()`. A reporter for a new
    task creates it in the background (`uuid` is None until then); creation and reports
    are retried like any report. Also a context manager: `finish()` on success, `fail()`
    on an exception, which then propagates.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_done_sent",
        "_gone",
        "_key",
        "_next_at",
        "_refused",
        "_scheduled",
        "_sender",
        "_sent",
        "_state",
        "_steps",
        "min_interval",
        "parent",
        "source",
        "space",
        "title",
        "uuid",
    )

    def __init__(
        self,
        sender: Sender,
        *,
        uuid: str | None = None,
        space: str | None = None,
        title: str | None = None,
        source: str | None = None,
        parent: Reporter | None = None,
        min_interval: float = 0.5,
    ) -> None:
        self.uuid = uuid
        self.space = space
        self.title = title
        self.source = source
        self.parent = parent
        self.min_interval = min_interval
        self._sender = sender
        self._state: State | None = None
        self._steps: list[Reporter] = []  # made by `step()`: a parent's steps
        self._sent: State | None = None
        self._closed = False
        self._done_sent = False
        self._gone = False  # the task cannot be created: every report is dropped
        self._refused = False  # a refusal was logged already
        self._next_at = 0.0  # monotonic time before which no report is sent
        self._key = calls.new_key()  # the create's Idempotency-Key, the same on each try
        self._scheduled = uuid is None
        if uuid is None:
            sender.schedule(self, 0.0)  # create the task now, in the background

    def report(
        self,
        current: float | None = None,
        end: float | None = None,
        *,
        values: Mapping[str, Value] | None = None,
        log: str | None = None,
        **unknown: Never,
    ) -> None:
        """Set the task's whole state (as `PUT /tasks/{uuid}`): `current` out of `end`,
        flat `values`, and `log`, one line, the latest. Returns at once; the state is sent
        within `min_interval` unless a newer one replaces it first. Ignored once finished.
        Any other keyword is a TypeError naming `values={...}`, where it belongs."""
        if unknown:
            raise calls.misplaced_values("task.report", unknown)
        if self._closed:
            return
        self._state = (current, end, dict(values) if values else None, log)
        if not self._scheduled:
            self._scheduled = True
            self._sender.schedule(self, self._next_at)

    def finish(
        self,
        *,
        values: Mapping[str, Value] | None = None,
        log: str | None = None,
        **unknown: Never,
    ) -> None:
        """Finish the task: its latest state, with `values` added and `log` replacing its
        log, is sent with `done` right away (past the interval). Later reports are ignored.
        A task that never reported is finished with `{"done": true}`. Any other keyword
        is a TypeError naming `values={...}`."""
        if unknown:
            raise calls.misplaced_values("task.finish", unknown)
        if self._closed:
            return
        if self._state is not None or values or log is not None:
            current, end, previous, previous_log = self._state or (None, None, None, None)
            merged = {**(previous or {}), **(values or {})}
            self._state = (current, end, merged, previous_log if log is None else log)
        self._closed = True
        self._scheduled = True
        self._sender.schedule(self, 0.0)

    def fail(self, error: BaseException) -> None:
        """Finish the task reporting `error`: its last line (`ValueError: bad input`) as
        `values.error`, which shows the task as failed, and as `log`; its type and message
        as `error_type` and `error_message`. Finished, so that the end of the work is
        notified, failed or not."""
        line = exception_line(error)
        try:
            message = str(error)
        except Exception:  # a broken __str__ must not replace the job's own exception
            message = ""
        self.finish(
            values={
                "error": calls.short_text(line),
                "error_type": type(error).__name__,
                "error_message": calls.short_text(message) or type(error).__name__,
            },
            log=line,
        )

    def step(self, title: str | None = None, *, source: str | None = None) -> Reporter:
        """A step of this task: a child task, created in the background. Tasks nest one
        level, so a step of a step is another step of the same task."""
        parent = self.parent or self
        step = Reporter(
            self._sender,
            space=self.space,
            title=title,
            source=source,
            parent=parent,
            min_interval=self.min_interval,
        )
        parent._steps.append(step)
        return step

    def estimate(self) -> Estimate | None:
        """When this task will end, as the server sees it now (see `Estimate`): asked at
        once, from the caller's thread. None while the task is not created yet, or if the
        server cannot answer (never raises: a reporter never hurts its job)."""
        if self.uuid is None:
            return None
        try:
            return self._sender.ask(calls.read_estimate(self.uuid))
        except HeadwayError:
            return None

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait at most `timeout` seconds until this task's latest state was delivered (or
        refused); True if it was. Sends a state held back by the interval at once."""
        return self._sender.flush(timeout, self)

    @property
    def finished(self) -> bool:
        """True once `finish()` or `fail()` was called (delivered or not)."""
        return self._closed

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback_: TracebackType | None,
    ) -> None:
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            self.finish()
        else:
            self.fail(exc)

    def __repr__(self) -> str:
        return f"<Reporter {self.title!r} {'finished' if self._closed else 'open'}>"


def exception_line(error: BaseException) -> str:
    """The last line of `error`'s traceback, as `traceback.format_exception_only` gives it,
    stripped (`ValueError: bad input`; a SyntaxError's message, not its source). Notes
    added to the exception are left out; a message of several lines is joined into one."""
    formatted = traceback.TracebackException(type(error), error, None, compact=True)
    formatted.__notes__ = None  # type: ignore[attr-defined]  # only the exception's own line
    last = list(formatted.format_exception_only())[-1]
    return " ".join(part.strip() for part in last.splitlines() if part.strip())
