"""Estimates: when a running task will end, from the reports the server received (on its
own clock) and from how long its job usually takes (`jobs.Usual`). No I/O: what a task
needs kept between reports is its `Track`, which lives beside its progress.

A track keeps a few anchors, (instant, `current`), spread over the newer half of the run:
a report closer than `gap` to the anchor before the newest replaces the newest instead
of adding one, so a burst of reports is one anchor, and the oldest goes beyond
`ANCHORS`. It starts again when `current` goes down or `end` changes. The rate is the
progress over the anchors' window, divided by the time from the window's start to the
newest report, and to half of any silence beyond the longest one the window holds: it
falls while nothing comes, so an estimate never freezes during a stall. A report after a
silence of `SILENCE_APART` times that starts the window again (the pace before a stall
says nothing of the pace after it). Between reports, as long as they are no later than
usual, the work goes on: the time since the last one counts as spent on what is left.

No rate before `MIN_REPORTS` reports that span `MIN_SPAN_S` seconds or `MIN_SPAN_PART`
of `end`, unless the reporter is steady: from its second report, when its reports span
`STEADY_SPAN_S` (but less than `MIN_SPAN_S`: two reports minutes apart may be a stall and
a restart) and none came after a pause over `STEADY_RATIO` times its shortest (a burst,
whose reports come closer than the anchors' gap, is one anchor: it never passes).
A job's usual duration, where it has one, is blended in: the time it leaves
(p50 less the time elapsed) weighs `1 - done`, the rate's `done` (the part of `end`
reached), so the rate counts more as the run nears its end.

A rate or a time left too big to say (infinite in floats, or an end past `LAST_US`, which
a huge `end` gives) is unknown, never an error: the rate's time left then gives way to
the usual duration, if there is one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import msgspec

from .jobs import Usual
from .tasks import LAST_US

ANCHORS = 8  # instants kept per task
MIN_GAP_US = 200_000  # anchors at least this far apart (and `elapsed / 2 / ANCHORS`)
MIN_REPORTS = 3
MIN_SPAN_S = 10.0
MIN_SPAN_PART = 0.02
STEADY_SPAN_S = 1.0  # or from the second report, when they are steady and span this
STEADY_RATIO = 3  # steady: no two anchors further apart than 3 times the closest two
FAR = 1.5  # a total beyond p95 x 1.5, or under p50 / 1.5, is far from the usual
SILENCE_APART = 4  # a silence this many times the anchors' spacing starts the window again
LATE_FACTOR = 1.2  # late beyond max(1.2 x p95, p50 + 60 s)
LATE_MARGIN_S = 60.0
LATE_FROM_DONE = 0.1  # the estimated total counts toward late once this much is done

Number = int | float
Basis = Literal["rate", "usual", "blend"]


class Track(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What the estimate of one task keeps between reports: since it last started (its
    first report, or `current` going down, or `end` changing), the instant and `current`
    of that start, `end`, how many reports came, and its anchors, flat: t, current, ...
    (instants in microseconds of the server's clock)."""

    started_us: int
    start: Number
    end: Number | None
    reports: int
    anchors: tuple[Number, ...]


_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.Decoder().decode

# A track flat, as the stores keep it (see `pack`): started, start, reports, end (False:
# none), then the anchors' instants and counts.
Flat = list[Number | bool]


def pack(track: Track | None) -> bytes | None:
    """A track as the stores keep it beside progress: a MessagePack array of its start
    (instant, `current`), its reports, its `end` (false: none) and its anchors, flat. The
    Redis store's Lua (`progress.redis_tracks`) reads and writes the same."""
    return None if track is None else _encode(_flat(track))


def unpack(packed: bytes | None) -> Track | None:
    """The track `pack` made (None: none)."""
    return _track(_decode(packed)) if packed else None


def followed(
    packed: bytes | None, now_us: int, current: Number | None, end: Number | None
) -> bytes | None:
    """`follow` on a packed track, packed (without building a `Track`: every report of
    every task runs it)."""
    if current is None:
        return None
    return _encode(_follow(_decode(packed) if packed else None, now_us, current, end))


def follow(
    track: Track | None, now_us: int, current: Number | None, end: Number | None
) -> Track | None:
    """The track after a report of `current` (None: a report without a count, which leaves
    no track) and `end`, received at `now_us`."""
    if current is None:
        return None
    return _track(_follow(None if track is None else _flat(track), now_us, current, end))


def _exact(number: Number) -> Number:
    """A count as a track keeps it: a whole number beyond 2**53 as the float it is read
    as (MessagePack holds no integer past 64 bits, and Redis's Lua only doubles)."""
    return float(number) if type(number) is int and not -_EXACT <= number <= _EXACT else number


_EXACT = 2**53


def _follow(t: Flat | None, now_us: int, current: Number, end: Number | None) -> Flat:
    """The rules of `follow`, on a flat track (changed in place), as the Lua twin has them."""
    current = _exact(current)
    e: Number | bool = False if end is None else _exact(end)
    if (
        t is None
        or (t[3] is False) is not (e is False)
        or t[3] != e
        or current < t[-1]
        or now_us < t[-2]
    ):
        return [now_us, current, 1, e, now_us, current]
    n = len(t)
    silent = now_us - t[-2]
    # The anchors are at least as far apart as the last two: most reports need no more.
    if (
        n >= 10
        and silent > SILENCE_APART * (t[-2] - t[-4])
        and silent > SILENCE_APART * _apart_us(t, 4)
    ):
        # Back from a silence longer than the window's anchors are apart: what came before
        # it says nothing of the pace now.
        return [t[0], t[1], t[2] + 1, e, now_us, current]
    t[2] += 1
    gap = max(MIN_GAP_US, (now_us - t[0]) // (2 * ANCHORS))
    if n >= 8 and now_us - t[-4] < gap:
        t[-2], t[-1] = now_us, current  # too close: the newest moves
    else:
        t += (now_us, current)
        if n - 2 > 2 * ANCHORS:
            del t[4:6]
    return t


def _flat(track: Track) -> Flat:
    end = False if track.end is None else track.end
    return [track.started_us, track.start, track.reports, end, *track.anchors]


def _track(t: Flat) -> Track:
    started_us, start, reports, end, *anchors = t
    return Track(
        int(started_us), start, None if end is False else end, int(reports), tuple(anchors)
    )


class Estimate(msgspec.Struct, frozen=True):
    """`GET /tasks/{t}/estimate`'s answer, before its instants are written out."""

    elapsed_s: float
    rate_per_s: float | None
    remaining_s: float | None
    eta_us: int | None
    basis: Basis | None
    usual: Usual | None
    late: bool


def rate(track: Track | None, now_us: int) -> float | None:
    """Units of `current` per second, or None while the track is too short to tell."""
    if track is None or track.reports < 2:
        return None
    anchors = track.anchors
    first_us, first = anchors[0], anchors[1]
    last_us, last = anchors[-2], anchors[-1]
    if last_us <= first_us:
        return None
    span_s = (last_us - track.started_us) / 1e6
    part = (last - track.start) / track.end if track.end else 0.0
    spread = track.reports >= MIN_REPORTS and (span_s >= MIN_SPAN_S or part >= MIN_SPAN_PART)
    if not spread and not _steady(anchors, span_s):
        return None
    # Silent for longer than the reports were ever apart in the window: the rate falls, as
    # if half of that silence had been spent at work (a silence may be a pause).
    overdue_us = now_us - last_us - _apart_us(anchors)
    until_us = last_us + max(0.0, overdue_us) / 2
    per_s = max(0.0, (last - first) / ((until_us - first_us) / 1e6))
    return per_s if math.isfinite(per_s) else None


def _steady(anchors: Sequence[Number], span_s: float) -> bool:
    """Whether the anchors are those of a steady reporter, within its first `MIN_SPAN_S`:
    a second or more in all, and none further from the one before than `STEADY_RATIO`
    times the closest pair (two reports are steady: a burst is one anchor, as its reports
    are never that far apart). Two reports further apart may be a pause and a restart,
    which only a third tells: the rule of `MIN_REPORTS` then decides."""
    if not STEADY_SPAN_S <= span_s < MIN_SPAN_S:
        return False
    gaps = [anchors[n + 2] - anchors[n] for n in range(0, len(anchors) - 2, 2)]
    return max(gaps) <= STEADY_RATIO * min(gaps)


def _apart_us(anchors: Sequence[Number | bool], first: int = 0) -> float:
    """How far apart the anchors are, at most (at least two of them): the longest
    silence the reporter had in the window. `anchors` flat from `first` (4: a flat track)."""
    return max(anchors[n + 2] - anchors[n] for n in range(first, len(anchors) - 2, 2))


def estimate(
    *,
    now_us: int,
    created_at_us: int,
    track: Track | None,
    current: Number | None,
    end: Number | None,
    usual: Usual | None,
    finished_at_us: int | None = None,
    mean: bool = False,
    steps_left: tuple[float, Basis] | None = None,
) -> Estimate:
    """The estimate of a task created at `created_at_us`, as its last report left it
    (`current`, `end`, `track`), in a job that usually takes `usual`. `mean`: a task that
    keeps no track (a parent, whose count its steps make): its rate is its count over
    the time since it was created, once that is `MIN_SPAN_S`; and since its count is
    only of the steps made so far (the Python client makes them one after another), a
    usual duration is weighed by the part of it elapsed, not by that count.
    `steps_left`: the longest time left of its running steps and what it comes from,
    below which a parent's own never falls."""
    if finished_at_us is not None:
        elapsed = max(0.0, (finished_at_us - created_at_us) / 1e6)
        return Estimate(elapsed, None, 0.0, finished_at_us, None, usual, False)
    elapsed = max(0.0, (now_us - created_at_us) / 1e6)
    per_s = rate(track, now_us)
    if mean and current and elapsed >= MIN_SPAN_S:
        per_s = max(0.0, current / elapsed)
    by_rate = None
    done = None
    if end is not None and end > 0 and current is not None:
        done = min(1.0, max(0.0, current / end))
        if per_s and track is not None:
            # Work goes on between reports: as long as the last one is as recent as they
            # usually are, the time since it counts as spent on what is left.
            since_s = min(now_us - track.anchors[-2], _apart_us(track.anchors)) / 1e6
            by_rate = max(0.0, (end - current) / per_s - max(0.0, since_s))
        elif per_s:
            by_rate = max(0.0, (end - current) / per_s)
        if by_rate is not None and not _sayable(now_us, by_rate):
            by_rate = None
    by_usual = None
    if usual is not None and elapsed < usual.p50_s:
        by_usual = usual.p50_s - elapsed
    remaining: float | None
    basis: Basis | None
    if by_rate is not None and by_usual is not None and mean:
        assert usual is not None  # by_usual is None without it
        part = elapsed / usual.p50_s  # elapsed < p50 here
        weight = part * part  # the usual counts more until the run nears its usual end
        remaining, basis = weight * by_rate + (1 - weight) * by_usual, "blend"
    elif by_rate is not None and by_usual is not None:
        remaining, basis = _blend(by_rate, by_usual, done, elapsed, usual), "blend"
    elif by_rate is not None:
        remaining, basis = by_rate, "rate"
    elif by_usual is not None:
        remaining, basis = by_usual, "usual"
    else:
        remaining, basis = None, None
    if steps_left is not None and (remaining is None or remaining < steps_left[0]):
        remaining, basis = steps_left  # a parent ends no sooner than its running steps
    if remaining is not None and not _sayable(now_us, remaining):
        remaining, basis = None, None
    eta = None if remaining is None else now_us + round(remaining * 1e6)
    return Estimate(
        elapsed, per_s, remaining, eta, basis, usual, late(elapsed, remaining, done, usual)
    )


def _sayable(now_us: int, remaining_s: float) -> bool:
    """Whether a time left ends at an instant `format_ts` writes."""
    return remaining_s * 1e6 <= LAST_US - now_us


def _blend(
    by_rate: float, by_usual: float, done: float | None, elapsed: float, usual: Usual | None
) -> float:
    """The time left by the rate and by the usual duration, weighed: the usual by the
    square of the part left (the rate counts more, and soon, as the run nears its end), or
    the rate by the square of the part done when the total it foresees is far outside the
    job's usual ones (a warm-up, a change of pace: the usual counts more then)."""
    assert usual is not None
    part = done if done is not None else 0.5
    total = elapsed + by_rate
    agrees = usual.p50_s / FAR <= total <= usual.p95_s * FAR
    weight = 1 - (1 - part) ** 2 if agrees else part * part
    return weight * by_rate + (1 - weight) * by_usual


def late(
    elapsed_s: float, remaining_s: float | None, done: float | None, usual: Usual | None
) -> bool:
    """Whether a running task is late: its job has a usual duration, and its time so far,
    or once it is a tenth done its estimated total, is beyond max(1.2 x p95, p50 + 60 s)."""
    if usual is None:
        return False
    bound = max(LATE_FACTOR * usual.p95_s, usual.p50_s + LATE_MARGIN_S)
    if elapsed_s > bound:
        return True
    return (
        remaining_s is not None
        and done is not None
        and done >= LATE_FROM_DONE
        and elapsed_s + remaining_s > bound
    )
