"""`GET /metrics`: the Prometheus text an operator's scraper reads (see headway.ops.metrics)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..ops import metrics
from .endpoints import Request, Route
from .health import Dependencies
from .responses import NO_STORE


async def scrape(request: Request) -> Response:
    on: Dependencies = request.app.state.dependencies
    body = await metrics.scrape(on.db, on.progress, on.disk)
    return Response(body, media_type=metrics.CONTENT_TYPE, headers=NO_STORE)


routes = [Route("/metrics", scrape, methods=["GET"])]

openapi_paths: dict[str, Any] = {
    "/metrics": {
        "get": {
            "operationId": "getMetrics",
            "summary": "Metrics for Prometheus",
            "description": "Requests by route template, method and status, with their "
            "durations; refusals by reason; webhook deliveries by outcome; open streams; and, "
            "measured at each scrape, live progress, the outbox's backlog, the database's "
            "size and its disk's free space. No label holds a uuid. HEADWAY_METRICS=false "
            "turns this path off; HEADWAY_METRICS_PORT serves it on that port instead of "
            "this one.",
            "responses": {
                "200": {
                    "description": "The Prometheus text format, version 0.0.4.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        }
    }
}
