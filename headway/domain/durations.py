"""How long something took or lasts, in the words a person reads: "1.9 s", "42 s",
"3 min 12 s", "2 h 5 min", "3 d 4 h". Standard library only, so that notification
messages, badges and `headway watch` share it. The pages' script says durations the same
way (`web/static/format.js`, `formatDuration`); a test holds the two to the same words.

The API's `duration` stays whole seconds rounded down, as the specification says; what a
person reads is measured from `created_at` to `finished_at` to the microsecond and
rounded to the nearest shown unit under a minute, so a 0.99 s job never "took 0 s"."""

from __future__ import annotations

import math
from datetime import datetime

# A timestamp as the API writes it (RFC 3339 text) or as the client reads it.
Moment = str | datetime | None


def duration_words(seconds: float) -> str:
    """Under 10 s with one decimal ("1.9 s"; "under 0.1 s" below that), under a minute in
    whole seconds rounded to the nearest ("42 s"), then two units, the smaller rounded
    down and left out when zero ("3 min 12 s", "2 h", "3 d 4 h"). Negative or not a
    number: as 0."""
    s = seconds if math.isfinite(seconds) and seconds > 0 else 0.0
    tenths = math.floor(s * 10 + 0.5)
    if tenths == 0:
        return "under 0.1 s"
    if tenths < 100:
        return f"{tenths / 10:.1f} s"
    whole = math.floor(s + 0.5)
    if whole < 60:
        return f"{whole} s"
    total = max(math.floor(s), 60)
    if total < 3600:
        return _pair(total // 60, "min", total % 60, "s")
    if total < 86_400:
        return _pair(total // 3600, "h", total % 3600 // 60, "min")
    return _pair(total // 86_400, "d", total % 86_400 // 3600, "h")


def left_words(seconds: float) -> str:
    """An estimate of the time left, as loosely as it is known: "under a minute", then
    `duration_words` of the nearest whole minute ("4 min", "2 h 5 min")."""
    s = seconds if math.isfinite(seconds) and seconds > 0 else 0.0
    if s < 60:
        return "under a minute"
    return duration_words(math.floor(s / 60 + 0.5) * 60)


def run_seconds(created_at: Moment, finished_at: Moment) -> float | None:
    """Seconds from `created_at` to `finished_at` (RFC 3339 text or datetimes), to the
    microsecond; None when either is missing or unreadable."""
    start, end = _moment(created_at), _moment(finished_at)
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _pair(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big} {big_unit} {small} {small_unit}" if small else f"{big} {big_unit}"


def _moment(value: Moment) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
