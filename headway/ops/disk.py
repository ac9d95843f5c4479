"""The disk budget: whether the database has room for more creates, decided in one place.

Creates (spaces, tasks, webhooks, share links, channels) add rows that stay; reports do
not (live progress is in memory or Redis). So when the database's storage runs short,
creates are refused with 503 and `Retry-After` before anything is written, while
reports, reads and finishes go on in the room left. Either limit refuses:

- `HEADWAY_DATABASE_MAX_SIZE` (unset by default): the database's size on disk, SQLite's
  file and write-ahead log, or PostgreSQL's `pg_database_size(current_database())`;
- `HEADWAY_DISK_FREE_MIN` (by default 1 GiB or 5% of the disk, whichever is smaller;
  `0` turns it off): the free space of the SQLite file's filesystem, as `statvfs` gives
  it to a process without root's reserve. PostgreSQL's disk is its server's, which this
  process cannot see: on PostgreSQL only the size limit applies.

Measuring never costs a create much. SQLite's measure is three system calls, made on the
create path at most once a `PERIOD_S`; a create in between pays a clock read. PostgreSQL's
is a query, run by a background loop (`DiskBudget.run`) every `PG_PERIOD_S` when a size
limit is set, and at most as often for `/up` and `/metrics`; never by a create.

The status `/up` shows: `ok`; `low` when a limit is near (free space under twice its
minimum, or the database past 90% of its maximum); `full` when a limit is passed (creates
are refused) or the filesystem has no byte left (writes fail: the database's own
disk-full error, answered 503 like any unavailable dependency).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..background.loops import repeat
from ..config import Settings
from ..config.parse import FreeMin, size_text
from ..domain.errors import Unavailable
from ..storage.database import Database
from ..storage.sqlite import file_bytes
from . import metrics

log = logging.getLogger("headway.disk")

Status = Literal["ok", "low", "full"]

PERIOD_S = 1.0  # SQLite: the longest a measure is trusted on the create path
PG_PERIOD_S = 5.0  # PostgreSQL: how often the background loop asks the database's size
RETRY_AFTER_S = 30  # room seldom comes back within seconds
LOW_FREE = 2  # free space under this many times its minimum is low
LOW_SIZE = 0.9  # a database past this share of its maximum is low

DEFAULT_FREE_MIN = FreeMin()
MAX_SIZE = "HEADWAY_DATABASE_MAX_SIZE"
FREE_MIN = "HEADWAY_DISK_FREE_MIN"
_REFUSED = (
    "; new spaces, tasks, webhooks, share links and channels are refused until there is "
    "room (reports still work). Retry later."
)
# What a refused client reads, by the limit passed (the figures are for /up and the logs).
REFUSALS = {
    MAX_SIZE: "The database has reached its size limit" + _REFUSED,
    FREE_MIN: "The database's disk is almost full" + _REFUSED,
}


@dataclass(frozen=True, slots=True)
class Measure:
    """What was measured (None: not known)."""

    database_bytes: int | None
    free_bytes: int | None = None  # free on the database's filesystem
    disk_bytes: int | None = None  # that filesystem's size


@dataclass(frozen=True, slots=True)
class DiskState:
    """The budget's verdict on one measure: `refusing` creates or not, and why."""

    status: Status
    measure: Measure
    refusing: bool = False
    limit: str | None = None  # the setting passed or near
    limit_bytes: int | None = None
    reason: str = ""  # for the logs: what was found, with its figures

    def check(self) -> dict[str, Any]:
        """`/up`'s `checks.disk`."""
        return {
            "status": self.status,
            "free_bytes": self.measure.free_bytes,
            "database_bytes": self.measure.database_bytes,
            "limit": self.limit,
            "limit_bytes": self.limit_bytes,
        }


UNKNOWN = DiskState("ok", Measure(None))


def judge(measure: Measure, max_bytes: int | None, free_min: FreeMin) -> DiskState:
    """The state of `measure` under the limits: the worst finding (refusing, then full,
    then low), the size limit first among equals."""
    found: list[DiskState] = []
    size = measure.database_bytes
    if max_bytes is not None and size is not None:
        if size >= max_bytes:
            reason = f"the database takes {size_text(size)}, at its limit of {size_text(max_bytes)}"
            found.append(DiskState("full", measure, True, MAX_SIZE, max_bytes, reason))
        elif size >= LOW_SIZE * max_bytes:
            reason = f"the database takes {size_text(size)} of its {size_text(max_bytes)}"
            found.append(DiskState("low", measure, False, MAX_SIZE, max_bytes, reason))
    free = measure.free_bytes
    if free is not None and measure.disk_bytes is not None:
        floor = free_min.of(measure.disk_bytes)
        left = f"{size_text(free)} free on the database's disk"
        if free < floor:
            reason = f"{left}, under the minimum of {size_text(floor)}"
            found.append(DiskState("full", measure, True, FREE_MIN, floor, reason))
        elif free == 0:  # and no minimum: no limit to name; the writes will fail
            found.append(DiskState("full", measure, reason=left))
        elif free < LOW_FREE * floor:
            reason = f"{left}, near the minimum of {size_text(floor)}"
            found.append(DiskState("low", measure, False, FREE_MIN, floor, reason))
    if not found:
        return DiskState("ok", measure)
    rank = {"full": 1, "low": 0}
    return max(found, key=lambda state: (state.refusing, rank[state.status]))


class DiskBudget:
    """Decides whether creates may write (`admit`), from a measure of the database's
    size and its filesystem's free space that is never older than its period
    (`PERIOD_S` on SQLite, `PG_PERIOD_S` on PostgreSQL, unless `period_s` says), on the
    clock `now` (seconds).

    `max_bytes` and `free_min` may be changed while serving; the next `refresh` judges
    by them.
    """

    def __init__(
        self,
        db: Database,
        *,
        max_bytes: int | None = None,
        free_min: FreeMin = DEFAULT_FREE_MIN,
        now: Callable[[], float] = time.monotonic,
        period_s: float | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.free_min = free_min
        self._db = db
        self._file = db.file
        self._directory = None if self._file is None else os.path.dirname(self._file) or "."
        self._now = now
        self._period = period_s or (PG_PERIOD_S if self._file is None else PERIOD_S)
        self._state = UNKNOWN
        self._measured_at = -math.inf
        self._failing = False

    @classmethod
    def from_settings(cls, settings: Settings, db: Database) -> DiskBudget:
        return cls(db, max_bytes=settings.database_max_size, free_min=settings.disk_free_min)

    @property
    def state(self) -> DiskState:
        """The last verdict, as it stands (no measure)."""
        return self._state

    @property
    def watched(self) -> bool:
        """Whether `run` must measure in the background: on PostgreSQL with a size
        limit, where a create never measures."""
        return self._file is None and self.max_bytes is not None

    def admit(self) -> None:
        """Raise Unavailable (503 with Retry-After) if creates are refused now. Cheap: on
        SQLite it measures when the last measure is a period old; on PostgreSQL it never
        does (see `run`)."""
        if self._file is not None and self._now() - self._measured_at >= self._period:
            self._judge(self._measure_file())
        state = self._state
        if state.refusing:
            metrics.refused("disk")
            message = REFUSALS[state.limit or MAX_SIZE]
            raise Unavailable(message, headers={"retry-after": str(RETRY_AFTER_S)})

    async def current(self) -> DiskState:
        """The verdict, measured again if the last measure is a period old."""
        if self._now() - self._measured_at >= self._period:
            return await self.refresh()
        return self._state

    async def refresh(self) -> DiskState:
        """Measure now and judge. A measure that fails keeps the last verdict (the
        database's own errors answer for it meanwhile); its failure is logged once."""
        if self._file is not None:
            return self._judge(self._measure_file())
        try:
            measured: Measure | Exception = Measure(await self._db.size_bytes())
        except Exception as exc:  # a database that is down: its requests say so
            measured = exc
        return self._judge(measured)

    async def run(self) -> None:
        """Measure every period, for good (PostgreSQL with a size limit: see `watched`)."""
        await repeat("disk", self.refresh, lambda _: self._period)

    def gauges(self) -> list[tuple[str, str, float]]:
        """What `/metrics` shows of the last measure."""
        measure = self._state.measure
        found = []
        if measure.database_bytes is not None:
            found.append(
                (
                    "headway_database_bytes",
                    "The database's size on disk: SQLite's file and write-ahead log, or "
                    "PostgreSQL's pg_database_size.",
                    float(measure.database_bytes),
                )
            )
        if measure.free_bytes is not None:
            found.append(
                (
                    "headway_disk_free_bytes",
                    "Free space on the SQLite database's filesystem.",
                    float(measure.free_bytes),
                )
            )
        return found

    def _measure_file(self) -> Measure | OSError:
        assert self._file is not None and self._directory is not None
        try:
            disk = os.statvfs(self._directory)
            size = file_bytes(self._file)
        except OSError as exc:
            return exc
        return Measure(size, disk.f_bavail * disk.f_frsize, disk.f_blocks * disk.f_frsize)

    def _judge(self, measured: Measure | Exception) -> DiskState:
        self._measured_at = self._now()
        if isinstance(measured, Exception):
            if not self._failing:
                self._failing = True
                log.warning("disk: cannot measure: %s: %s", type(measured).__name__, measured)
            return self._state
        if self._failing:
            self._failing = False
            log.info("disk: measured again")
        before, self._state = self._state, judge(measured, self.max_bytes, self.free_min)
        state = self._state
        if state.status != before.status or state.refusing != before.refusing:
            if state.refusing:
                log.warning("disk: %s (%s): creates are refused", state.reason, state.limit)
            elif state.status != "ok":
                named = f" ({state.limit})" if state.limit else ""
                log.warning("disk: %s: %s%s", state.status, state.reason, named)
            else:
                log.warning("disk: ok again")
        return state
