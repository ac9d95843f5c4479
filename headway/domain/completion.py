"""The completion event: the JSON the outbox stores and every webhook receives, bounded
in size whatever the task holds."""

from __future__ import annotations

from typing import Any

import msgspec

from .tasks import EMPTY_VALUES, TaskView, format_ts

# The most bytes one event's JSON may take. A task's own values are at most about as
# much (a report body is at most 64 KiB), so a leaf task's event is almost never reduced;
# a parent's children are what can make an event large.
MAX_EVENT_BYTES = 65_536

_encode = msgspec.json.Encoder().encode


def completion_event(task: TaskView, now_us: int) -> str:
    """The JSON of the `task.completed` event for `task` (as `GET /tasks/{uuid}` shows it).

    The event is `{"type": "task.completed", "timestamp", "data": task}` unchanged when
    its JSON takes at most MAX_EVENT_BYTES (64 KiB): every ordinary task. A larger one is
    reduced, in this order, until it fits:

    1. A task with children: its `children` lose their values (each child's
       `progress.values` is `{}`) and only the first ones that fit stay, in their usual
       order; `data` gains `"children_omitted": k`, how many were left out (maybe 0).
    2. Only if the task without any children still does not fit (its own values near
       their 64 KiB limit): its own `progress.values` becomes `{}` too, and `data` gains
       `"values_omitted": true`; then its children are fitted as in 1.

    Everything else keeps the shape `GET /tasks/{uuid}` shows; a reduced event is marked
    by those members, and the whole task can be read from `GET /tasks/{uuid}`.
    """
    event = {"type": "task.completed", "timestamp": format_ts(now_us), "data": task}
    payload = _encode(event)
    if len(payload) <= MAX_EVENT_BYTES:
        return payload.decode()
    whole: dict[str, Any] = msgspec.json.decode(_encode(task))  # members to take out
    children = [_without_values(child) for child in whole["children"]]
    data = {**whole, "children": []}
    if children:
        data["children_omitted"] = len(children)  # the most digits it can take
    event["data"] = data
    if len(_encode(event)) > MAX_EVENT_BYTES:
        data.update(_without_values(whole), children=[], values_omitted=True)
    room = MAX_EVENT_BYTES - len(_encode(event))
    kept = 0
    for child in children:
        size = len(_encode(child)) + (1 if kept else 0)  # and a comma after the first
        if size > room:
            break
        room -= size
        kept += 1
    if children:
        data.update(children=children[:kept], children_omitted=len(children) - kept)
    return _encode(event).decode()


def _without_values(task: dict[str, Any]) -> dict[str, Any]:
    progress = task["progress"]
    if progress is None:
        return task
    return {**task, "progress": {**progress, "values": EMPTY_VALUES}}
