"""Pure rules of Headway: task states, reports, ratio, aggregation, failure, timestamps.
No I/O."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NewType

import msgspec
import regex

# Failure is decided in `failure` (light enough for the client and `headway watch`), and
# named here with the other rules of a task's state.
from .failure import FailedStep as FailedStep
from .failure import Failure as Failure
from .failure import failed_error as failed_error
from .failure import failed_steps as failed_steps
from .failure import failure_of as failure_of
from .failure import task_failure as task_failure

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)
# Values are kept as their JSON text: a quarter of the memory of a dict, and they are only
# ever written back out.
EMPTY_VALUES = msgspec.Raw(b"{}")
_encode_values = msgspec.json.Encoder().encode

Number = int | float


class Changed(StrEnum):
    """What a write did, as every cache and the change feed hear it (see `service.unit`)."""

    CREATE = "create"  # a task was created (a child: its parent's family changed too)
    REPORT = "report"  # a task's live progress was replaced; no row changed
    FINISH = "finish"  # a task finished (and maybe its parent with it)
    REVOKE = "revoke"  # a share link of the space was revoked (`task_uuid` names it)
    DELETE = "delete"  # a task was deleted with its children (its parent's family changed)
    PRUNE = "prune"  # a task was removed to make room for a new one (see `service.caps`)
    DROP = "drop"  # the whole space was deleted (`task_uuid` is "")


# A family's version, as the progress store that keeps versions gives it (see
# `coherence.FamilyVersions`): only ever compared for equality.
FamilyVersion = NewType("FamilyVersion", str)


class TaskRow(msgspec.Struct, frozen=True, gc=False):
    """A task as the database stores it. Only `finished_at_us`, `duration`, `failed` and
    `error` ever change, and each changes once, when the task finishes: `failed` whether it
    failed (itself or through its steps; None while active, and for tasks finished before
    failures were stored), `error` the error it reported itself then (None: none). The
    outcome is kept so (CONTRACT, "A failure is kept with its finish"): its answers show
    it whatever its progress does afterwards (see `view`)."""

    uuid: str
    space_uuid: str
    parent_uuid: str | None
    title: str | None
    source: str | None
    created_at_us: int
    finished_at_us: int | None = None
    duration: int | None = None
    failed: bool | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.finished_at_us is not None


class Progress(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """The live state of one task, as the last report left it.

    On a parent, `current` and `end` are always None: a parent's counts are derived
    from its children when it is read.
    """

    current: Number | None
    end: Number | None
    values: msgspec.Raw  # the JSON object of values, as `values` in responses shows it
    updated_at_us: int


class Report(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One report as a client sent it, already validated. `UNSET` marks an omitted member."""

    current: Number | msgspec.UnsetType | None = msgspec.UNSET
    end: Number | msgspec.UnsetType | None = msgspec.UNSET
    values: dict[str, str | int | float | bool] | msgspec.UnsetType | None = msgspec.UNSET
    done: bool | msgspec.UnsetType = msgspec.UNSET

    @property
    def is_done_only(self) -> bool:
        """True for a body of exactly `{"done": true}`: it finishes and keeps the last numbers."""
        return (
            self.done is True
            and self.current is msgspec.UNSET
            and self.end is msgspec.UNSET
            and self.values is msgspec.UNSET
        )


def apply_report(
    previous: Progress | None, report: Report, now_us: int, *, is_parent: bool
) -> tuple[Progress, bool]:
    """The progress a report leaves behind, and whether the report asks the task to finish.

    Whether the task actually finishes now also depends on whether it already has; the
    caller decides that against the database.
    """
    if report.is_done_only:
        if previous is None:
            return Progress(None, None, EMPTY_VALUES, now_us), True
        return Progress(previous.current, previous.end, previous.values, now_us), True

    values = _clean_values(report.values)
    done = report.done is True
    if is_parent:
        # A parent's counts come from its children; what it reports is ignored.
        return Progress(None, None, values, now_us), done
    current = None if report.current is msgspec.UNSET else report.current
    end = None if report.end is msgspec.UNSET else report.end
    reached_end = end is not None and end > 0 and current is not None and current >= end
    return Progress(current, end, values, now_us), done or reached_end


def _clean_values(values: object) -> msgspec.Raw:
    if not values:
        return EMPTY_VALUES
    assert isinstance(values, dict)
    log = values.get("log")
    if isinstance(log, str) and ("\n" in log or "\r" in log):
        values = {**values, "log": last_line(log)}
    return msgspec.Raw(_encode_values(values))


def last_line(text: str) -> str:
    """The last non-empty line of `text` ("" if it has none): `values.log` holds one line."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line
    return ""


def ratio(current: Number | None, end: Number | None, *, finished: bool) -> float | None:
    """1 when finished; None when the denominator or count is unknown; else clamped.

    Never raises, whatever numbers are stored: a quotient that cannot be computed (a
    whole number beyond a float) or is NaN reads as unknown, None.
    """
    if finished:
        return 1
    if not end or current is None:  # None or 0
        return None
    try:
        quotient = current / end
    except (ArithmeticError, TypeError):
        return None
    # Comparisons rather than min/max: a space read computes one ratio per task.
    if quotient > 0.0:
        return quotient if quotient < 1.0 else 1.0
    return None if quotient != quotient else 0.0  # NaN: unknown


class ProgressView(msgspec.Struct, frozen=True, gc=False):
    """The `progress` member of a task as every answer shows it."""

    current: Any
    end: Any
    ratio: Any
    values: msgspec.Raw
    updated_at: str | None
    aggregated: bool


class TaskView(msgspec.Struct, gc=False):
    """A task as every read and report answers it (and as the completion event holds it),
    encoded in one call. `children` holds each child's `TaskView`, or its JSON already
    encoded (`msgspec.Raw`, see `caches.families`). `tests/reference.py` builds the
    same answer as plain dicts: the views are checked byte for byte against it."""

    uuid: str
    space_uuid: str
    parent_uuid: str | None
    title: str | None
    source: str | None
    created_at: str
    finished_at: str | None
    duration: int | None
    progress: ProgressView | None
    children: list[Any]


# A finished task whose progress expired, or that never reported.
_FINISHED_UNREPORTED = ProgressView(None, None, 1, EMPTY_VALUES, None, False)


def kept_values(row: TaskRow, values: msgspec.Raw) -> msgspec.Raw:
    """The values of a finished task as its answers show them: its `error` is the outcome
    kept with its finish, whatever a later report sent (or its progress lost). A task that
    failed with an error of its own reads that error; one that succeeded reads no error (a
    later report's non-empty `error` is left out: it would read as a failure); one that
    failed only through its steps, or finished before outcomes were kept, reads its values
    as they are. Every other member is as the last report sent it. Costs a decode only
    where an error is to be put in or taken out. Called only where `row.failed` is not
    None: on a finished task that kept its outcome (an active task's values are as sent)."""
    error = row.error
    if error is None:
        if row.failed or b'"error"' not in bytes(values):
            return values
        found = msgspec.json.decode(values)
        if failed_error(found) is None:
            return values  # a number or an empty string there is just a value
        del found["error"]
        return msgspec.Raw(_encode_values(found)) if found else EMPTY_VALUES
    found = msgspec.json.decode(values)
    if found.get("error") == error:
        return values
    found["error"] = error
    return msgspec.Raw(_encode_values(found))


def view(
    row: TaskRow,
    progress: Progress | None,
    children: Sequence[tuple[TaskRow, Progress | None]] = (),
    children_json: list[msgspec.Raw | TaskView] | None = None,
    aggregate: tuple[int, int | None] | None = None,
) -> TaskView:
    """The answer for a task. `children_json`, when given,
    holds the JSON of each child, already encoded; `aggregate`, when given with it, the
    children's (finished count, newest `updated_at_us`), and `children` is then unused."""
    finished = row.finished_at_us
    if aggregate is not None and children_json is not None:
        count = len(children_json)
        done, latest = aggregate
    else:
        count = len(children)
        done = 0
        latest = None
        for child, found in children:
            if child.finished_at_us is not None:
                done += 1
            if found is not None and (latest is None or found.updated_at_us > latest):
                latest = found.updated_at_us
    if count:
        if progress is not None and (latest is None or progress.updated_at_us > latest):
            latest = progress.updated_at_us
        own = EMPTY_VALUES if progress is None else progress.values
        shown: ProgressView | None = ProgressView(
            done,
            count,
            ratio(done, count, finished=finished is not None),
            own if row.failed is None else kept_values(row, own),
            None if latest is None else format_ts(latest),
            True,
        )
        nested = (
            children_json
            if children_json is not None
            else [view(child, found) for child, found in children]
        )
    else:
        nested = []
        if progress is not None:
            shown = ProgressView(
                progress.current,
                progress.end,
                ratio(progress.current, progress.end, finished=finished is not None),
                progress.values if row.failed is None else kept_values(row, progress.values),
                format_ts(progress.updated_at_us),
                False,
            )
        elif finished is None:
            shown = None
        elif row.error is None:
            shown = _FINISHED_UNREPORTED
        else:
            # Its progress expired or was lost (a restart): its failure stays.
            shown = ProgressView(None, None, 1, kept_values(row, EMPTY_VALUES), None, False)
    return TaskView(
        row.uuid,
        row.space_uuid,
        row.parent_uuid,
        row.title,
        row.source,
        format_ts(row.created_at_us),
        None if finished is None else format_ts(finished),
        row.duration,
        shown,
        nested,
    )


def view_json(row: TaskRow, progress: Progress | None) -> msgspec.Raw:
    """The JSON of a childless task's answer."""
    return msgspec.Raw(_encode_values(view(row, progress)))


def view_failure(task: TaskView) -> Failure | None:
    """How the task of this answer failed (see `failure`), judged on its whole answer with
    every child's values, or None if it has not failed. Judge a finished task here, before
    its completion event may leave its children's values out (`completion`). Costs one
    encoding of the answer: meant for a finish, not for every read."""
    return failure_of(msgspec.json.decode(_encode_values(task)))


def duration_seconds(created_at_us: int, finished_at_us: int) -> int:
    """Whole seconds from creation to finish, rounded down."""
    return max(finished_at_us - created_at_us, 0) // 1_000_000


# --- Timestamps --------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+\- ]\d{2}:\d{2})?"
)


LAST_US = 253_402_300_799_999_999
"""The last instant `format_ts` writes: 9999-12-31T23:59:59.999999Z (RFC 3339 has four
digits for the year)."""


def format_ts(us: int) -> str:
    """RFC 3339 in UTC with microseconds and a `Z`: `2026-11-22T01:15:09.123456Z`, for an
    instant from the epoch to `LAST_US`."""
    seconds = us // 1_000_000
    # `str(1_000_000 + micros)[1:]` is the six digits, zero-padded, a third cheaper than
    # a format spec: a space read formats two timestamps per task.
    return (_SECONDS.get(seconds) or _second(seconds)) + str(1_000_000 + us % 1_000_000)[1:] + "Z"


# Timestamps cluster within seconds (a space read formats thousands): each second's text
# is made once, and kept while fewer than 4096 seconds are held.
_SECONDS: dict[int, str] = {}


def _second(seconds: int) -> str:
    if len(_SECONDS) >= 4096:
        _SECONDS.clear()
    text = _SECONDS[seconds] = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds))
    return text


def parse_ts(text: str, *, round_up: bool = False) -> int:
    """Microseconds since the epoch from an RFC 3339 timestamp; ValueError if it is not one.

    Any offset is accepted. A space where the offset's `+` should be is read as `+` (an
    unencoded `+` in a query string arrives as a space). A timestamp with no offset is
    read as UTC. Digits beyond microseconds are dropped, or round up with `round_up`.
    """
    extra = 0
    if not _RFC3339.fullmatch(text):
        raise ValueError(text)
    if len(text) > 6 and text[-6] == " ":
        text = text[:-6] + "+" + text[-5:]
    text = text[:10] + "T" + text[11:]
    if "." in text:
        head, _, tail = text.partition(".")
        digits = len(tail) - len(tail.lstrip("0123456789"))
        frac, zone = tail[:digits], tail[digits:]
        text = f"{head}.{frac[:6].ljust(6, '0')}{zone}"
        extra = 1 if round_up and frac[6:].strip("0") else 0
    moment = datetime.fromisoformat(text.upper() if text[-1:] in "zZ" else text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // ONE_US + extra


# --- Space fields ---------------------------------------------------------------------------


def grapheme_count(text: str) -> int:
    """How many user-perceived characters `text` holds (a flag or a family emoji is one)."""
    return len(regex.findall(r"\X", text))


def canonical_uuid(text: str) -> str | None:
    """The canonical lowercase form of a UUID, or None if `text` is not one."""
    if len(text) == 36 and _CANONICAL_UUID.fullmatch(text):
        return text
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
