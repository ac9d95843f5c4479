"""`GET /openapi.json`: OpenAPI 3.1, version 1, every route and method described."""

from __future__ import annotations

import re
from typing import Any

import pytest

ERROR_REF = "#/components/schemas/ErrorOut"


@pytest.fixture
async def document(client) -> dict[str, Any]:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def app_operations(app) -> set[tuple[str, str]]:
    """(path, method) of every operation the app serves, HEAD aside."""
    found = set()
    for route in app.routes:
        if route.prefix and route.path == "/static":
            continue  # the pages' script and style, not an API
        if route.path == "/openapi.json":
            continue  # the document does not describe itself
        if route.path == "/mcp":
            found.add(("/mcp", "post"))  # an ASGI endpoint: POST, and 405 for the rest
            continue
        assert route.methods, route.path
        found.update((route.path, m.lower()) for m in route.methods if m != "HEAD")
    return found


def operations(document) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    ]


def resolved(document: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """`response`, or the shared `components/responses` entry it refers to."""
    ref = response.get("$ref")
    if ref is None:
        return response
    assert ref.startswith("#/components/responses/"), ref
    return document["components"]["responses"][ref.removeprefix("#/components/responses/")]


def parameters(document: dict[str, Any], operation: dict[str, Any]) -> list[dict[str, Any]]:
    """The operation's parameters, each shared `components/parameters` entry resolved."""
    found = []
    for parameter in operation.get("parameters", []):
        ref = parameter.get("$ref")
        if ref is not None:
            assert ref.startswith("#/components/parameters/"), ref
            parameter = document["components"]["parameters"][ref.rsplit("/", 1)[1]]
        found.append(parameter)
    return found


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            found.extend(refs(value))
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in refs(item)]
    return []


async def test_document_is_openapi_3_1_version_1(document):
    assert re.fullmatch(r"3\.1\.\d+", document["openapi"])
    assert document["info"]["version"] == "1"
    assert document["info"]["title"]


async def test_every_route_and_method_of_the_app_is_described(app, document):
    described = {(path, method) for path, method, _ in operations(document)}
    missing = app_operations(app) - described
    assert not missing, f"not in /openapi.json: {sorted(missing)}"
    assert described <= app_operations(app), "describes operations the app does not serve"


async def test_spec_operations_are_described(document):
    described = {(path, method) for path, method, _ in operations(document)}
    assert {
        ("/spaces", "post"),
        ("/spaces/{space_uuid}", "get"),
        ("/spaces/{space_uuid}/tasks", "post"),
        ("/tasks/{task_uuid}", "get"),
        ("/tasks/{task_uuid}", "put"),
        ("/tasks/{task_uuid}", "patch"),
        ("/tasks/{task_uuid}/report", "get"),
        ("/up", "get"),
    } <= described


async def test_every_operation_has_responses_and_errors_reference_error_out(document):
    for path, method, operation in operations(document):
        responses = operation["responses"]
        assert responses, (path, method)
        assert any(code.startswith("2") for code in responses) or method == "patch"
        for code, response in responses.items():
            response = resolved(document, response)
            assert response["description"], (path, method, code)
            # /up answers objects of its own; /mcp's 400 is a JSON-RPC error object.
            if code.startswith(("4", "5")) and path != "/up" and (path, code) != ("/mcp", "400"):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": ERROR_REF}, (path, method, code)


@pytest.mark.parametrize(
    ("path", "method", "codes"),
    [
        ("/spaces", "post", {"201", "422", "413"}),
        ("/spaces/{space_uuid}", "get", {"200", "400", "404"}),
        ("/spaces/{space_uuid}/tasks", "post", {"201", "404", "422", "413"}),
        ("/tasks/{task_uuid}", "get", {"200", "404"}),
        ("/tasks/{task_uuid}", "put", {"200", "400", "404", "413"}),
        ("/tasks/{task_uuid}", "patch", {"405"}),
        ("/tasks/{task_uuid}/report", "get", {"200", "400", "404"}),
        ("/up", "get", {"200", "503"}),
    ],
)
async def test_operation_lists_the_statuses_of_the_spec(document, path, method, codes):
    assert codes <= set(document["paths"][path][method]["responses"])


async def test_patch_on_a_task_is_deprecated_and_nothing_else_is(document):
    for path, method, operation in operations(document):
        deprecated = operation.get("deprecated", False)
        assert deprecated == ((path, method) == ("/tasks/{task_uuid}", "patch")), (path, method)


async def test_every_path_parameter_is_described(document):
    for path, method, operation in operations(document):
        declared = set(re.findall(r"{(\w+)}", path))
        params = {p["name"]: p for p in parameters(document, operation) if p["in"] == "path"}
        assert set(params) == declared, (path, method)
        for param in params.values():
            assert param["required"] is True
            assert param["description"]
            assert param["schema"]["type"] == "string"


async def test_uuid_path_parameters_are_uuid_formatted(document):
    for _path, _method, operation in operations(document):
        for param in parameters(document, operation):
            if param["in"] == "path" and param["name"].endswith("_uuid"):
                assert param["schema"].get("format") == "uuid"


async def test_every_query_parameter_is_described(document):
    for path, method, operation in operations(document):
        for param in parameters(document, operation):
            if param["in"] in ("query", "header"):
                assert param["description"], (path, method, param["name"])
                assert "schema" in param


async def test_space_read_query_parameters(document):
    params = {
        p["name"]: p
        for p in document["paths"]["/spaces/{space_uuid}"]["get"]["parameters"]
        if p["in"] == "query"
    }
    assert set(params) == {"limit", "before", "after", "state"}
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 1}
    assert params["state"]["schema"]["enum"] == ["active", "finished"]
    assert params["before"]["schema"]["format"] == "date-time"


CREATES = {
    ("/spaces", "post"),
    ("/spaces/{space_uuid}/tasks", "post"),
    ("/spaces/{space_uuid}/webhooks", "post"),
    ("/spaces/{space_uuid}/channels", "post"),
    ("/spaces/{space_uuid}/shares", "post"),
}


async def test_every_create_and_only_a_create_takes_an_idempotency_key(document):
    key_ref = {"$ref": "#/components/parameters/IdempotencyKey"}
    shared = document["components"]["parameters"]["IdempotencyKey"]
    assert shared["in"] == "header" and shared["name"] == "Idempotency-Key"
    assert shared["schema"]["maxLength"] == 255 and shared["required"] is False
    for path, method, operation in operations(document):
        takes_key = key_ref in operation.get("parameters", [])
        assert takes_key == ((path, method) in CREATES), (path, method)
        if takes_key:
            responses = operation["responses"]
            assert {"400", "409", "422"} <= set(responses)
            assert "Idempotency-Key" in responses["400"]["description"]
            assert "Idempotency-Key" in responses["422"]["description"]
            assert "Idempotent-Replayed" in responses["201"]["headers"]


async def test_post_and_put_operations_have_a_json_request_body(document):
    for path, method, operation in operations(document):
        if method in ("post", "put"):
            body = operation["requestBody"]
            assert body["required"] is True, (path, method)
            assert "schema" in body["content"]["application/json"], (path, method)


async def test_every_ref_resolves_to_a_component(document):
    components = document["components"]["schemas"]
    found = refs(document)
    assert ERROR_REF in found
    for ref in found:
        assert ref.startswith(
            ("#/components/schemas/", "#/components/responses/", "#/components/parameters/")
        ), ref
        kind, name = ref.removeprefix("#/components/").split("/")
        assert name in document["components"][kind], ref
    assert set(components) >= {"ErrorOut", "HealthOut"}


async def test_request_schemas_forbid_unknown_members(document):
    components = document["components"]["schemas"]
    for name in ("CreateSpace", "CreateTask", "ReportBody"):
        assert components[name]["additionalProperties"] is False, name


async def test_limits_are_published_in_the_schemas(document):
    components = document["components"]["schemas"]
    assert components["CreateSpace"]["properties"]["title"]["anyOf"][0]["maxLength"] == 200
    report = components["ReportBody"]["properties"]
    values = report["values"]["anyOf"][0]
    assert values["maxProperties"] == 64
    assert values["propertyNames"]["maxLength"] == 64


# --- Refusals, health, uuids and links --------------------------------------------------------

LIMITED = [
    ("/spaces", "post"),
    ("/spaces/{space_uuid}/tasks", "post"),
    ("/spaces/{space_uuid}/webhooks", "post"),
    ("/tasks/{task_uuid}", "put"),
    ("/tasks/{task_uuid}/report", "get"),
    # Reads, rated by the tasks they render (HEADWAY_RATE_READS).
    ("/spaces/{space_uuid}", "get"),
    ("/tasks/{task_uuid}", "get"),
    ("/shared/{share_uuid}", "get"),
    ("/spaces/{space_uuid}/events", "get"),
    ("/shared/{share_uuid}/events", "get"),
]


def retry_after_is_documented(response: dict[str, Any]) -> None:
    assert response["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}
    assert response["headers"]["Retry-After"]["schema"]["type"] == "integer"


@pytest.mark.parametrize(("path", "method"), LIMITED)
async def test_rate_limited_operations_document_429_with_retry_after(document, path, method):
    response = resolved(document, document["paths"][path][method]["responses"]["429"])
    retry_after_is_documented(response)
    assert "rate" in response["description"]


@pytest.mark.parametrize(
    ("path", "method"), [("/tasks/{task_uuid}", "put"), ("/tasks/{task_uuid}/report", "get")]
)
async def test_reports_document_503_for_a_full_memory_budget(document, path, method):
    response = resolved(document, document["paths"][path][method]["responses"]["503"])
    retry_after_is_documented(response)
    assert "memory budget" in response["description"]


async def test_every_other_503_of_a_dependency_documents_retry_after(document):
    for path, _method, operation in operations(document):
        response = operation["responses"].get("503")
        if response is not None and path != "/up":
            retry_after_is_documented(resolved(document, response))


async def test_every_operation_documents_431_for_header_fields_too_large(document):
    for path, method, operation in operations(document):
        response = resolved(document, operation["responses"]["431"])
        assert response["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}, (
            path,
            method,
        )


async def test_mcp_documents_403_for_a_foreign_origin(document):
    responses = document["paths"]["/mcp"]["post"]["responses"]
    assert "Origin" in responses["403"]["description"]
    assert responses["403"]["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}


async def test_health_answers_are_typed(client, document):
    components = document["components"]["schemas"]
    for code in ("200", "503"):
        schema = document["paths"]["/up"]["get"]["responses"][code]["content"]
        assert schema["application/json"]["schema"] == {"$ref": "#/components/schemas/HealthOut"}
    health = components["HealthOut"]
    assert set(health["properties"]["status"]["enum"]) == {"ok", "degraded", "unavailable"}
    checks = components["HealthChecks"]
    assert set(checks["required"]) == {"database", "progress_store", "worker", "loops", "disk"}
    answer = (await client.get("/up")).json()
    assert set(answer) == set(health["properties"])
    for name, ref in checks["properties"].items():
        check = components[ref["$ref"].removeprefix("#/components/schemas/")]
        assert set(answer["checks"][name]) <= set(check["properties"]), name
        assert set(check["required"]) <= set(answer["checks"][name]), name


@pytest.mark.parametrize(
    ("model", "member"),
    [
        ("TaskOut", "uuid"),
        ("TaskOut", "space_uuid"),
        ("TaskOut", "parent_uuid"),
        ("SpaceCreated", "uuid"),
        ("TaskCreated", "uuid"),
        ("WebhookCreated", "uuid"),
        ("WebhookOut", "uuid"),
    ],
)
async def test_uuids_in_answers_are_uuid_formatted(document, model, member):
    schema = document["components"]["schemas"][model]["properties"][member]
    arms = schema.get("anyOf", [schema])
    assert {"type": "string", "format": "uuid"} in [
        {k: v for k, v in arm.items() if k in ("type", "format")} for arm in arms
    ]


@pytest.mark.parametrize(
    ("source", "targets"),
    [
        ("createSpace", {"getSpace", "createTask", "createWebhook"}),
        ("createTask", {"getTask", "reportProgress", "reportProgressByUrl"}),
    ],
)
async def test_creations_link_to_what_their_uuid_opens(document, source, targets):
    by_id = {op["operationId"]: op for _, _, op in operations(document)}
    links = by_id[source]["responses"]["201"]["links"]
    assert targets <= {link["operationId"] for link in links.values()}
    for link in links.values():
        target = by_id[link["operationId"]]
        declared = {p["name"] for p in parameters(document, target) if p["in"] == "path"}
        assert set(link["parameters"]) == declared, link
