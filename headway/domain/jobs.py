"""Jobs: the runs Headway already keeps, grouped as a person names them. A job is the tasks
of one space with the same title, source and parent's title (a top-level task's: none);
a task without a title is in no job. Its runs are its finished tasks, succeeded or failed
(`failure`); a run lasts from `created_at` to `finished_at`.

A job's usual duration is the median (p50) and the 95th percentile (p95) of its last
`USUAL_RUNS` succeeded runs, once it has at least `USUAL_FROM`: a failed run says nothing
of how long the work takes. Percentiles are linear between the closest ranks (as
`numpy.percentile` computes them by default). No I/O here: `storage.jobs` keeps the
counts and finds the runs; `service.jobs` reads them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Annotated

import msgspec
from msgspec import Meta

USUAL_RUNS = 20  # the succeeded runs a usual duration is taken from, newest first
USUAL_FROM = 5  # fewer succeeded runs than this: no usual duration
LAST_RUNS = 30  # the newest runs a job's answer lists


def job_key(
    space_uuid: str, title: str | None, source: str | None, parent_title: str | None
) -> str | None:
    """The job a task is in, as 32 hex digits (None: an untitled task is in none). The
    parts are kept apart unambiguously, a missing one apart from an empty one."""
    if title is None:
        return None
    parts = msgspec.json.encode([space_uuid, title, source, parent_title])
    return hashlib.blake2b(parts, digest_size=16).hexdigest()


class Usual(msgspec.Struct, frozen=True):
    """How long a job's succeeded runs usually take: the median and the 95th percentile
    of its last 20 succeeded runs, in seconds, once it has 5."""

    p50_s: Annotated[float, Meta(ge=0)]
    p95_s: Annotated[float, Meta(ge=0)]
    from_runs: Annotated[int, Meta(ge=USUAL_FROM, le=USUAL_RUNS, description="Runs it is from.")]


class Run(msgspec.Struct, frozen=True):
    """One finished run: when it finished, how long it took, whether it failed."""

    finished_at: Annotated[str, Meta(extra_json_schema={"format": "date-time"})]
    seconds: Annotated[float, Meta(ge=0, description="From created_at to finished_at.")]
    failed: bool


class Job(msgspec.Struct, frozen=True):
    """The tasks of a space with one title, source and parent's title (null: top-level)."""

    title: str
    source: str | None
    parent_title: str | None
    runs: Annotated[int, Meta(ge=0, description="Its finished tasks, succeeded or failed.")]
    failed: Annotated[int, Meta(ge=0, description="Its runs that failed.")]
    active: Annotated[int, Meta(ge=0, description="Its tasks not finished yet.")]
    usual: Usual | None
    last: Annotated[list[Run], Meta(max_length=LAST_RUNS, description="Newest first.")]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The `q`-th quantile (0 to 1) of `ordered` (sorted, not empty), linear between the
    closest ranks."""
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def usual(succeeded_s: Sequence[float]) -> Usual | None:
    """The usual duration from the durations (seconds) of a job's succeeded runs, newest
    first: its last `USUAL_RUNS`, once there are `USUAL_FROM`; else None."""
    last = sorted(succeeded_s[:USUAL_RUNS])
    if len(last) < USUAL_FROM:
        return None
    return Usual(round(percentile(last, 0.5), 3), round(percentile(last, 0.95), 3), len(last))
