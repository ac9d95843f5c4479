"""The reference answer of a task, built as plain dicts the slow and obvious way: every
fast answer (`domain.view`, encoded whole, in pieces, or from a cache) must encode to
exactly its JSON."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from headway.domain.tasks import EMPTY_VALUES, Progress, TaskRow, format_ts, ratio


def shown_values(row: TaskRow, values: msgspec.Raw) -> msgspec.Raw:
    """The values a task's answer shows: a finished one's `error` is the outcome kept with
    its finish (its own error if it failed with one; none, if it succeeded)."""
    if row.finished_at_us is None or row.failed is None or (row.failed and row.error is None):
        return values
    found = json.loads(bytes(values))
    if row.error is not None:
        if found.get("error") == row.error:
            return values
        found["error"] = row.error
    elif isinstance(found.get("error"), str) and found["error"]:
        del found["error"]
    else:
        return values
    return msgspec.Raw(msgspec.json.encode(found))


def progress_view(
    row: TaskRow,
    progress: Progress | None,
    children: list[tuple[TaskRow, Progress | None]] | None = None,
) -> dict[str, Any] | None:
    """The `progress` member of a task as clients read it (None: waiting for data)."""
    finished = row.finished_at_us is not None
    if children:
        done = sum(1 for child, _ in children if child.finished_at_us is not None)
        stamps = [p.updated_at_us for _, p in children if p is not None]
        if progress is not None:
            stamps.append(progress.updated_at_us)
        return {
            "current": done,
            "end": len(children),
            "ratio": ratio(done, len(children), finished=finished),
            "values": shown_values(row, progress.values if progress is not None else EMPTY_VALUES),
            "updated_at": format_ts(max(stamps)) if stamps else None,
            "aggregated": True,
        }
    if progress is None:
        if not finished:
            return None
        return {
            "current": None,
            "end": None,
            "ratio": 1,
            "values": shown_values(row, EMPTY_VALUES),
            "updated_at": None,
            "aggregated": False,
        }
    return {
        "current": progress.current,
        "end": progress.end,
        "ratio": ratio(progress.current, progress.end, finished=finished),
        "values": shown_values(row, progress.values),
        "updated_at": format_ts(progress.updated_at_us),
        "aggregated": False,
    }


def task_view(
    row: TaskRow,
    progress: Progress | None,
    children: list[tuple[TaskRow, Progress | None]] | None = None,
) -> dict[str, Any]:
    """A task as every read and report returns it, with its children nested."""
    return {
        "uuid": row.uuid,
        "space_uuid": row.space_uuid,
        "parent_uuid": row.parent_uuid,
        "title": row.title,
        "source": row.source,
        "created_at": format_ts(row.created_at_us),
        "finished_at": None if row.finished_at_us is None else format_ts(row.finished_at_us),
        "duration": row.duration,
        "progress": progress_view(row, progress, children),
        "children": [task_view(child, p) for child, p in children] if children else [],
    }
