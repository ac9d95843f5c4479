"""The background thread of one client that delivers its reporters' latest states.

`Reporter.report()` only stores the state and, at most once per interval, wakes the
thread: it never waits on the network and never raises. The thread sends one request at
a time (like tqdm's `MonoWorker`): a newer state replaces one not yet sent, so a task
costs at most one request per `min_interval` however often it reports, and its final
state is sent at once. A server that is down, slow, or answers 408/425/429 or a 5xx is
retried with exponential backoff (or after its Retry-After, read as 0-60 s) for as long
as the process runs, and logged once per outage on the `headway` logger; a task's create
is retried with the same Idempotency-Key, so that it is made once. A state that no retry
can help (refused with another 4xx, or values JSON cannot carry) is logged, once per task
and once more if it was the final one, and dropped. No answer and no error ends the
thread. At interpreter exit (or `close()`), pending states get a bounded time
(`exit_timeout`, HEADWAY_FLUSH_TIMEOUT) to go, with one last try just before it ends
even when a Retry-After asked for longer; what is still pending then is named in one
warning.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import threading
import time
import weakref
from typing import TypeVar

import httpx

from . import calls
from .errors import APIError, NetworkError
from .reporter import Reporter, State

log = logging.getLogger("headway")

# The last try of a flush, when the server asked to wait past its end, goes this long
# (or a quarter of the flush, if shorter) before the flush gives up.
LAST_TRY_AHEAD = 1.0
# The longest the thread waits in one go: it then looks at the queue again.
LONGEST_WAIT = 60.0
# How many titles the warning about undelivered reports names.
NAMED_TASKS = 3

T = TypeVar("T")


class _Gone(Exception):
    """The reporter's task could not be created; nothing of it will be sent."""


class Sender:
    """The background thread of one client, delivering as the module's docstring says."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        backoff: tuple[float, float],
        exit_timeout: float,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.backoff = backoff
        self.exit_timeout = exit_timeout
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Reporter]] = []  # a heap by due time
        self._order = itertools.count()
        self._in_flight: Reporter | None = None
        self._hurry = 0  # flushes waiting: send everything now, past the intervals
        self._thread: threading.Thread | None = None
        self._http: httpx.Client | None = None
        self._retry_at = 0.0  # while the server fails, nothing is sent before this
        self._delay = backoff[0]
        self._failing = False
        self._closed = False
        self._last_tries: list[float] = []  # of the flushes waiting: when each tries last
        self._last_try_spent: float | None = None  # the last try already made
        _SENDERS.add(self)

    def schedule(self, reporter: Reporter, due: float, place: int | None = None) -> None:
        """Look at `reporter` at monotonic time `due` (at once if past); among those due,
        in the order they were scheduled, or at `place` (a retry keeps its place in line,
        so that a step's final report still goes before its parent's)."""
        with self._cond:
            if self._closed:
                return
            place = next(self._order) if place is None else place
            heapq.heappush(self._queue, (due, place, reporter))
            if self._thread is None:
                self._start()
            self._cond.notify_all()

    def flush(self, timeout: float, reporter: Reporter | None = None) -> bool:
        """Send what is pending now and wait, at most `timeout` seconds, until nothing
        (of `reporter`, if given) is left to send; True if nothing is. A server that asked
        to wait (Retry-After, backoff) past the end still gets one last try before it."""
        deadline = time.monotonic() + timeout
        last_try = deadline - min(LAST_TRY_AHEAD, timeout / 4)
        with self._cond:
            self._hurry += 1
            self._last_tries.append(last_try)
            self._cond.notify_all()
            try:
                while self._pending(reporter):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._thread is None:
                        return False
                    self._cond.wait(min(remaining, LONGEST_WAIT))
                return True
            finally:
                self._hurry -= 1
                self._last_tries.remove(last_try)

    def close(self, timeout: float | None = None) -> bool:
        """Flush (at most `timeout`, default `exit_timeout`), then stop taking reports.
        What could not be delivered is named in one warning. True if everything was."""
        timeout = self.exit_timeout if timeout is None else timeout
        delivered = self.flush(timeout)
        with self._cond:
            lost = [] if self._in_flight is None else [self._in_flight]
            lost += [entry[2] for entry in sorted(self._queue)]
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        lost_words = undelivered(lost)
        if not delivered and lost_words:
            log.warning(
                "Headway at %s: not delivered within %s s, given up: %s",
                self.url,
                f"{timeout:.1f}".removesuffix(".0"),
                lost_words,
            )
        return delivered

    def _pending(self, reporter: Reporter | None) -> bool:
        if reporter is None:
            return bool(self._queue) or self._in_flight is not None
        return self._in_flight is reporter or any(entry[2] is reporter for entry in self._queue)

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="headway-reporter", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # interpreter shutting down: nothing can be sent any more
            log.warning("Headway: reports could not be sent, the interpreter is exiting")
            self._closed = True
            return
        self._thread = thread

    def _run(self) -> None:
        try:
            while self._step():
                pass
        finally:
            if self._http is not None:
                self._http.close()

    def _step(self) -> bool:
        """Deliver the next reporter due; False once closed. Whatever goes wrong on the
        way is logged and leaves the thread running: later reports still go."""
        try:
            with self._cond:
                entry = self._next()
                if entry is None:
                    return False
                _due, place, reporter = entry
                self._in_flight = reporter
            self._deliver(reporter, place)
        except Exception:
            log.exception("Headway: a report could not be prepared")
            self._retry_at = time.monotonic() + self.backoff[0]  # never a busy loop
        finally:
            with self._cond:
                self._in_flight = None
                self._cond.notify_all()
        return True

    def _next(self) -> tuple[float, int, Reporter] | None:
        """Wait (holding the condition) for the next entry due, (due, place, reporter);
        None once closed."""
        while not self._closed:
            now = time.monotonic()
            if self._queue:
                due = now if self._hurry else self._queue[0][0]
                ready = max(due, self._retry_at)
                last_try = min(self._last_tries, default=None)
                if last_try is not None and last_try != self._last_try_spent:
                    ready = min(ready, max(due, last_try))
                wait = ready - now
                if wait <= 0:
                    return heapq.heappop(self._queue)
                self._cond.wait(min(wait, LONGEST_WAIT))
            else:
                self._cond.wait(LONGEST_WAIT)
        return None

    def _deliver(self, reporter: Reporter, place: int) -> None:
        reporter._scheduled = False  # a report from now on schedules it again
        if reporter._gone:
            return
        now = time.monotonic()
        if not reporter._closed and not self._hurry and now < reporter._next_at:
            reporter._scheduled = True  # reported while its last state was on its way
            self.schedule(reporter, reporter._next_at)
            return
        # `finish()` sets the state, then `_closed`: read in the other order, a final
        # state is never sent without its `done`.
        closed = reporter._closed
        state = reporter._state
        if closed and _finishing_steps(reporter):
            # A parent finishes after the steps finished before it (its own `done` would
            # otherwise reach the server first): behind them in line.
            reporter._scheduled = True
            self.schedule(reporter, 0.0)
            return
        try:
            self._ensure_created(reporter)
            if reporter._done_sent or (state is reporter._sent and not closed):
                return  # nothing new (a state with no report yet is None, like `_sent`)
            reporter._next_at = time.monotonic() + reporter.min_interval
            body = _body(reporter, state, done=closed)
            self._send(calls.report(reporter.uuid or "", body))
        except _Gone:
            return
        except (NetworkError, APIError) as exc:
            if isinstance(exc, NetworkError) or exc.retryable:
                self._failed(exc)
                reporter._next_at = 0.0  # the backoff decides when it goes again
                reporter._scheduled = True
                self.schedule(reporter, 0.0, place)
                return
            self._refused(reporter, exc, final=closed)
        except (TypeError, ValueError) as exc:  # values JSON cannot carry (NaN, objects)
            self._refused(reporter, exc, final=closed)
        reporter._sent = state
        reporter._done_sent = closed

    def _ensure_created(self, reporter: Reporter) -> None:
        """Create the reporter's task (its parent's first) unless it has a uuid. Raises
        _Gone if it never can be, NetworkError or a retryable APIError to try later."""
        if reporter.uuid is not None:
            return
        if reporter._gone:
            raise _Gone
        parent = reporter.parent
        if parent is not None:
            self._ensure_created(parent)
            self._report_started(parent)
            if reporter.space is None:
                reporter.space = parent.space or self._parent_space(parent)
        if reporter.space is None:
            reporter._gone = True
            log.warning("Headway: task %r not reported: no space given", reporter.title)
            raise _Gone
        call = calls.create_task(
            reporter.space,
            reporter.title,
            reporter.source,
            parent.uuid if parent else None,
            key=reporter._key,
        )
        try:
            reporter.uuid = self._send(call)
        except APIError as exc:
            if exc.retryable:
                raise
            reporter._gone = True
            log.warning("Headway: task %r could not be created: %s", reporter.title, exc)
            raise _Gone from None

    def _report_started(self, parent: Reporter) -> None:
        """Send the parent's first report, if it is still waiting, before its first step
        is made: a parent that reported itself is held open until its own finish, where
        one nobody reported to finishes with its last step (and a step may well finish
        before the parent's report, retried after an outage, would have gone)."""
        state = parent._state
        if parent._sent is not None or state is None:
            return
        try:
            self._send(calls.report(parent.uuid or "", _body(parent, state, done=False)))
        except (APIError, TypeError, ValueError) as exc:  # or values JSON cannot carry
            if isinstance(exc, APIError) and exc.retryable:
                raise
            self._refused(parent, exc, final=False)
        parent._sent = state
        parent._next_at = time.monotonic() + parent.min_interval

    def _parent_space(self, parent: Reporter) -> str | None:
        """The space of a task known only by its uuid, read from the server."""
        try:
            return self._send(calls.read_task(parent.uuid or "")).space_uuid
        except APIError as exc:
            if exc.retryable:
                raise
            return None

    def ask(self, call: calls.Call[T]) -> T:
        """`call` sent now from the caller's thread, on a connection of its own (the
        thread's is its own), once: a question, not a report to deliver."""
        with calls.http_client(httpx.Client, self.url, self.timeout) as http:
            return _exchange(http, call)

    def _send(self, call: calls.Call[T]) -> T:
        if self._http is None:
            self._http = calls.http_client(httpx.Client, self.url, self.timeout)
        result = _exchange(self._http, call)
        self._recovered()
        return result

    def _failed(self, exc: NetworkError | APIError) -> None:
        now = time.monotonic()
        wait = self._delay
        if isinstance(exc, APIError) and exc.retry_after is not None:
            wait = max(wait, min(exc.retry_after, calls.MAX_RETRY_AFTER))
        self._retry_at = now + wait
        with self._cond:
            last_try = min(self._last_tries, default=None)
            if last_try is not None and now >= last_try:
                self._last_try_spent = last_try  # the flush's last try was this one
        self._delay = min(self._delay * 2, self.backoff[1])
        if not self._failing:
            self._failing = True
            log.warning(
                "Headway at %s did not take a report (%s); retrying in the background",
                self.url,
                exc,
            )

    def _recovered(self) -> None:
        self._delay = self.backoff[0]
        self._retry_at = 0.0
        if self._failing:
            self._failing = False
            log.info("Headway at %s takes reports again", self.url)

    def _refused(self, reporter: Reporter, exc: Exception, *, final: bool) -> None:
        """Log a state that was dropped: once per task, and the final one always."""
        if final:
            log.warning("Headway: the final report of task %r was dropped: %s", reporter.title, exc)
        elif not reporter._refused:
            reporter._refused = True
            log.warning("Headway: a report of task %r was dropped: %s", reporter.title, exc)


def _exchange(http: httpx.Client, call: calls.Call[T]) -> T:
    try:
        response = http.send(call.request(http))
    except httpx.HTTPError as exc:  # no answer, or one that cannot be read
        raise NetworkError(f"{type(exc).__name__}: {exc}") from exc
    return call.result(response)


def _body(reporter: Reporter, state: State | None, *, done: bool) -> dict[str, object]:
    """The report of `state`: a parent's without its counts, which the server ignores
    once its steps are there, but which would finish it were they not there yet (a bar
    whose steps all ran before anything was sent)."""
    if state is None:
        return {"done": True}
    current, end, values, log = state
    if reporter._steps:
        current = end = None
    return calls.report_body(current, end, values, log, done=done)


def _finishing_steps(reporter: Reporter) -> bool:
    """Whether steps of `reporter` were finished whose final reports are not sent yet."""
    return any(
        step._closed and not step._done_sent and not step._gone for step in list(reporter._steps)
    )


def undelivered(reporters: list[Reporter]) -> str:
    """What `reporters`, still pending, had to send, in words that name tasks by their
    titles (never a uuid): `the final report of task 'Backup'; the latest progress of 2
    tasks`; empty when none of them had anything left to send."""
    finals: list[str] = []
    progress = 0
    for reporter in dict.fromkeys(reporters):  # once each, in order
        if reporter._gone or reporter._done_sent:
            continue
        if reporter._closed:
            finals.append(repr(reporter.title) if reporter.title else "(untitled)")
        else:
            progress += 1
    parts = []
    if finals:
        named = ", ".join(finals[:NAMED_TASKS])
        if len(finals) > NAMED_TASKS:
            named += f" and {len(finals) - NAMED_TASKS} more"
        noun = "report of task" if len(finals) == 1 else "reports of tasks"
        parts.append(f"the final {noun} {named}")
    if progress:
        parts.append(f"the latest progress of {progress} task{'s' if progress > 1 else ''}")
    return "; ".join(parts)


_SENDERS: weakref.WeakSet[Sender] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    """Give every client's pending reports their `exit_timeout` (together) to go; each
    client names what it could not deliver in one warning."""
    senders = [sender for sender in _SENDERS if not sender._closed]
    if not senders:
        return
    deadline = time.monotonic() + max(sender.exit_timeout for sender in senders)
    for sender in senders:
        sender.close(max(deadline - time.monotonic(), 0.0))
