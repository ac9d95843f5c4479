"""What `headway watch` shows: a space's tasks as its live stream tells them (`Board`), and
the board drawn for a terminal (`render`), a pure function of the board and the time."""

from __future__ import annotations

import json
import math
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..client.events import RECONNECTING, Event
from ..client.models import Space, Task
from ..domain.durations import duration_words, left_words, run_seconds
from ..domain.failure import Failure, task_failure

# A rate is measured over the counts of this many seconds (unless the task reports one).
RATE_WINDOW = 30.0
BAR_WIDTH = 24
# An active task silent this long is shown stalled: the channels' default `stalled_after`,
# which the page also uses when it knows no channel's (web/static/stalls.js).
STALLED_AFTER = 600.0


@dataclass
class Row:
    """One task and the counts it reported, as (updated_at in POSIX seconds, current)."""

    task: Task
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    # The server's estimate (`event: estimates`), and when it came.
    estimate: tuple[dict[str, Any], datetime] | None = None

    def record(self) -> None:
        progress = self.task.progress
        if progress is None or progress.current is None or progress.updated_at is None:
            return
        at, current = progress.updated_at.timestamp(), float(progress.current)
        if self.samples and self.samples[-1][0] == at:
            return
        if self.samples and current < self.samples[-1][1]:
            self.samples.clear()  # counted again from lower: a new run of the count
        self.samples.append((at, current))
        while len(self.samples) > 2 and self.samples[0][0] < at - RATE_WINDOW:
            self.samples.popleft()

    @property
    def rate(self) -> float | None:
        """Per second: what the task reports as `values.rate`, else measured."""
        progress = self.task.progress
        reported = progress.values.get("rate") if progress else None
        if isinstance(reported, int | float) and not isinstance(reported, bool):
            return float(reported)
        if len(self.samples) < 2:
            return None
        (first_at, first), (last_at, last) = self.samples[0], self.samples[-1]
        return (last - first) / (last_at - first_at) if last_at > first_at else None


class Board:
    """The space as the stream tells it: a snapshot, then one task at a time. Steps are
    kept under their parent (a parent's own event carries no children). While the
    follower waits to reconnect, `waiting` holds why and until when. `apply` and
    `render` may run in different threads: both hold `lock`."""

    def __init__(self) -> None:
        self.title: str | None = None
        self.icon: str | None = None
        self.rows: dict[str, Row] = {}
        self.top: list[str] = []
        self.steps: dict[str, list[str]] = {}
        self.status = "connecting"
        self.waiting: tuple[str, datetime] | None = None
        self.lock = threading.Lock()

    def apply(self, event: Event, now: datetime | None = None) -> None:
        """Take one event in; `now` (default: the time) starts a reconnection's wait."""
        with self.lock:
            if event.event == "snapshot":
                self._snapshot(Space.from_json(json.loads(event.data)))
            elif event.event == "task":
                task = Task.from_json(json.loads(event.data))
                self._put(task, task.parent_key, {})
            elif event.event == "estimates":
                for key, estimate in json.loads(event.data).items():
                    if key in self.rows:
                        self.rows[key].estimate = (estimate, now or datetime.now(UTC))
            elif event.event == RECONNECTING:
                self.status = f"reconnecting: {event.data}"
                self.waiting = None
                if event.retry_in is not None:
                    until = (now or datetime.now(UTC)) + timedelta(seconds=event.retry_in)
                    self.waiting = (event.data, until)

    def _snapshot(self, space: Space) -> None:
        """Start over from the snapshot, keeping the counts seen of tasks still there."""
        previous = self.rows
        self.title, self.icon = space.title, space.icon
        self.rows, self.top, self.steps = {}, [], {}
        for task in space.tasks:
            self._put(task, None, previous)
            for child in task.children:
                self._put(child, task.key, previous)
        self.status = "live"
        self.waiting = None

    def _put(self, task: Task, parent: str | None, previous: dict[str, Row]) -> None:
        row = self.rows.get(task.key)
        if row is None:
            row = previous.get(task.key) or Row(task)
            self.rows[task.key] = row
            (self.steps.setdefault(parent, []) if parent else self.top).append(task.key)
        row.task = task
        row.record()

    def failure(self, key: str) -> Failure | None:
        """How the task `key` failed, judged with its steps as the board holds them (a
        parent's own event carries none); None if it has not failed."""
        task = self.rows[key].task
        steps = (self.rows[step].task for step in self.steps.get(key, ()))
        return task_failure(
            finished=task.finished,
            values=task.progress.values if task.progress else None,
            steps=((s.title, s.finished, s.progress.values if s.progress else None) for s in steps),
        )


def render(board: Board, now: datetime) -> RenderableType:
    """The board as a table that fits the terminal, as `headway watch --help` tells it
    (`LAYOUT`: what gives way on a narrow one); its caption says whether the stream is
    live, or why and for how long more it waits to reconnect ("rate limited; retrying in
    12 s")."""
    return _Drawn(board, now)


COLUMNS = ("mark", "task", "progress", "percent", "count", "rate", "left", "updated", "log")
HEADERS = {name: name for name in COLUMNS if name not in ("mark", "percent")}
RIGHT = {"percent", "count", "rate", "left", "updated"}
# Widest the task and log columns grow on a wide terminal.
MAX_WIDTHS = {"task": 40, "log": 60}
# What gives way, in order, while the table is wider than the terminal: ("cut", column,
# down to) or ("drop", column). The mark and the percent (a task without `end`: its
# count) never give way; the bar, the time left and a log line of 20 cells or so stay on
# an 80-column terminal. The room a cut left unused goes back to the log, then the title.
LAYOUT: tuple[tuple[str, str, int], ...] = (
    ("cut", "log", 50),
    ("cut", "task", 30),
    ("cut", "progress", 16),
    ("cut", "log", 40),
    ("drop", "rate", 0),
    ("cut", "log", 30),
    ("drop", "updated", 0),
    ("cut", "task", 20),
    ("cut", "progress", 10),
    ("cut", "log", 24),
    ("drop", "count", 0),
    ("cut", "task", 16),
    ("cut", "log", 16),
    ("cut", "task", 12),
    ("drop", "log", 0),
    ("drop", "left", 0),
    ("drop", "progress", 0),
    ("cut", "task", 4),
)
GAP = 2  # between two columns: one cell of padding on each side


@dataclass
class _Drawn:
    """The board at `now`, laid out when rich says how wide it may be."""

    board: Board
    now: datetime

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield _table(self.board, self.now, options.max_width)


def _table(board: Board, now: datetime, width: int) -> Table:
    with board.lock:
        heading = " ".join(part for part in (board.icon, board.title or "Untitled space") if part)
        failures = {key: board.failure(key) for key in board.rows}
        failed = sum(failures[key] is not None for key in board.top)
        rows: list[dict[str, Any]] = []
        for key in _newest_first(board):
            rows.append(_cells(board.rows[key], now, failures[key], step=False))
            for child in board.steps.get(key, ()):
                rows.append(_cells(board.rows[child], now, failures[child], step=True))
        count = len(board.rows)
        caption = (
            f"{_status(board, now)} · {count} {'task' if count == 1 else 'tasks'}"
            + (f" · {failed} failed" if failed else "")
            + " · Ctrl-C to quit"
        )
    widths = _widths(rows, width)
    table = Table(
        title=Text(heading, style="bold"),
        caption=caption,
        min_width=min(width, len(caption)),  # an empty board's caption stays one line
        box=None,
        pad_edge=False,
        header_style="bold dim",
    )
    for name, size in widths.items():
        table.add_column(
            HEADERS.get(name, ""),
            width=size,
            justify="right" if name in RIGHT else "left",
            overflow="ellipsis",
            no_wrap=True,
        )
    for cells in rows:
        table.add_row(
            *(
                _bar(*cells["progress"], now, size) if name == "progress" else cells[name]
                for name, size in widths.items()
            )
        )
    return table


def _newest_first(board: Board) -> list[str]:
    """Top-level tasks newest first, as the page lists them (the stream's snapshot comes
    oldest first; a task it has not dated yet counts as newest)."""
    latest = datetime.max.replace(tzinfo=UTC)
    order = {key: index for index, key in enumerate(board.top)}
    return sorted(
        board.top,
        key=lambda key: (board.rows[key].task.created_at or latest, order[key]),
        reverse=True,
    )


def _widths(rows: list[dict[str, Any]], width: int) -> dict[str, int]:
    """Each column shown and its width, so that the table fits `width` cells."""
    widths: dict[str, int] = {}
    for name in COLUMNS:
        if name == "progress":
            widths[name] = BAR_WIDTH
            continue
        cells = [cell_len(HEADERS.get(name, ""))]
        cells += [cell_len(cells_[name].plain) for cells_ in rows]
        widths[name] = min(max(cells), MAX_WIDTHS.get(name, width))
    for name in ("rate", "count", "left", "updated", "log"):
        if not any(cells_[name].plain for cells_ in rows):  # nothing to show
            del widths[name]
    wanted = dict(widths)
    for action, name, least in LAYOUT:
        excess = sum(widths.values()) + GAP * (len(widths) - 1) - width
        if excess <= 0:
            break
        if name not in widths:
            continue
        if action == "drop":
            del widths[name]
        else:
            widths[name] = max(min(least, widths[name]), widths[name] - excess)
    for name in ("log", "task"):  # the room a cut left unused goes back
        room = width - sum(widths.values()) - GAP * (len(widths) - 1)
        if name in widths and room > 0:
            widths[name] = min(wanted[name], widths[name] + room)
    return widths


def _status(board: Board, now: datetime) -> str:
    if board.waiting is not None:
        why, until = board.waiting
        left = (until - now).total_seconds()
        if left > 0:
            return f"{why}; retrying in {math.ceil(left)} s"
    return board.status


def _cells(row: Row, now: datetime, failure: Failure | None, *, step: bool) -> dict[str, Any]:
    """One task's cells, each a Text, but "progress": the row and its failure, drawn once
    its width is known."""
    task, progress = row.task, row.task.progress
    values = progress.values if progress else {}
    current = progress.current if progress else None
    end = progress.end if progress else None
    stalled = _stalled(task, now)
    if failure is not None:
        mark = Text("✗", "bold red")
    elif task.finished:
        mark = Text("✓", "bold green")
    else:
        mark = Text("…", "yellow" if stalled else "cyan")
    ratio = _ratio(row, failure)
    count = (
        "" if current is None else _number(current) + ("" if end is None else f"/{_number(end)}")
    )
    percent = "" if ratio is None else f"{ratio:.0%}"
    if ratio is None and count:  # a count without a total stands in for its percent
        percent, count = count, ""
    if stalled:
        percent = f"{percent} stalled".strip()
    elif progress is None and not task.finished:
        percent = "waiting"
    rate = row.rate
    unit = values.get("unit")
    left = ""
    if task.finished:
        took = run_seconds(task.created_at, task.finished_at)
        left = f"took {duration_words(task.duration or 0 if took is None else took)}"
    elif row.estimate is not None and _knows(row.estimate[0]):
        rate, left = _served(row.estimate, now, rate)
    elif rate and end and current is not None and current < end:
        left = _left_words((end - current) / rate)
    updated = ""
    if progress is not None and progress.updated_at is not None:
        age = (now - progress.updated_at).total_seconds()
        updated = "just now" if age < 1 else f"{duration_words(age)} ago"  # as the page says
    return {
        "mark": mark,
        "task": Text(("  " if step else "") + (task.title or "untitled"), "" if step else "bold"),
        "progress": (row, failure),
        "percent": Text(percent, "yellow" if stalled else ""),
        "count": Text(count),
        "rate": Text(f"{_number(rate)} {unit if isinstance(unit, str) else ''}/s" if rate else ""),
        "left": Text(left),
        "updated": Text(updated),
        "log": Text(failure.message, "red")
        if failure is not None
        else Text(str(values.get("log", "")), "dim"),
    }


def _knows(estimate: dict[str, Any]) -> bool:
    """Whether the server's estimate says anything: a rate, a time left, or late."""
    return any(estimate.get(name) for name in ("rate_per_s", "remaining_s", "late"))


def _served(
    served: tuple[dict[str, Any], datetime], now: datetime, rate: float | None
) -> tuple[float | None, str]:
    """The rate and the time left by the server's estimate, counted down since it came
    ("4 min", "late · 4 min"); the rate measured here where it gives none."""
    estimate, at = served
    left = ""
    remaining = estimate.get("remaining_s")
    if isinstance(remaining, int | float):
        left = _left_words(remaining - (now - at).total_seconds())
    if estimate.get("late"):
        left = f"late · {left}" if left else "late"
    return estimate.get("rate_per_s") or rate, left


def _left_words(seconds: float) -> str:
    """The time left as the page says it, counted down: "about 20 s" under a minute
    ("almost done" under a second), then to the nearest minute ("4 min")."""
    if not math.isfinite(seconds) or seconds < 1:
        return "almost done"
    if seconds < 59.5:
        return f"about {math.floor(seconds + 0.5)} s"
    return left_words(seconds)


def _ratio(row: Row, failure: Failure | None) -> float | None:
    """The part of the task done as shown: where it stopped for a failed one (a task that
    failed at 1/4 shows 25 %, not a full bar), else its progress's `ratio`."""
    progress = row.task.progress
    if progress is None:
        return None
    if failure is not None and progress.current is not None and progress.end:
        return min(1.0, max(0.0, progress.current / progress.end))
    return progress.ratio


def _stalled(task: Task, now: datetime) -> bool:
    """Whether an active task has said nothing for `STALLED_AFTER` since its last report
    (or its creation), the rule the page uses when it knows no channel's."""
    if task.finished:
        return False
    progress = task.progress
    since = (progress.updated_at if progress is not None else None) or task.created_at
    return since is not None and (now - since).total_seconds() >= STALLED_AFTER


def _bar(row: Row, failure: Failure | None, now: datetime, width: int) -> ProgressBar:
    task, progress = row.task, row.task.progress
    ratio = _ratio(row, failure)
    if ratio is not None:
        return ProgressBar(total=1, completed=ratio, width=width)
    if task.finished:
        return ProgressBar(total=1, completed=1, width=width)
    if progress is not None and progress.current is not None:  # a count with no total
        return ProgressBar(total=None, width=width, animation_time=now.timestamp())
    return ProgressBar(total=1, completed=0, width=width)


def _number(number: float) -> str:
    if float(number).is_integer():
        return str(int(number))
    return f"{number:.2f}".rstrip("0").rstrip(".")
