"""Old code against new in one sitting: `python -m bench.run --compare DIR [--rounds N]`.

DIR is another checkout of the repository, e.g. `git worktree add /tmp/old <commit>`.
Phase by phase (a phase: the scenarios that share one server), the run starts its
Headway servers with DIR's code, then with this checkout's, alternately: old, new, old,
new, `--rounds` times each (default 2), each time with fresh servers and data. The
old servers get DIR first on their PYTHONPATH (the venv is shared), so only the
`headway` package comes from DIR: the harness, the seeding (the big space's rows are
written with this checkout's tables) and tests/servers.py are this checkout's. For
every scenario it prints and writes (`compare.json`, `compare.md` in the results
directory) the CPU µs per request of each side, the median of its runs, and the ratio
new/old; and for the scenarios that measure PostgreSQL's and Redis's CPU beside Headway's
(`scale_out_*`), theirs likewise, in the note. `--only NAMES` keeps the phases that
measure those scenarios. The bare baseline and its calibration rows do not run; no target
is judged. The other options (`--quick`, `--smoke`, `--duration`, `--no-scale-out`…)
apply. With `--paired`, both sides' servers run at once instead (see bench/pairs.py).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .measure import Harness, _num
from .pairs import PAIRED, SIDES, measure_pairs
from .processes import ROOT
from .report import Row, git_state, short_commit

Phase = tuple[list[str], Callable[[Harness], None]]


def compare(bench: Harness, phases: list[Phase]) -> int:
    """Run every phase old, new, old, new…; print and write the comparison. Exit status:
    1 if a run of a scenario ended in error, else 0."""
    o = bench.o
    assert o.compare is not None
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    old, new = git_state(o.compare), git_state(ROOT)
    bench.say(f"comparing {o.compare} at {short_commit(old)} with {ROOT} at {short_commit(new)}")
    if o.paired:
        runs, titles = measure_pairs(bench), PAIRED
    else:
        runs, titles = alternate(bench, phases), bench.titles
    scenarios = [summary(name, titles[name], rows) for name, rows in runs.items()]
    result = {
        "started_at": started_at,
        "elapsed_s": round(time.monotonic() - bench.started, 1),
        "old": {"checkout": str(o.compare), **old},
        "new": {"checkout": str(ROOT), **new},
        "rounds": max(3, o.rounds) if o.paired else o.rounds,
        "paired": o.paired,
        "options": {"mode": o.mode, "duration": o.duration, "connections": o.connections},
        "scenarios": scenarios,
    }
    text = table(result)
    o.results.mkdir(parents=True, exist_ok=True)
    (o.results / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    (o.results / "compare.md").write_text(text + "\n")
    print()
    print(text)
    print(f"\nwritten: {o.results / 'compare.json'}, {o.results / 'compare.md'}")
    failed = any(s["status"] == "error" for c in scenarios for s in c["runs"])
    return 1 if failed else 0


def alternate(bench: Harness, phases: list[Phase]) -> dict[str, dict[str, list[Row]]]:
    """Each phase `rounds` times from each side's code, old first; the rows of each
    scenario by side, in the order they ran."""
    o = bench.o
    workdir = bench.workdir
    runs: dict[str, dict[str, list[Row]]] = {}
    try:
        for number, (names, measure) in enumerate(phases, 1):
            for round_ in range(1, o.rounds + 1):
                for side, code in zip(SIDES, (o.compare, None), strict=True):
                    bench.say(f"phase {number} ({names[0]}…), round {round_}: {side} code")
                    bench.code, bench.workdir = code, workdir / f"{number}-{round_}-{side}"
                    rows = _once(bench, names, measure)
                    for name in names:
                        row = rows.get(name) or Row(name, bench.titles[name], "error", "not run")
                        runs.setdefault(name, {s: [] for s in SIDES})[side].append(row)
    finally:
        bench.code, bench.workdir = None, workdir
    return runs


def _once(bench: Harness, names: list[str], measure: Callable[[Harness], None]) -> dict[str, Row]:
    """One run of a phase with fresh rows, in a fresh work directory (its databases are
    new), every process it started stopped afterwards."""
    bench.rows = {}
    bench.workdir.mkdir()
    try:
        with bench.phase(names):
            measure(bench)
    finally:
        bench.stop_everything()
    return bench.rows


def summary(name: str, title: str, rows: dict[str, list[Row]]) -> dict[str, Any]:
    """One scenario's CPU µs per request, run by run and as each side's median, and the
    ratio of the medians, new/old (None where a side has no figure)."""
    found: dict[str, Any] = {"name": name, "title": title, "runs": []}
    for side in SIDES:
        figures = [
            r.cpu_us_per_request
            for r in rows[side]
            if r.status == "ok" and r.cpu_us_per_request is not None
        ]
        found[f"{side}_cpu_us"] = figures
        found[f"{side}_median"] = round(statistics.median(figures), 1) if figures else None
        found["runs"] += [
            {"side": side, "status": r.status, "reason": r.reason, "cpu_us": r.cpu_us_per_request}
            for r in rows[side]
        ]
    old, new = found["old_median"], found["new_median"]
    found["ratio"] = round(new / old, 3) if old and new is not None else None
    # Each round's own ratio (its old and new ran next to each other), then their median:
    # less moved by a sitting's drift than the ratio of the medians.
    rounds = [
        b.cpu_us_per_request / a.cpu_us_per_request
        for a, b in zip(rows["old"], rows["new"], strict=False)
        if a.status == b.status == "ok" and a.cpu_us_per_request and b.cpu_us_per_request
    ]
    found["round_ratio"] = round(statistics.median(rounds), 3) if rounds else None
    found["backends"] = _backends(rows)
    return found


def _backends(rows: dict[str, list[Row]]) -> dict[str, dict[str, Any]]:
    """The CPU per request of the backends a scenario measures beside Headway
    (`extra.cpu_us_per_request_of`: PostgreSQL, Redis), each side's runs, medians, and the
    ratio new/old."""
    found: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        for row in rows[side]:
            if row.status != "ok":
                continue
            for backend, figure in (row.extra.get("cpu_us_per_request_of") or {}).items():
                if backend != "headway" and figure is not None:
                    runs = found.setdefault(backend, {f"{s}_cpu_us": [] for s in SIDES})
                    runs[f"{side}_cpu_us"].append(figure)
    for runs in found.values():
        for side in SIDES:
            figures = runs[f"{side}_cpu_us"]
            runs[f"{side}_median"] = round(statistics.median(figures), 1) if figures else None
        old, new = runs["old_median"], runs["new_median"]
        runs["ratio"] = round(new / old, 3) if old and new is not None else None
    return found


def table(result: dict[str, Any]) -> str:
    """The comparison as Markdown: a line per scenario with a CPU figure or a failed run."""
    old, new = result["old"], result["new"]
    lines = [
        f"# Headway benchmark: old vs new, {result['started_at']}",
        "",
        f"old: {old['checkout']} at {short_commit(old)}; "
        f"new: {new['checkout']} at {short_commit(new)}; "
        + (
            f"both at once, measured in turn, {result['rounds']} slices of each"
            if result.get("paired")
            else f"old and new alternately, {result['rounds']} of each"
        )
        + f"; mode {result['options']['mode']}",
        "",
        "| scenario | old CPU µs/req | new CPU µs/req | new/old | each round's new/old, median "
        "| old runs | new runs | note |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for s in result["scenarios"]:
        failed = [r for r in s["runs"] if r["status"] != "ok"]
        if not (s["old_cpu_us"] or s["new_cpu_us"] or failed):
            continue  # no CPU per request to compare (memory and latency rows)
        why = dict.fromkeys(f"{r['side']}: {r['status']}, {r['reason'][:160]}" for r in failed)
        backends = [
            f"{name} {_num(b['old_median'])} → {_num(b['new_median'])} µs/req"
            + ("" if b["ratio"] is None else f" ({b['ratio']:.3f}x)")
            for name, b in s.get("backends", {}).items()
        ]
        note = "; ".join([*backends, *why])
        ratio = "–" if s["ratio"] is None else f"{s['ratio']:.3f}"
        by_round = "–" if s.get("round_ratio") is None else f"{s['round_ratio']:.3f}"
        lines.append(
            f"| {s['name']} | {_num(s['old_median'])} | {_num(s['new_median'])} | {ratio} | "
            f"{by_round} | "
            + " | ".join(", ".join(f"{x:,.1f}" for x in s[f"{side}_cpu_us"]) for side in SIDES)
            + f" | {note} |"
        )
    return "\n".join(lines)
