"""`GET /openapi.json`: the OpenAPI 3.1 description, built from the shared schemas."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from ..domain import schemas
from ..ops.health import HealthOut
from .endpoints import Request, Route
from .openapi_parts import IDEMPOTENT, METHODS, PARAMETERS, RESPONSES, idempotent, response_ref
from .openapi_paths import space_paths, task_paths
from .responses import JSONResponse

_MODELS = [
    schemas.CreateSpace,
    schemas.CreateTask,
    schemas.ReportBody,
    schemas.CreateWebhook,
    schemas.SpaceCreated,
    schemas.SpaceOut,
    schemas.TaskCreated,
    schemas.TaskOut,
    schemas.WebhookCreated,
    schemas.WebhookOut,
    schemas.WebhookDelivery,
    schemas.CreateChannel,
    schemas.TestChannel,
    schemas.ChannelOut,
    schemas.ChannelWithDeliveries,
    schemas.ChannelDelivery,
    schemas.CreateShare,
    schemas.ShareCreated,
    schemas.ShareOut,
    schemas.JobsOut,
    schemas.EstimateOut,
    schemas.SharedSpaceOut,
    schemas.ShieldsOut,
    schemas.ErrorOut,
    HealthOut,
]


def build_document(paths_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole OpenAPI document; `paths_extra` adds the paths of optional features."""
    _, components = msgspec.json.schema_components(
        _MODELS, ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, Any] = {**space_paths(), **task_paths(), **(paths_extra or {})}
    paths = {
        path: {key: _completed(value) if key in METHODS else value for key, value in item.items()}
        for path, item in paths.items()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Headway",
            "version": "1",
            "description": "Progress reporting over plain HTTP. A space's uuid is its "
            "credential; every report replaces a task's whole state.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": RESPONSES,
            "parameters": PARAMETERS,
        },
    }


def _completed(operation: dict[str, Any]) -> dict[str, Any]:
    """An operation with the Idempotency-Key of a create that honours it, and the 431 the
    HTTP server itself answers, before any route, on every path."""
    if operation.get("operationId") in IDEMPOTENT:
        operation = idempotent(operation)
    too_large = {"431": response_ref("HeaderFieldsTooLarge")}
    return {**operation, "responses": {**operation["responses"], **too_large}}


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


routes = [Route("/openapi.json", openapi, methods=["GET"])]
