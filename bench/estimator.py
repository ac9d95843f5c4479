"""The estimator's quality, measured: report streams with a known true end, replayed into
Headway's estimator (`headway.domain.estimates`) and into tqdm's own (`tqdm.std.tqdm`, its
default smoothing) fed the same reports at the same instants; at 10, 25, 50, 75 and 90 %
of each run's true duration, the median relative error of each one's time left.

    python -m bench.estimator [--runs N]

Each stream is run `--runs` times with its own noise (seeded: the same table each time).
Headway is measured twice: with the job's history (a usual duration from 20 earlier runs
of the same work, each within 10 % of the true duration) and without. A point where an
estimator gives no estimate counts as an error of 100 %.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from headway.domain.estimates import estimate, follow
from headway.domain.jobs import usual

POINTS = (0.10, 0.25, 0.50, 0.75, 0.90)
DURATION_S = 600.0  # each run's true duration
TOTAL = 1000  # its `end`, unless the stream changes it


@dataclass(frozen=True)
class Report:
    at_s: float
    current: float
    end: float


Stream = Callable[[random.Random], list[Report]]


def _steady_at(rng: random.Random, speed: Callable[[float], float]) -> list[Report]:
    """Reports every 1-3 s of a count whose share done at time t (0..1 of the run) is
    `speed(t)` (0 at 0, 1 at 1)."""
    reports, at = [], 0.0
    while at < DURATION_S:
        reports.append(Report(at, round(TOTAL * speed(at / DURATION_S)), TOTAL))
        at += rng.uniform(1.0, 3.0)
    return reports


def steady(rng: random.Random) -> list[Report]:
    return _steady_at(rng, lambda t: t)


def bursty(rng: random.Random) -> list[Report]:
    """Every 20-40 s, a burst of 20 reports within 100 ms, bringing the count up to date."""
    reports, at = [], 0.0
    while at < DURATION_S:
        for k in range(20):
            moment = at + k * 0.005
            reports.append(Report(moment, round(TOTAL * min(1.0, moment / DURATION_S)), TOTAL))
        at += rng.uniform(20.0, 40.0)
    return reports


def slow_start(rng: random.Random) -> list[Report]:
    """The first 30 % of the time does 10 % of the work (a warm-up), then steady."""
    return _steady_at(rng, lambda t: t / 3 if t < 0.3 else 0.1 + (t - 0.3) * 0.9 / 0.7)


def stall(rng: random.Random) -> list[Report]:
    """Steady, but silent and stuck from 40 % to 60 % of the time."""

    def share(t: float) -> float:
        return t / 0.8 * 1.0 if t < 0.4 else 0.5 if t < 0.6 else 0.5 + (t - 0.6) / 0.8

    return [r for r in _steady_at(rng, share) if not 0.4 * DURATION_S <= r.at_s < 0.6 * DURATION_S]


def rate_change(rng: random.Random) -> list[Report]:
    """70 % of the work in the first half of the time, the rest in the second."""
    return _steady_at(rng, lambda t: 1.4 * t if t < 0.5 else 0.7 + (t - 0.5) * 0.6)


def growing_end(rng: random.Random) -> list[Report]:
    """Steady work whose `end` is learnt as it goes: half at first, 3/4 from 30 %, whole
    from 60 % of the time."""
    reports = steady(rng)
    for n, report in enumerate(reports):
        part = report.at_s / DURATION_S
        known = 0.5 if part < 0.3 else 0.75 if part < 0.6 else 1.0
        reports[n] = Report(report.at_s, report.current, TOTAL * known)
    return reports


STREAMS: dict[str, Stream] = {
    "steady": steady,
    "bursty batches": bursty,
    "slow start": slow_start,
    "stall in the middle": stall,
    "rate changes half-way": rate_change,
    "end that grows": growing_end,
}


def _headway(
    reports: list[Report], points_s: list[float], history: bool, rng: random.Random
) -> list[float | None]:
    known = usual([DURATION_S * rng.uniform(0.9, 1.1) for _ in range(20)]) if history else None
    answers: list[float | None] = []
    track, last = None, None
    feed = iter(reports)
    upcoming = next(feed, None)
    for point in points_s:
        while upcoming is not None and upcoming.at_s <= point:
            track = follow(track, round(upcoming.at_s * 1e6), upcoming.current, upcoming.end)
            last, upcoming = upcoming, next(feed, None)
        found = estimate(
            now_us=round(point * 1e6),
            created_at_us=0,
            track=track,
            current=None if last is None else last.current,
            end=None if last is None else last.end,
            usual=known,
        )
        answers.append(found.remaining_s)
    return answers


def _tqdm(reports: list[Report], points_s: list[float]) -> list[float | None]:
    from tqdm.std import tqdm

    now = [0.0]
    bar = tqdm(total=reports[0].end, file=io.StringIO())
    bar._time = lambda: now[0]  # type: ignore[method-assign]
    bar.start_t = bar.last_print_t = 0.0
    answers: list[float | None] = []
    feed = iter(reports)
    upcoming = next(feed, None)
    for point in points_s:
        while upcoming is not None and upcoming.at_s <= point:
            now[0] = upcoming.at_s
            if upcoming.end != bar.total:
                bar.total = upcoming.end
            bar.update(upcoming.current - bar.n)
            upcoming = next(feed, None)
        now[0] = point
        d = bar.format_dict
        per_s = d["rate"] or (d["n"] / d["elapsed"] if d["elapsed"] else None)
        answers.append((d["total"] - d["n"]) / per_s if per_s else None)
    bar.close()
    return answers


def errors(name: str, runs: int = 25) -> dict[str, list[float]]:
    """For the stream `name`, each estimator's median relative error at each point."""
    found: dict[str, list[list[float]]] = {"with history": [], "without": [], "tqdm": []}
    for seed in range(runs):
        rng = random.Random(f"{name}/{seed}")
        reports = STREAMS[name](rng)
        points = [DURATION_S * p for p in POINTS]
        truth = [DURATION_S - p for p in points]
        answers = {
            "with history": _headway(reports, points, True, random.Random(seed)),
            "without": _headway(reports, points, False, random.Random(seed)),
            "tqdm": _tqdm(reports, points),
        }
        for key, values in answers.items():
            found[key].append([_error(v, t) for v, t in zip(values, truth, strict=True)])
    return {
        key: [statistics.median(col) for col in zip(*rows, strict=True)]
        for key, rows in found.items()
    }


def _error(value: float | None, truth: float) -> float:
    return 1.0 if value is None else abs(value - truth) / truth


def table(runs: int = 25) -> Iterator[str]:
    """The markdown table: one row per stream and point."""
    yield "| stream | at | Headway, with history | Headway, without | tqdm |"
    yield "|---|---|---|---|---|"
    for name in STREAMS:
        medians = errors(name, runs)
        for n, point in enumerate(POINTS):
            cells = [
                f"{medians[key][n] * 100:.1f} %" for key in ("with history", "without", "tqdm")
            ]
            yield f"| {name} | {point * 100:.0f} % | {' | '.join(cells)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.estimator", description=__doc__)
    parser.add_argument("--runs", type=int, default=25, help="runs of each stream (default 25)")
    args = parser.parse_args(argv)
    for line in table(args.runs):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
