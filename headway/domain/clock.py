"""The clock as a dependency: the service asks it for the time, tests move it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock time in whole microseconds since the Unix epoch (UTC)."""

    def now_us(self) -> int: ...


class SystemClock:
    """The real clock."""

    def now_us(self) -> int:
        return time.time_ns() // 1000


class ManualClock:
    """A clock that only moves when told to, for tests and benchmarks."""

    def __init__(self, start_us: int = 1_790_000_000_000_000) -> None:
        self._now_us = start_us

    def now_us(self) -> int:
        return self._now_us

    def advance(self, seconds: float = 0, *, us: int = 0) -> None:
        """Move time forward by `seconds` plus `us` microseconds."""
        self._now_us += round(seconds * 1_000_000) + us
