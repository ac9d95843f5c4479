"""The targets of issue 6 and the abuse limits, of the live stream, of the busy space and
of the notification channels, judged from a run's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .measure import _num
from .options import BUSY_SECONDS, BUSY_WINDOW_S, FLOOD_PHASE_S, PAGE, Options
from .report import Row, Target

# Issue 6's targets.
PUT_SHARE_OF_BASELINE = 0.30
PUT_P99_MS = 20.0
PUT_CONNECTIONS = 64
PAGE_LATENCY_FACTOR = 2.0
RSS_LIMIT_MB = 150
SCALE_OUT_FACTOR = 1.6
# The abuse-limits issue's targets.
LIMITED_SHARE_OF_PUT = 0.9
FLOOD_RSS_GROWTH_MB = 1024
BYSTANDER_P99_MS = 250.0
ISSUE6 = "issue 6 and abuse limits"
# The live stream's targets (issue "Watch it live"), for 1,000 streams on one space.
LIVE = "watch it live: streams"
STREAM_P99_MS = 250.0
STREAM_MEMORY_KB = 50.0
STREAM_SHARE_OF_NONE = 0.5
# The busy space's targets: its streams' lag in the last BUSY_WINDOW_S of a run, and its
# growth from the first (at most BUSY_GROWTH times it plus BUSY_GROWTH_MS).
BUSY = "busy space: live-stream lag"
BUSY_P99_MS = 1000.0
BUSY_GROWTH = 2.0
BUSY_GROWTH_MS = 100.0
# The notification channels' targets: the PUT's CPU with channels and stall looks every
# second, against the same server without channels; a stall told within 30 s of its
# deadline (the contract's `stalled_after` + 30 s).
NOTIFY = "notification channels and stalls"
NOTIFIED_CPU_RATIO = 1.05
STALL_P99_S = 30.0
# The sweeper's target: PUT while it deletes an idle space, against a server that keeps it.
SWEEP = "retention: the sweeper at work"
SWEPT_RPS_RATIO = 0.9
# The budget's target: RSS grows by what the progress budget counts plus the task caches'
# bound (families and small spaces, 48 MiB), give or take BUDGET_SLACK of the counted.
BUDGET = "the live-progress budget against memory"
CACHES_MB = 48
BUDGET_SLACK = 0.1
BUSY_BACKENDS = [("", "embedded", ["busy_embedded"]), ("_scale_out", "PostgreSQL + Redis",
                 ["busy_a", "busy_b"])]  # fmt: skip


def issue6_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """Issue 6's targets and the abuse limits', in table order."""
    found = [
        *_put_targets(rows, o),
        *_space_and_memory_targets(rows, o),
        *_flood_targets(rows, o),
        _scale_out_target(rows),
    ]
    for target in found:
        target.group = ISSUE6
    return found


def ok(rows: dict[str, Row], name: str) -> Row | None:
    """Row `name`, if it was measured without error."""
    row = rows.get(name)
    return row if row is not None and row.status == "ok" else None


def _put_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    found: list[Target] = []
    base, put = ok(rows, "baseline"), ok(rows, "put_report")
    description = (
        f"PUT ≥ {PUT_SHARE_OF_BASELINE:.0%} of baseline req/s, p99 < {PUT_P99_MS:g} ms "
        f"at {PUT_CONNECTIONS} connections"
    )
    if base and put and put.ratio_to_baseline is not None and put.p99_ms is not None:
        passed = put.ratio_to_baseline >= PUT_SHARE_OF_BASELINE and put.p99_ms < PUT_P99_MS
        note = "; ".join(
            filter(
                None,
                [
                    bare_put(ok(rows, "baseline_put")),
                    ""
                    if put.connections == PUT_CONNECTIONS
                    else f"measured at {put.connections} connections, not {PUT_CONNECTIONS}",
                ],
            )
        )
        found.append(
            Target(
                "put",
                description,
                "pass" if passed else "fail",
                f"{put.ratio_to_baseline:.1%} of baseline, p99 {put.p99_ms:.2f} ms",
                note,
            )
        )
    else:
        found.append(Target("put", description, "skipped", "–", "not measured"))

    limited = ok(rows, "put_report_limited")
    description = (
        f"PUT with rate limits on ≥ {LIMITED_SHARE_OF_PUT:g}x the req/s of PUT without them"
    )
    if put and limited and put.requests_per_s and limited.requests_per_s is not None:
        factor = limited.requests_per_s / put.requests_per_s
        found.append(
            Target(
                "put_limited",
                description,
                "pass" if factor >= LIMITED_SHARE_OF_PUT else "fail",
                f"{factor:.2f}x ({limited.requests_per_s:,.0f} vs {put.requests_per_s:,.0f} "
                f"req/s); CPU µs/req {_num(limited.cpu_us_per_request)} vs "
                f"{_num(put.cpu_us_per_request)}",
                "separate servers, one after the other: ±20-30% noise on 2 shared cores",
            )
        )
    else:
        found.append(Target("put_limited", description, "skipped", "–", "not measured"))
    return found


def _space_and_memory_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    found: list[Target] = []
    small, large = ok(rows, "get_space_small_page"), ok(rows, "get_space_big_page")
    description = (
        f"GET space limit={PAGE}: {o.big:,}-task space p50 within "
        f"{PAGE_LATENCY_FACTOR:g}x the {o.small}-task space"
    )
    if small and large and small.p50_ms and large.p50_ms is not None:
        factor = large.p50_ms / small.p50_ms
        found.append(
            Target(
                "space_page",
                description,
                "pass" if factor <= PAGE_LATENCY_FACTOR else "fail",
                f"{factor:.2f}x ({large.p50_ms:.2f} vs {small.p50_ms:.2f} ms)",
            )
        )
    else:
        found.append(Target("space_page", description, "skipped", "–", "not measured"))

    memory = ok(rows, "memory")
    description = f"RSS with {o.big:,} tasks holding progress < {RSS_LIMIT_MB} MB"
    if memory:
        rss = memory.extra["rss_mb"]
        found.append(
            Target(
                "memory",
                description,
                "pass" if rss < RSS_LIMIT_MB else "fail",
                f"{rss:.1f} MB",
                "" if o.big == 100_000 else "target is for 100,000 tasks",
            )
        )
    else:
        found.append(Target("memory", description, "skipped", "–", "not measured"))
    return found


def _flood_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    found: list[Target] = []
    short = (
        ""
        if o.flood_s == FLOOD_PHASE_S
        else f"phases of {o.flood_s:g} s; the target is for {FLOOD_PHASE_S:g} s"
    )
    flood_rss = ok(rows, "flood_memory")
    description = f"flood: the server's peak RSS growth < 1 GB ({FLOOD_RSS_GROWTH_MB:,} MB)"
    if flood_rss:
        growth = flood_rss.extra["growth_mb"]
        found.append(
            Target(
                "flood_memory",
                description,
                "pass" if growth < FLOOD_RSS_GROWTH_MB else "fail",
                f"+{growth:,.1f} MB ({flood_rss.extra['rss_before_mb']:,.1f} → "
                f"{flood_rss.extra['peak_rss_mb']:,.1f} MB)",
                short,
            )
        )
    else:
        found.append(Target("flood_memory", description, "skipped", "–", "not measured"))
    return found + _bystander_targets(rows.get("flood_bystander"), short)


def _bystander_targets(bystander: Row | None, short: str) -> list[Target]:
    found: list[Target] = []
    measured = bystander is not None and bystander.status != "skipped" and bystander.extra
    description = f"flood: the well-behaved client's p99 < {BYSTANDER_P99_MS:g} ms"
    if measured and bystander.p99_ms is not None:
        found.append(
            Target(
                "flood_latency",
                description,
                "pass" if bystander.p99_ms < BYSTANDER_P99_MS else "fail",
                f"p99 {bystander.p99_ms:,.1f} ms, p50 {_num(bystander.p50_ms)} ms",
                short,
            )
        )
    else:
        found.append(Target("flood_latency", description, "skipped", "–", "not measured"))
    description = "flood: the well-behaved client is never refused (nor fails)"
    if measured:
        refused, failed = bystander.extra["refused"], bystander.extra["failed"]
        found.append(
            Target(
                "flood_refusals",
                description,
                "pass" if refused == 0 and failed == 0 else "fail",
                f"{refused} refused, {failed} failed of {bystander.requests} reports",
                short,
            )
        )
    else:
        found.append(Target("flood_refusals", description, "skipped", "–", "not measured"))
    return found


def _scale_out_target(rows: dict[str, Row]) -> Target:
    two = ok(rows, "scale_out_two")
    description = f"two instances ≥ {SCALE_OUT_FACTOR:g}x one (PostgreSQL + Redis)"
    if two and "vs_one_instance" in two.extra and ok(rows, "scale_out_one"):
        factor = two.extra["vs_one_instance"]
        return Target(
            "scale_out",
            description,
            "pass" if factor >= SCALE_OUT_FACTOR else "fail",
            f"{factor:.2f}x",
        )
    reason = (rows.get("scale_out_two") or Row("", "")).reason or "not measured"
    return Target("scale_out", description, "skipped", "–", reason)


def bare_put(bare: Row | None) -> str:
    """The `baseline_put` calibration, as a target's note ("" if it was not measured)."""
    if bare is None or bare.p99_ms is None:
        return ""
    return f"the bare server after the same CPU per request: p99 {bare.p99_ms:,.2f} ms"


def streams_targets(rows: dict[str, Row]) -> list[Target]:
    """The live stream's targets, for `streams` streams of one space."""
    found = []
    put, latency, memory = (
        rows.get("streams_put"), rows.get("streams_latency"), rows.get("streams_memory")
    )  # fmt: skip
    checks = [
        (
            "streams_latency",
            f"report-to-event p99 ≤ {STREAM_P99_MS:g} ms",
            latency,
            lambda row: row.p99_ms is not None and row.p99_ms <= STREAM_P99_MS,
            lambda row: f"p50 {_num(row.p50_ms)} ms, p99 {_num(row.p99_ms)} ms",
        ),
        (
            "streams_memory",
            f"memory per open stream ≤ {STREAM_MEMORY_KB:g} KB",
            memory,
            lambda row: row.extra.get("kb_per_stream", 1e9) <= STREAM_MEMORY_KB,
            lambda row: f"{row.extra.get('kb_per_stream')} KB",
        ),
        (
            "streams_put",
            f"PUT with the streams open ≥ {STREAM_SHARE_OF_NONE:.0%} of none",
            put,
            lambda row: row.extra.get("vs_none", 0) >= STREAM_SHARE_OF_NONE,
            lambda row: f"{row.extra.get('vs_none', 0):.1%}",
        ),
    ]
    for name, description, row, passed, shown in checks:
        if row is None or row.status != "ok":
            why = (row.reason if row else "") or "not measured"
            found.append(Target(name, description, "skipped", "–", why, LIVE))
            continue
        status = "pass" if passed(row) else "fail"
        found.append(Target(name, description, status, shown(row), "", LIVE))
    return found


def busy_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """The busy space's targets, on each backend: the last window's p99 lag, its growth
    from the first window, no stream ended."""
    window = min(BUSY_WINDOW_S, o.busy_s / 3)
    short = (
        "" if o.busy_s == BUSY_SECONDS else f"a {o.busy_s:g} s run, the target's {BUSY_SECONDS} s"
    )
    if window != BUSY_WINDOW_S:
        short += f"; windows of {window:g} s, the target's {BUSY_WINDOW_S:g} s"
    checks: list[tuple[str, str, Callable[[dict[str, Any]], bool], Callable[..., str]]] = [
        (
            "busy_lag",
            f"stream lag p99 < {BUSY_P99_MS / 1000:g} s in the last {BUSY_WINDOW_S:g} s",
            lambda e: e["last"]["p99_ms"] is not None and e["last"]["p99_ms"] < BUSY_P99_MS,
            lambda e: (
                f"p99 {_num(e['last']['p99_ms'])} ms (p50 {_num(e['last']['p50_ms'])})"
                + (f", {e['lost']:,} events never came" if e["lost"] else "")
            ),
        ),
        (
            "busy_lag_growth",
            f"last {BUSY_WINDOW_S:g} s p99 ≤ {BUSY_GROWTH:g}x the first's + {BUSY_GROWTH_MS:g} ms",
            lambda e: (
                None not in (e["first"]["p99_ms"], e["last"]["p99_ms"])
                and e["last"]["p99_ms"] <= BUSY_GROWTH * e["first"]["p99_ms"] + BUSY_GROWTH_MS
            ),
            lambda e: f"p99 {_num(e['first']['p99_ms'])} → {_num(e['last']['p99_ms'])} ms",
        ),
        (
            "busy_streams",
            "no stream ended by the server",
            lambda e: e["ended"] == 0,
            lambda e: f"{e['ended']} of {e['streams']} ended",
        ),
    ]
    found = []
    for suffix, backend, names in BUSY_BACKENDS:
        measured = [rows.get(n) or Row(n, "", "skipped", "not measured") for n in names]
        not_ok = [row for row in measured if row.status != "ok"]
        note = (not_ok[0].reason or "not measured") if not_ok else short
        for name, description, passed, shown in checks:
            described = f"busy space, {backend}: {description}"
            target = Target(name + suffix, described, "skipped", "–", note, BUSY)
            if not not_ok:
                target.status = "pass" if all(passed(r.extra) for r in measured) else "fail"
                target.measured = "; ".join(
                    shown(r.extra) if len(measured) == 1 else f"{_label(r)}: {shown(r.extra)}"
                    for r in measured
                )
            found.append(target)
    return found


def _label(row: Row) -> str:
    """The instance a busy space row is about: A or B."""
    return row.name.removeprefix("busy_").upper()


def notify_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """The notification channels' targets: what channels and stall looks cost a PUT, and
    how soon after its deadline a stall is told."""
    found = []
    plain, notified = ok(rows, "put_report_plain"), ok(rows, "put_report_notified")
    description = (
        f"PUT with channels and stall looks every second ≤ {NOTIFIED_CPU_RATIO:g}x the CPU "
        "µs/req of the same server without channels"
    )
    ratio = notified.extra.get("cpu_vs_plain") if notified else None
    if plain and notified and ratio is not None:
        found.append(
            Target(
                "notified_put_cpu",
                description,
                "pass" if ratio <= NOTIFIED_CPU_RATIO else "fail",
                f"{ratio:.3f}x ({_num(notified.cpu_us_per_request)} vs "
                f"{_num(plain.cpu_us_per_request)} µs/req)",
                "two fresh servers, one right after the other: a few % of noise on 2 shared "
                "cores" + ("" if o.mode == "full" else f"; {o.mode} run, {o.duration:g} s each"),
                NOTIFY,
            )
        )
    else:
        why = (rows.get("put_report_notified") or Row("", "")).reason or "not measured"
        found.append(Target("notified_put_cpu", description, "skipped", "–", why, NOTIFY))
    latency = rows.get("stall_latency")
    description = f"a stall told within {STALL_P99_S:g} s of its deadline: p99"
    if latency is not None and latency.status != "skipped" and latency.extra.get("tasks"):
        extra = latency.extra
        p99 = extra["p99_s"]
        passed = latency.status == "ok" and p99 is not None and p99 <= STALL_P99_S
        found.append(
            Target(
                "stall_latency",
                description,
                "pass" if passed else "fail",
                f"p99 {_num(p99)} s (p50 {_num(extra['p50_s'])} s, max {_num(extra['max_s'])} s)"
                + ("" if latency.status == "ok" else f"; {latency.reason}"),
                "",
                NOTIFY,
            )
        )
    else:
        why = (latency.reason if latency else "") or "not measured"
        found.append(Target("stall_latency", description, "skipped", "–", why, NOTIFY))
    return found


def sweep_targets(rows: dict[str, Row], o: Options) -> list[Target]:
    """The sweeper's target: reporters keep their throughput while it deletes."""
    unswept, swept = ok(rows, "put_report_unswept"), ok(rows, "put_report_swept")
    description = (
        f"PUT while the sweeper deletes an idle space ≥ {SWEPT_RPS_RATIO:g}x the req/s of "
        "the same server keeping it"
    )
    ratio = swept.extra.get("rps_vs_unswept") if swept else None
    if unswept and swept and ratio is not None:
        return [
            Target(
                "swept_put",
                description,
                "pass" if ratio >= SWEPT_RPS_RATIO else "fail",
                f"{ratio:.3f}x; p99 {_num(swept.p99_ms, 2)} vs {_num(unswept.p99_ms, 2)} ms",
                str(swept.extra.get("deleted", "")),
                SWEEP,
            )
        ]
    why = (rows.get("put_report_swept") or Row("", "")).reason or "not measured"
    return [Target("swept_put", description, "skipped", "–", why, SWEEP)]


def budget_targets(rows: dict[str, Row]) -> list[Target]:
    """What the budget counts explains the memory that tasks' progress takes: at each
    count, RSS growth ≤ counted progress x (1 + BUDGET_SLACK) + the task caches' bound."""
    found = []
    for name in ("memory_budget", "memory_budget_large"):
        row = ok(rows, name)
        description = (
            f"{name}: RSS growth ≤ the progress the budget counts (+{BUDGET_SLACK:.0%}) "
            f"+ {CACHES_MB} MB of task caches"
        )
        if row is None:
            why = (rows.get(name) or Row("", "")).reason or "not measured"
            found.append(Target(name, description, "skipped", "–", why, BUDGET))
            continue
        x = row.extra
        allowed = x["counted_mb"] * (1 + BUDGET_SLACK) + CACHES_MB
        found.append(
            Target(
                name,
                description,
                "pass" if x["rss_growth_mb"] <= allowed else "fail",
                f"+{x['rss_growth_mb']:,.1f} MB ≤ {allowed:,.1f} MB",
                f"{x['tasks_with_progress']:,} tasks: counted {x['counted_mb']:,.1f} MB, "
                f"caches {x['caches_mb']:,.1f} MB",
                BUDGET,
            )
        )
    return found
