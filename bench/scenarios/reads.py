"""The reads scenarios: a parent of many children, a small space, pages of a small and a
big space, the whole big space, and the bare server at the parent's cost."""

from __future__ import annotations

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness, Skip
from ..options import PAGE
from ..processes import ServerProcess


def parent(bench: Harness, server: ServerProcess, parent_uuid: str) -> None:
    """`get_parent`, with the size of its answer for the `baseline_parent` calibration."""
    row = bench.measure(server, "get_parent", Load("GET", [f"/tasks/{parent_uuid}"]))
    answer = httpx.get(f"{server.url}/tasks/{parent_uuid}", timeout=30)
    row.extra["answer_bytes"] = len(answer.content)


def spaces(bench: Harness, server: ServerProcess, small: seed.Space, big: seed.Space) -> None:
    """The small space whole, pages of the small and the big space, the big space whole."""
    bench.measure(server, "get_space_small", Load("GET", [f"/spaces/{small.uuid}"]))
    for name, space in (("get_space_small_page", small), ("get_space_big_page", big)):
        pages = [
            f"/spaces/{space.uuid}?limit={PAGE}&before={c}"
            for c in seed.cursors(space, PAGE, bench.o.cursors)
        ]
        bench.measure(server, name, Load("GET", pages))
    _whole_space(bench, server, big)


def _whole_space(bench: Harness, server: ServerProcess, big: seed.Space) -> None:
    # Each answer holds the whole space: one connection, and time for a few.
    # Its RSS is sampled throughout: a streamed answer keeps it from growing.
    o = bench.o
    whole = bench.measure(
        server,
        "get_space_big",
        Load("GET", [f"/spaces/{big.uuid}"]),
        connections=1,
        threads=1,
        duration=o.duration if o.big <= 10_000 else max(o.duration, 10),
        timeout=120,
        sample_rss=True,
    )
    if whole.cpu_us_per_request is not None and "rss_growth_mb" in whole.extra:
        whole.extra["cpu_ms_per_answer"] = round(whole.cpu_us_per_request / 1000, 1)
        whole.extra["note"] = (
            f"{whole.extra['cpu_ms_per_answer']:,.1f} ms CPU per answer; RSS "
            f"{whole.extra['rss_before_mb']:,.1f} MB before, peak "
            f"{whole.extra['peak_rss_mb']:,.1f} MB while answering "
            f"(+{whole.extra['rss_growth_mb']:,.1f} MB)"
        )
        bench.say(f"get_space_big: {whole.extra['note']}")


def baseline_parent(bench: Harness) -> None:
    """The bare server sending what the parent scenario sends, at the CPU it costs:
    how much of that scenario's tail is the machine's, whatever the code."""
    row = bench.rows.get("get_parent")
    size = (row.extra.get("answer_bytes") if row else None) or 0
    if not row or row.status != "ok" or not size or not row.cpu_us_per_request:
        raise Skip("the parent scenario was not measured")
    bench.calibrate("baseline_parent", row, "the parent", {"BENCH_BODY_BYTES": str(size)})
