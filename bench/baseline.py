"""The ceiling: a raw ASGI callable that answers every request with a fixed ~300-byte JSON
(or, as a calibration, a body of another size after a given CPU time).

It runs under the same server software and settings as Headway (uvicorn, uvloop,
httptools, one worker, no access log), so a Headway figure divided by this one is the
share of the server's capacity that Headway's own code leaves.
"""

from __future__ import annotations

import os
import time
from typing import Any

# Shaped like a task as Headway returns it, 300 bytes give or take.
BODY = (
    b'{"uuid":"0b6c1f4e-8f51-4a59-9d2e-3f0e1c7a5b11",'
    b'"parent_uuid":null,"title":"nightly build","source":"ci",'
    b'"created_at":"2026-11-22T01:15:09.123456Z","finished_at":null,"duration":null,'
    b'"progress":{"current":5,"end":10,"ratio":0.5,"values":{"log":"x"},'
    b'"updated_at":"2026-11-22T01:15:10.000000Z","aggregated":false},"children":[]}'
)
# A calibration (see `bench.run`): `BENCH_BODY_BYTES` makes the body a JSON of that many
# bytes, and `BENCH_BURN_US` spends that much CPU before each answer, so that a scenario
# whose answer is big can be compared with the bare server sending as much at the cost.
if os.environ.get("BENCH_BODY_BYTES"):
    _size = int(os.environ["BENCH_BODY_BYTES"])
    BODY = b'{"x":"' + b"a" * max(0, _size - 8) + b'"}'
BURN_S = int(os.environ.get("BENCH_BURN_US", "0")) / 1e6
HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(BODY)).encode()),
    (b"cache-control", b"no-store"),
]


def _burn() -> None:
    deadline = time.perf_counter() + BURN_S
    while time.perf_counter() < deadline:
        pass


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer any HTTP request with BODY, after reading (and dropping) the request body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    if BURN_S:
        _burn()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
