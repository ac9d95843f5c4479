"""How far a busy space's streams lag its writes: each write (bench/busy.py's `load`) matched
to the first stream event that shows its state or a later one (bench/busy.py's `watch`)."""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any

from .flood import percentile

Arrivals = dict[str, tuple[list[float], list[float]]]


def arrivals(events: list[list[Any]]) -> Arrivals:
    """A stream's task events by task: their arrival times, and the highest `current`
    shown so far at each (a stream may skip states, but never goes back)."""
    found: Arrivals = {}
    for at, task, current in events:
        times, highest = found.setdefault(task, ([], []))
        shown = current if isinstance(current, int | float) else -math.inf
        highest.append(max(highest[-1], shown) if highest else shown)
        times.append(at)
    return found


def arrival(index: Arrivals, task: str, current: float | None) -> float | None:
    """When the stream first showed `task` (a create: `current` None) or its `current`
    (a report: that state or a later one); None if it never did."""
    found = index.get(task)
    if found is None:
        return None
    times, highest = found
    if current is None:
        return times[0]
    at = bisect_left(highest, current)
    return times[at] if at < len(times) else None


def lags_ms(writes: list[list[Any]], index: Arrivals) -> list[tuple[float, float]]:
    """Each write's (instant in the run, lag in ms): from its answer to its event's
    arrival, 0 if the event came first, infinite if it never came."""
    found = []
    for _method, task, current, at, answered in writes:
        came = arrival(index, task, current)
        lag = math.inf if came is None else max(0.0, came - answered) * 1000
        found.append((at, lag))
    return found


def summary(lags: list[tuple[float, float]], seconds: float, window: float) -> dict[str, Any]:
    """p50 and p99 of the lags in the first and the last `window` seconds of a run of
    `seconds`, and of the whole run (None where a percentile falls on a lost event)."""
    windows = {
        "first": [lag for at, lag in lags if at < window],
        "last": [lag for at, lag in lags if at >= seconds - window],
        "all": [lag for _, lag in lags],
    }
    found: dict[str, Any] = {"window_s": round(window, 1)}
    for name, values in windows.items():
        found[name] = {
            "writes": len(values),
            "p50_ms": _finite(percentile(values, 0.50)),
            "p99_ms": _finite(percentile(values, 0.99)),
        }
    arrived = [lag for lag in windows["all"] if lag != math.inf]
    found["all"]["max_ms"] = round(max(arrived), 1) if arrived else None
    found["lost"] = len(windows["all"]) - len(arrived)
    return found


def instance(load: dict[str, Any], streams: list[dict[str, Any]], window: float) -> dict[str, Any]:
    """One instance's lag over all its `streams` (each write counts once per stream),
    with how many of them the server ended."""
    lags: list[tuple[float, float]] = []
    for stream in streams:
        lags += lags_ms(load["writes"], arrivals(stream["events"]))
    found = summary(lags, load["seconds"], window)
    found["streams"] = len(streams)
    found["opened"] = sum(1 for s in streams if s["snapshot"])
    found["ended"] = sum(1 for s in streams if s["ended_at"] is not None)
    found["events"] = sum(len(s["events"]) for s in streams)
    ended = [s["ended_at"] - load["start"] for s in streams if s["ended_at"] is not None]
    if ended:
        found["first_ended_at_s"] = round(min(ended), 1)
    return found


def answers(load: dict[str, Any]) -> dict[str, Any]:
    """How long after its scheduled instant each write was answered: p50, p99, max (ms)."""
    start = load["start"]
    waits = [(answered - start - at) * 1000 for *_, at, answered in load["writes"]]
    return {
        "p50_ms": _finite(percentile(waits, 0.50)),
        "p99_ms": _finite(percentile(waits, 0.99)),
        "max_ms": round(max(waits), 1) if waits else None,
    }


def _finite(value: float | None) -> float | None:
    return None if value is None or value == math.inf else round(value, 1)
