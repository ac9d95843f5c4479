"""What makes a tqdm bar report to Headway: a mixin for any tqdm class, and `attach` for
a bar that already exists. It adds nothing to a bar's iterations: it reports when the bar
redraws (at most every `mininterval`, 0.1 s by default), through a coalescing reporter.

A bar reports `current` = its count, `end` = its total, and in `values` its `rate` (per
second), `unit`, `description` and `postfix`. A nested bar (one below another open bar,
`position=1`) is a step of the outer bar's task, and a bar opened inside
`with client.task(...)` a step of that task; both report through that task's client.

When a bar closes normally, its task is finished. An exception out of its `with` block is
reported as `Reporter.fail` reports it (and the task finished). A loop left early, by
`break` or by an exception inside `for x in tqdm(...)` (which tqdm cannot tell apart),
leaves the task unfinished at its last count. A disabled bar reports nothing.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from .client import Client
from .models import Value
from .reporter import Reporter
from .task import current_task

log = logging.getLogger("headway")

_default: Client | None = None
_default_lock = threading.Lock()
_warned_no_space = False


def default_client() -> Client:
    """The client bars use when given none: HEADWAY_URL and HEADWAY_SPACE."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


class ReportingBar:
    """Mixed in before a tqdm class (`class tqdm(ReportingBar, tqdm.std.tqdm)`), it takes
    these keywords besides tqdm's: `client` (default: from HEADWAY_URL), `space` (default:
    the client's, HEADWAY_SPACE), `task` (report to this existing task instead of a new
    one, titled by `desc`), `min_interval` (seconds between reports, default the
    client's)."""

    _headway: Reporter | None = None
    _headway_error: BaseException | None = None
    disable: bool  # tqdm's own

    def __init__(
        self,
        *args: Any,
        client: Client | None = None,
        space: str | None = None,
        task: str | None = None,
        min_interval: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        if not self.disable:
            self._headway = _reporter(self, client, space, task, min_interval)
            self._headway_report()

    def display(self, *args: Any, **kwargs: Any) -> Any:
        shown = super().display(*args, **kwargs)  # type: ignore[misc]
        self._headway_report()
        return shown

    def close(self) -> None:
        reporter = self._headway
        reporting = reporter is not None and not self.disable  # closing disables the bar
        abandoned = sys.exc_info()[0] is GeneratorExit  # tqdm's loop closed early
        super().close()  # type: ignore[misc]
        if not reporting:
            return
        self._headway_report()
        self._headway = None
        if self._headway_error is not None:
            reporter.fail(self._headway_error)
        elif not abandoned:
            reporter.finish()

    def __exit__(self, *exc_info: Any) -> Any:
        exc = exc_info[1]
        if exc is not None and not (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            self._headway_error = exc
        return super().__exit__(*exc_info)  # type: ignore[misc]

    def _headway_report(self) -> None:
        if self._headway is None:
            return
        meter = self.format_dict  # type: ignore[attr-defined]  # tqdm's own
        count, elapsed = meter["n"], meter["elapsed"]
        rate = meter["rate"] or (count / elapsed if elapsed else None)
        values: dict[str, Value] = {"unit": meter["unit"]}
        if rate is not None:
            values["rate"] = round(rate, 3)
        if meter["prefix"]:
            values["description"] = str(meter["prefix"]).removesuffix(": ")
        if meter["postfix"]:
            values["postfix"] = str(meter["postfix"]).lstrip(", ")
        self._headway.report(count, meter["total"], values=values)


def _reporter(
    bar: ReportingBar,
    client: Client | None,
    space: str | None,
    task: str | None,
    min_interval: float | None,
) -> Reporter | None:
    """The reporter of a new bar: for `task`, a step of the bar it is nested in or of the
    current `client.task(...)`, or a new task; None when no space is known."""
    global _warned_no_space
    title = getattr(bar, "desc", "") or None
    if task is not None:
        return (client or default_client()).reporter(task, space=space, min_interval=min_interval)
    outer = _outer_bar(bar)
    parent = outer._headway if outer is not None else current_task()
    if parent is not None:  # reported through the outer task's client
        return parent.step(title)
    client = client or default_client()
    if not (space or client.space):
        if not _warned_no_space:
            _warned_no_space = True
            log.warning("Headway: bars are not reported: no space given nor in HEADWAY_SPACE")
        return None
    return client.reporter(title=title, space=space, min_interval=min_interval)


def _outer_bar(bar: ReportingBar) -> ReportingBar | None:
    """The newest open reporting bar on a line above `bar`'s, if `bar` is nested."""
    line = abs(getattr(bar, "pos", 0) or 0)
    if line == 0:
        return None
    candidates = [
        other
        for other in list(getattr(type(bar), "_instances", ()))
        if other is not bar
        and isinstance(other, ReportingBar)
        and other._headway is not None
        and abs(getattr(other, "pos", 0) or 0) < line
    ]
    return max(candidates, key=lambda other: getattr(other, "start_t", 0), default=None)


_attached: dict[type, type] = {}


def attach(
    bar: Any,
    *,
    client: Client | None = None,
    space: str | None = None,
    task: str | None = None,
    min_interval: float | None = None,
) -> Any:
    """Make an existing tqdm bar report as the drop-in's do, from now on; returns it.
    The bar becomes an instance of a reporting subclass of its own class."""
    if isinstance(bar, ReportingBar) or bar.disable:
        return bar
    cls = type(bar)
    if cls not in _attached:
        _attached[cls] = type(cls.__name__, (ReportingBar, cls), {"__module__": cls.__module__})
    bar.__class__ = _attached[cls]
    bar._headway = _reporter(bar, client, space, task, min_interval)
    bar._headway_report()
    return bar
