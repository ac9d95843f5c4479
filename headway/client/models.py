"""Typed results: a space, a task and its progress, read from the server's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Value = str | int | float | bool


def _time(text: str | None) -> datetime | None:
    """An RFC 3339 timestamp (`...Z` or an offset) as an aware datetime; None stays None."""
    return None if text is None else datetime.fromisoformat(text)


@dataclass(frozen=True, slots=True)
class Progress:
    """A task's live state. `ratio` is 1 once finished, None while the total is unknown."""

    current: float | None
    end: float | None
    ratio: float | None
    values: Mapping[str, Value]
    updated_at: datetime | None
    aggregated: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        return cls(
            current=data.get("current"),
            end=data.get("end"),
            ratio=data.get("ratio"),
            values=dict(data.get("values") or {}),
            updated_at=_time(data.get("updated_at")),
            aggregated=bool(data.get("aggregated")),
        )


@dataclass(frozen=True, slots=True)
class Task:
    """A task as `GET /tasks/{uuid}` shows it, steps in `children`.

    Read through a share link, a task has no `uuid`, `space_uuid` or `parent_uuid` but an
    opaque `id` (and `parent_id` in the live stream); `key` and `parent_key` work for both.
    """

    uuid: str | None
    space_uuid: str | None
    parent_uuid: str | None
    title: str | None
    source: str | None
    created_at: datetime | None
    finished_at: datetime | None
    duration: int | None
    progress: Progress | None
    children: tuple[Task, ...] = ()
    id: str | None = None
    parent_id: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        progress = data.get("progress")
        return cls(
            uuid=data.get("uuid"),
            space_uuid=data.get("space_uuid"),
            parent_uuid=data.get("parent_uuid"),
            title=data.get("title"),
            source=data.get("source"),
            created_at=_time(data.get("created_at")),
            finished_at=_time(data.get("finished_at")),
            duration=data.get("duration"),
            progress=None if progress is None else Progress.from_json(progress),
            children=tuple(cls.from_json(child) for child in data.get("children") or ()),
            id=data.get("id"),
            parent_id=data.get("parent_id"),
        )

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def key(self) -> str:
        """What names the task in its view: its uuid, or its id in a share link's."""
        return self.uuid or self.id or ""

    @property
    def parent_key(self) -> str | None:
        return self.parent_uuid or self.parent_id


@dataclass(frozen=True, slots=True)
class Space:
    """A space: top-level tasks oldest first, each with its steps. `uuid` is the space's
    credential, known when the client created or named it; a share link's view has none."""

    uuid: str | None
    title: str | None
    icon: str | None
    tasks: tuple[Task, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any], uuid: str | None = None) -> Space:
        return cls(
            uuid=data.get("uuid", uuid),
            title=data.get("title"),
            icon=data.get("icon"),
            tasks=tuple(Task.from_json(task) for task in data.get("tasks") or ()),
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a task will end, as the server sees it (`GET /tasks/{uuid}/estimate`): seconds
    since it was created, its rate (units of `current` a second), the time left and when
    that is, what it comes from (`"rate"`, `"usual"`, `"blend"`), how long its job
    usually takes (`usual_p50_s`, `usual_p95_s`: None without history) and whether it
    runs late. `remaining_s` is None while not known, 0 once finished."""

    elapsed_s: float
    rate_per_s: float | None
    remaining_s: float | None
    eta_at: datetime | None
    basis: str | None
    usual_p50_s: float | None
    usual_p95_s: float | None
    late: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Estimate:
        usual = data.get("usual") or {}
        return cls(
            elapsed_s=float(data["elapsed_s"]),
            rate_per_s=data.get("rate_per_s"),
            remaining_s=data.get("remaining_s"),
            eta_at=_time(data.get("eta_at")),
            basis=data.get("basis"),
            usual_p50_s=usual.get("p50_s"),
            usual_p95_s=usual.get("p95_s"),
            late=bool(data.get("late")),
        )
