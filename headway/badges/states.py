"""What a badge says: the state, words, bar and tooltip of a task or a space, read from
their JSON as a share link shows it, and the same as Shields' endpoint JSON.

States: a task is **failed** (finished, and failed as `failure` decides, its steps
counted), **done** (finished), **stalled**, **waiting** (never reported, or its progress
expired) or **running**. Stalled is the stall rule's `silent` half (notify.stalls): an
active task with no report for STALLED_AFTER_S seconds since its last one, or since its
creation if it never reported; a parent counts its steps' reports and finishes. The
rule's `flat` half (reports whose `current` does not change) needs the history of
`current`, which the server keeps only for channels, so a badge does not judge it.

A space's badge sums up its newest SPACE_TASKS top-level tasks, the ones its page shows
first: "3 running · 42%" (the mean ratio of the active tasks that have one, stalled ones
too, rounded down), then "· 1 stalled", "· 1 failed"; "2 waiting" while no active task
that is not stalled has reported;
"all done" or "1 failed" once none is active; "no tasks" when it holds none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from ..domain import tasks as domain
from ..domain.durations import duration_words, left_words, run_seconds
from ..domain.estimates import Estimate
from ..domain.failure import Failure, failure_of
from .colours import BACKGROUND, LABEL, State

# The channels' default `stalled_after` (schemas.CreateChannel), so that a badge and a
# channel left at its default agree on when a task has stalled.
STALLED_AFTER_S = 600
SPACE_TASKS = 50  # top-level tasks a space's badge sums up (the page's first screen)
SPACE_LABEL = "progress"  # a space's label when it has no title
TASK_LABEL = "task"  # a task's label when it has no title
FAILED_NAMED = 3  # failed tasks a space's tooltip names
TITLE_CHARS = 300  # the tooltip's longest
# Shields fetches an endpoint again after this many seconds at the soonest (its minimum).
SHIELDS_CACHE_SECONDS = 300


class Badge(NamedTuple):
    """What a badge shows: `label | message` in the colour of `state`, a bar at `ratio`
    (None: no bar), and `title`, the tooltip that tells the whole of it."""

    label: str
    message: str
    state: State
    ratio: float | None
    title: str


def task_badge(
    task: Mapping[str, Any],
    now_us: int,
    label: str | None = None,
    estimate: Estimate | None = None,
) -> Badge:
    """The badge of one task (`label` replaces its title). A running task's `estimate`
    adds its time left ("62% · 4 min left"), or that it runs late ("62% · late")."""
    name = label if label is not None else (task.get("title") or TASK_LABEL)
    state, message = _task_state(task, now_us)
    if state == "running" and estimate is not None:
        if estimate.late:
            message += " · late"
        elif estimate.remaining_s is not None:
            message += f" · {left_words(estimate.remaining_s)} left"
    failure = failure_of(task) if state == "failed" else None
    ratio = _ratio(task)
    about = f"{task.get('title') or TASK_LABEL}: {message}"
    if failure is not None:
        about = f"{task.get('title') or TASK_LABEL}: failed: {failure.message}"
    elif state == "stalled":
        about += f" (no report for {duration_words(_silent_s(task, now_us))})"
    if state == "running" and estimate is not None and estimate.usual is not None:
        about += f" (usually {duration_words(estimate.usual.p50_s)})"
    return Badge(name, message, state, 1.0 if state in ("done", "failed") else ratio, _clip(about))


def space_badge(
    title: str | None, tasks: Sequence[Mapping[str, Any]], now_us: int, label: str | None = None
) -> Badge:
    """The badge of a space from its newest top-level tasks (`label` replaces its title)."""
    name = label if label is not None else (title or SPACE_LABEL)
    failed: list[tuple[Mapping[str, Any], Failure]] = []
    active: list[Mapping[str, Any]] = []
    for task in tasks:
        if task.get("finished_at") is None:
            active.append(task)
        elif (failure := failure_of(task)) is not None:
            failed.append((task, failure))
    stalled: list[Mapping[str, Any]] = []
    moving: list[Mapping[str, Any]] = []
    for task in active:
        (stalled if _stalled(task, now_us) else moving).append(task)
    ratios = [r for task in active if (r := _ratio(task)) is not None]
    mean = sum(ratios) / len(ratios) if ratios else None
    parts = []
    waiting = all(task.get("progress") is None for task in moving)
    if moving:
        parts.append(f"{len(moving)} {'waiting' if waiting else 'running'}")
    if mean is not None:
        parts.append(_percent(mean))
    if stalled:
        parts.append(f"{len(stalled)} stalled")
    if failed:
        parts.append(f"{len(failed)} failed")
    state: State
    if failed:
        state = "failed"
    elif stalled:
        state = "stalled"
    elif moving:
        state = "waiting" if waiting else "running"
    else:
        state = "done" if tasks else "waiting"
    message = " · ".join(parts) or ("all done" if tasks else "no tasks")
    about = f"{title or SPACE_LABEL}: {message}"
    if failed:
        named = [
            f"{task.get('title') or TASK_LABEL}: {failure.message}"
            for task, failure in failed[:FAILED_NAMED]
        ]
        about += f" ({'; '.join(named)})"
    ratio = mean if active else (1.0 if tasks else None)
    return Badge(name, message, state, ratio, _clip(about))


def shields_json(badge: Badge, style: str = "flat") -> dict[str, Any]:
    """`badge` in the JSON of Shields' endpoint badge (schemaVersion 1): Shields draws it
    in any of its styles (`style` is the default one; a `style` in Shields' URL wins).
    Colours are hex without `#`; a failure is `isError` (Shields then keeps its colour
    whatever the URL asks). See `schemas.ShieldsOut`."""
    return {
        "schemaVersion": 1,
        "label": badge.label,
        "message": badge.message,
        "color": BACKGROUND[badge.state].removeprefix("#"),
        "labelColor": LABEL.removeprefix("#"),
        "isError": badge.state == "failed",
        "style": style,
        "cacheSeconds": SHIELDS_CACHE_SECONDS,
    }


def shown(tasks: Any) -> Any:
    """Tasks (or one task) as their JSON shows them, as plain dicts and lists: the answers
    of `service` hold structs and JSON already encoded."""
    return msgspec.json.decode(msgspec.json.encode(tasks))


def _task_state(task: Mapping[str, Any], now_us: int) -> tuple[State, str]:
    if task.get("finished_at") is not None:
        if failure_of(task) is not None:
            return "failed", "failed"
        took = run_seconds(task.get("created_at"), task.get("finished_at"))
        return "done", f"done in {duration_words(took if took is not None else 0)}"
    if _stalled(task, now_us):
        return "stalled", "stalled"
    progress = task.get("progress")
    if progress is None:
        return "waiting", "waiting"
    current, end = progress.get("current"), progress.get("end")
    if progress.get("aggregated"):
        return "running", f"{current} of {end} steps"
    ratio = progress.get("ratio")
    if ratio is not None:
        return "running", _percent(ratio)
    if current is not None:
        return "running", f"{_count(current)} so far"
    return "running", "running"


def _stalled(task: Mapping[str, Any], now_us: int) -> bool:
    return task.get("finished_at") is None and _silent_s(task, now_us) >= STALLED_AFTER_S


def _silent_s(task: Mapping[str, Any], now_us: int) -> float:
    """Seconds since the task's last sign of life: its last report (a parent's progress
    counts its steps' reports), a step's finish, or else its creation."""
    progress = task.get("progress") or {}
    stamps = [progress.get("updated_at")]
    stamps += [child.get("finished_at") for child in task.get("children") or ()]
    known = [domain.parse_ts(stamp) for stamp in stamps if stamp]
    last = max(known) if known else domain.parse_ts(task["created_at"])
    return max(0, now_us - last) / 1_000_000


def _ratio(task: Mapping[str, Any]) -> float | None:
    progress = task.get("progress")
    ratio = progress.get("ratio") if progress else None
    return float(ratio) if isinstance(ratio, int | float) else None


def _percent(ratio: float) -> str:
    """A whole percentage, rounded down so that 99.9% never reads as done."""
    return f"{math.floor(ratio * 100)}%"


def _count(number: float) -> str:
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    return f"{number:,}" if isinstance(number, int) else f"{number:,.2f}".rstrip("0").rstrip(".")


def _clip(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
