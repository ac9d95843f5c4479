"""The flood scenarios: bench/flood.py's flood of a default server from one address, with a
well-behaved client reporting from another, as rows."""

from __future__ import annotations

import asyncio

from .. import flood as flooding
from ..measure import Harness, _ms, _num
from ..report import MB, Row

FLOOD_ROWS = ["flood_create", "flood_values", "flood_memory", "flood_bystander"]


def flood(bench: Harness) -> None:
    """A flood from one address against a server with every setting at its default,
    while a well-behaved client reports from another (see bench/flood.py)."""
    o = bench.o
    database = bench.workdir / "flood.db"
    server = bench.start_headway("headway-flood", f"sqlite:///{database}")
    try:
        result = asyncio.run(
            flooding.run(
                server.url,
                server.pid,
                phase_s=o.flood_s,
                concurrency=o.flood_concurrency,
                spaces=o.flood_spaces,
                settle_s=min(2.0, max(0.5, o.flood_s / 10)),
                say=bench.say,
            )
        )
    finally:
        bench.stop(server)
    _phase_rows(bench, result)
    _memory_row(bench, result)
    _bystander_row(bench, result)


def _phase_rows(bench: Harness, result: flooding.FloodRun) -> None:
    """`flood_create` and `flood_values`: the flood's answers in each phase."""
    f = result.flood
    made = {
        "flood_create": f"{f['spaces_created']:,} spaces and {f['tasks_created']:,} tasks created",
        "flood_values": f"values stored on {f['tasks_holding_values']:,} of "
        f"{f['tasks_created']:,} tasks",
    }
    for name, phase in (("flood_create", f["create"]), ("flood_values", f["values"])):
        answers = flood_answers(phase["statuses"])
        row = Row(
            name,
            bench.titles[name],
            requests_per_s=phase["requests_per_s"],
            p50_ms=_ms(phase["p50_ms"]),
            p99_ms=_ms(phase["p99_ms"]),
            requests=phase["requests"],
            connections=f["concurrency"],
            duration_s=phase["seconds"],
            extra={
                "answers": answers,
                "statuses": phase["statuses"],
                "spaces_created": f["spaces_created"],
                "tasks_created": f["tasks_created"],
                "tasks_holding_values": f["tasks_holding_values"],
                "note": ", ".join(f"{k} ×{v:,}" for k, v in answers.items()) + f"; {made[name]}",
            },
        )
        cpu = result.cpu_between(phase["started"], phase["ended"])
        if cpu is not None and phase["requests"]:
            row.cpu_us_per_request = round(cpu * 1e6 / phase["requests"], 1)
        broken = {
            status: n
            for status, n in phase["statuses"].items()
            if not status.isdigit() or (status >= "500" and status != "503")
        }
        if broken:
            row.status = "error"
            row.reason = "the flood got failures, not refusals: " + ", ".join(
                f"{k} ×{v}" for k, v in broken.items()
            )
        bench.record(row)


def _memory_row(bench: Harness, result: flooding.FloodRun) -> None:
    """`flood_memory`: the server's RSS before the flood, at its peak, after it."""
    before, peak, after = result.rss_before, result.peak_rss, result.rss_after
    growth = peak - before
    row = Row(
        "flood_memory",
        bench.titles["flood_memory"],
        extra={
            "rss_before_mb": round(before / MB, 1),
            "peak_rss_mb": round(peak / MB, 1),
            "rss_after_mb": round(after / MB, 1),
            "growth_mb": round(growth / MB, 1),
            "samples": len(result.samples),
            "up_after_flood": result.server_after,
            "note": (
                f"RSS {before / MB:.1f} MB before the flood, peak {peak / MB:.1f} MB "
                f"(+{growth / MB:.1f} MB), {after / MB:.1f} MB after"
            ),
        },
    )
    if not result.server_alive or result.server_after != "200":
        row.status = "error"
        row.reason = (
            "the server died during the flood"
            if not result.server_alive
            else f"GET /up after the flood answered {result.server_after}"
        )
    bench.record(row)


def _bystander_row(bench: Harness, result: flooding.FloodRun) -> None:
    """`flood_bystander`: the well-behaved client's reports, during the flood and whole."""
    create, values = result.flood["create"], result.flood["values"]
    during = result.bystander(create["started"], values["ended"])
    whole = result.bystander()
    phases = {
        "before": result.bystander(None, create["started"]),
        "during_create": result.bystander(create["started"], create["ended"]),
        "during_values": result.bystander(values["started"], values["ended"]),
        "after": result.bystander(values["ended"], None),
    }
    span = (result.reports[-1][0] - result.reports[0][0]) if len(result.reports) > 1 else 0
    row = Row(
        "flood_bystander",
        bench.titles["flood_bystander"],
        requests_per_s=round(len(result.reports) / span, 1) if span else None,
        p50_ms=_ms(during["p50_ms"]),
        p99_ms=_ms(during["p99_ms"]),
        requests=whole["reports"],
        connections=1,
        extra={
            "refused": whole["refused"],
            "failed": whole["failed"],
            "statuses": whole["statuses"],
            "max_ms_during_flood": _ms(during["max_ms"]),
            "phases": phases,
            "note": (
                f"{whole['reports']} reports, {whole['refused']} refused, "
                f"{whole['failed']} failed; p50/p99 during the flood "
                f"({during['reports']} reports); p99 "
                f"{_num(phases['during_create']['p99_ms'])} ms while it creates, "
                f"{_num(phases['during_values']['p99_ms'])} ms while it PUTs values"
            ),
        },
    )
    if whole["failed"]:
        row.status = "error"
        row.reason = "the well-behaved client's reports failed: " + ", ".join(
            f"{k} ×{v}" for k, v in whole["statuses"].items() if k not in ("200", "429", "503")
        )
    bench.record(row)


def flood_answers(statuses: dict[str, int]) -> dict[str, int]:
    """A flood phase's answers as 201, 200, 429, 503 and other (failures included)."""
    answers = {k: statuses.get(k, 0) for k in ("201", "200", "429", "503")}
    answers["other"] = sum(n for k, n in statuses.items() if k not in answers)
    return answers
