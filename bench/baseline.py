"""The ceiling: a raw ASGI callable that answers every request with a fixed ~300-byte JSON.

It runs under the same server software and settings as Headway (uvicorn, uvloop,
httptools, one worker, no access log), so a Headway figure divided by this one is the
share of the server's capacity that Headway's own code leaves.
"""

from __future__ import annotations

from typing import Any

# Shaped like a task as Headway returns it, 300 bytes give or take.
BODY = (
    b'{"uuid":"0b6c1f4e-8f51-4a59-9d2e-3f0e1c7a5b11",'
    b'"parent_uuid":null,"title":"nightly build","source":"ci",'
    b'"created_at":"2026-11-22T01:15:09.123456Z","finished_at":null,"duration":null,'
    b'"progress":{"current":5,"end":10,"ratio":0.5,"values":{"log":"x"},'
    b'"updated_at":"2026-11-22T01:15:10.000000Z","aggregated":false},"children":[]}'
)
HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(BODY)).encode()),
    (b"cache-control", b"no-store"),
]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer any HTTP request with BODY, after reading (and dropping) the request body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
