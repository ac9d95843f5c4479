"""Every failure a client can provoke: SPEC §7 row by row, wrong paths and methods, and one
walk over every route with bad input."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest

from headway.api.dispatch import HeadwayApp
from headway.api.endpoints import Route
from headway.api.streaming import PIECE_BYTES, JSONStream
from headway.app import create_app
from headway.config import Settings
from tests.support import stored_counts

MAX_BODY = 65_536

# A version 4 uuid no test creates: an unknown space or task, the same in every process.
UNKNOWN = "5d3c1e0a-8f4b-4c2d-9a6e-7b1f0c3d2e4a"


def assert_error(response: httpx.Response, status: int) -> str:
    """The response is a JSON error of `status`, never cached; returns its message."""
    assert response.status_code == status, (response.request.url, response.text)
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"error"}
    assert isinstance(body["error"], str)
    assert body["error"].strip()
    return body["error"]


def padded(body: bytes, size: int) -> bytes:
    """`body` padded with trailing whitespace to exactly `size` bytes."""
    assert len(body) <= size
    return body + b" " * (size - len(body))


# --- SPEC §7, one test per row ---------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [{"before": "soon"}, {"after": "2026-99-01T00:00:00Z"}, {"limit": "ten"}, {"state": "paused"}],
)
async def test_400_read_space_with_bad_cursor_limit_or_state(client, space, params):
    assert_error(await client.get(f"/spaces/{space}", params=params), 400)


@pytest.mark.parametrize(
    "values",
    [["a"], "text", 5, {"nested": {"a": 1}}, {"list": [1]}, {"none": None}],
    ids=["list", "string", "number", "nested", "member-list", "member-null"],
)
async def test_400_report_with_values_not_a_flat_object(client, make_task, values):
    task = await make_task()
    message = assert_error(await client.put(f"/tasks/{task}", json={"values": values}), 400)
    assert "values" in message
    assert (await client.get(f"/tasks/{task}")).json()["progress"] is None


async def test_400_report_by_url_with_values_not_flat(client, make_task):
    task = await make_task()
    response = await client.get(f"/tasks/{task}/report", params={"values[a][b]": "1"})
    assert_error(response, 400)
    assert (await client.get(f"/tasks/{task}")).json()["progress"] is None


@pytest.mark.parametrize("space_uuid", [UNKNOWN, "not-a-uuid"])
async def test_404_read_space_unknown_or_wrong_uuid(client, space_uuid):
    assert_error(await client.get(f"/spaces/{space_uuid}"), 404)


@pytest.mark.parametrize("space_uuid", [UNKNOWN, "not-a-uuid"])
async def test_404_create_task_in_unknown_space(client, space_uuid):
    assert_error(await client.post(f"/spaces/{space_uuid}/tasks", json={}), 404)


@pytest.mark.parametrize("task_uuid", [UNKNOWN, "not-a-uuid"])
async def test_404_read_or_report_unknown_task(client, task_uuid):
    assert_error(await client.get(f"/tasks/{task_uuid}"), 404)
    assert_error(await client.put(f"/tasks/{task_uuid}", json={"current": 1}), 404)
    assert_error(await client.get(f"/tasks/{task_uuid}/report", params={"current": 1}), 404)


async def test_405_patch_on_a_task(client, make_task):
    task = await make_task()
    response = await client.patch(f"/tasks/{task}", json={"current": 1})
    assert "PUT" in assert_error(response, 405)
    assert "PUT" in response.headers["allow"]
    assert (await client.get(f"/tasks/{task}")).json()["progress"] is None


async def test_422_create_space_with_icon_of_more_than_one_character(client, sql):
    before = await stored_counts(sql)
    assert "icon" in assert_error(await client.post("/spaces", json={"icon": "ab"}), 422)
    assert await stored_counts(sql) == before


async def test_422_create_task_with_parent_unknown_a_child_or_in_another_space(
    client, sql, space, make_task
):
    parent = await make_task()
    child = await make_task(parent_uuid=parent)
    foreign = await make_task((await client.post("/spaces", json={})).json()["uuid"])
    before = await stored_counts(sql)
    for parent_uuid in (str(uuid.uuid4()), child, foreign):
        response = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent_uuid})
        assert "parent_uuid" in assert_error(response, 422)
    assert await stored_counts(sql) == before


async def test_503_when_the_database_is_down(tmp_path, clock, caplog):
    data = tmp_path / "data"
    app = create_app(
        Settings(database_url=f"sqlite:///{data}/headway.db", progress_ttl=60, run_worker=False),
        clock,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://headway.test") as client,
    ):
        space = (await client.post("/spaces", json={})).json()["uuid"]
        assert (await client.get("/up")).status_code == 200
        # Take the database away: close its connections and move its directory.
        await app.state.service.db.close()
        data.rename(tmp_path / "gone")
        health = await client.get("/up")
        assert health.status_code == 503
        assert health.headers["cache-control"] == "no-store"
        assert health.json()["status"] == "unavailable"
        assert health.json()["checks"]["database"]["status"] == "down"
        assert health.json()["checks"]["progress_store"]["status"] == "up"
        assert_error(await client.get(f"/spaces/{space}"), 503)
        assert_error(await client.post("/spaces", json={}), 503)
        assert_error(await client.post(f"/spaces/{space}/tasks", json={}), 503)
    # The failures were logged, but a space uuid is a credential: never in full in a log.
    assert "dependency unavailable" in caplog.text
    assert space not in caplog.text


# --- Paths and methods -------------------------------------------------------------------


@pytest.mark.parametrize("which", ["existing", "finished", "unknown", "not-a-uuid"])
async def test_patch_is_405_with_allow_whether_or_not_the_task_exists(client, make_task, which):
    task = await make_task()
    if which == "finished":
        await client.put(f"/tasks/{task}", json={"done": True})
    path = {"unknown": str(uuid.uuid4()), "not-a-uuid": "nope"}.get(which, task)
    response = await client.patch(f"/tasks/{path}", json={"current": 1})
    assert_error(response, 405)
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert {"GET", "PUT"} <= allowed
    assert "PATCH" not in allowed


@pytest.mark.parametrize(
    "path", ["/nope", "/spaces/{space}/tasks/extra", "/tasks/{task}/report/x", "/task/{task}"]
)
async def test_unknown_path_is_404_json(client, space, make_task, path):
    task = await make_task()
    response = await client.get(path.format(space=space, task=task))
    assert "openapi" in assert_error(response, 404)


def test_one_table_routes_every_request_the_most_used_first():
    """Every route is in one table (`api.dispatch`), tried in order: task reads and
    reports, creates of tasks and space reads come first."""
    app = create_app(Settings())
    assert [(route.path, route.methods) for route in app.routes[:4]] == [
        ("/tasks/{task_uuid}", {"GET", "HEAD", "PUT", "DELETE"}),
        ("/spaces/{space_uuid}/tasks", {"POST"}),
        ("/spaces/{space_uuid}", {"GET", "HEAD", "DELETE"}),
        ("/tasks/{task_uuid}/report", {"GET", "HEAD"}),
    ]
    assert app.table.find("GET", "/tasks/abc") == (app.routes[0], {"task_uuid": "abc"})
    assert app.table.find("PATCH", "/tasks/abc")[0].methods == {"PATCH"}


async def test_an_answer_in_pieces_that_fails_before_it_starts_is_answered_in_its_place(caplog):
    """An answer sent in pieces (`JSONStream`) may fail before it starts: it is answered
    by the one error path, with REST's headers; once started, it is cut short."""

    async def failing(pieces_first: int):
        if pieces_first:
            yield b"[" + b" " * pieces_first
        raise RuntimeError("the rows could not be read")

    async def endpoint(request):
        return JSONStream(failing(int(request.path_params["size"])))

    app = HeadwayApp(routes=[Route("/pieces/{size}", endpoint)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as client:
        answer = await client.get("/pieces/0")
        assert "Internal error" in assert_error(answer, 500)
        assert answer.headers["access-control-allow-origin"] == "*"
        assert answer.headers["x-content-type-options"] == "nosniff"
        with pytest.raises(RuntimeError, match="could not be read"):
            await client.get(f"/pieces/{PIECE_BYTES}")  # started: the server drops it
    assert caplog.text.count("unexpected error") == 1  # the first, logged once


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/spaces//tasks"),
        ("POST", "/spaces/{space}/tasks/"),
        ("POST", "/spaces/{space}/x/tasks"),
        ("POST", "/spaces/tasks"),
        ("GET", "/spaces/"),
        ("GET", "/spaces/{space}/"),
        ("GET", "/tasks/"),
        ("GET", "/tasks//report"),
        ("GET", "/tasks/{task}/x/report"),
        ("PUT", "/tasks/{task}/"),
        ("HEAD", "/tasks/{task}/report"),
    ],
)
async def test_paths_beside_the_most_used_routes_are_404_or_405_and_store_nothing(
    client, sql, space, make_task, method, path
):
    """A path the most used routes' templates do not match is a 404, or the 405 of the
    route it does match, and stores nothing."""
    task = await make_task()
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 3})
    before = await stored_counts(sql)
    progress = (await client.get(f"/tasks/{task}")).json()["progress"]
    response = await client.request(
        method,
        path.format(space=space, task=task),
        json={} if method in ("POST", "PUT") else None,
    )
    assert response.status_code in (404, 405)
    if method != "HEAD":
        assert_error(response, response.status_code)
    assert await stored_counts(sql) == before
    assert (await client.get(f"/tasks/{task}")).json()["progress"] == progress


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/spaces", {"POST"}),
        ("GET", "/spaces", {"POST"}),
        ("PUT", "/spaces/{space}", {"GET", "DELETE"}),
        ("POST", "/spaces/{space}", {"GET", "DELETE"}),
        ("GET", "/spaces/{space}/tasks", {"POST"}),
        ("POST", "/tasks/{task}", {"GET", "PUT", "DELETE"}),
        ("PUT", "/tasks/{task}/report", {"GET"}),
        ("POST", "/up", {"GET"}),
        ("POST", "/openapi.json", {"GET"}),
        ("PUT", "/spaces/{space}/webhooks", {"GET", "POST"}),
    ],
)
async def test_wrong_method_is_405_json_with_allow(
    client, sql, space, make_task, method, path, allowed
):
    task = await make_task()
    before = await stored_counts(sql)
    response = await client.request(method, path.format(space=space, task=task), json={})
    assert_error(response, 405)
    listed = {m.strip() for m in response.headers["allow"].split(",")}
    assert allowed <= listed
    assert "PATCH" not in listed  # refused everywhere: never advertised
    assert await stored_counts(sql) == before


async def test_every_answer_is_marked_no_store(client, space, make_task):
    task = await make_task()
    responses = [
        await client.post("/spaces", json={}),
        await client.get(f"/spaces/{space}"),
        await client.post(f"/spaces/{space}/tasks", json={}),
        await client.get(f"/tasks/{task}"),
        await client.put(f"/tasks/{task}", json={"current": 1}),
        await client.get(f"/tasks/{task}/report", params={"current": 2}),
        await client.get("/up"),
        await client.get("/openapi.json"),
    ]
    for response in responses:
        assert response.status_code in (200, 201), response.text
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["content-type"].startswith("application/json")


# --- Body limits -----------------------------------------------------------------------------


async def test_report_body_of_exactly_64_kib_is_accepted(client, make_task):
    task = await make_task()
    body = padded(b'{"current": 1, "end": 2}', MAX_BODY)
    response = await client.put(
        f"/tasks/{task}", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["progress"]["current"] == 1


async def test_create_body_of_exactly_64_kib_is_accepted(client, space, sql):
    body = padded(json.dumps({"title": "big"}).encode(), MAX_BODY)
    assert (await client.post("/spaces", content=body)).status_code == 201
    assert (await client.post(f"/spaces/{space}/tasks", content=body)).status_code == 201
    assert (await stored_counts(sql))["tasks"] == 1


async def test_body_over_64_kib_sent_in_chunks_without_length_is_413(client, make_task, sql):
    task = await make_task()

    async def chunks():
        yield b'{"current": 1'
        for _ in range(MAX_BODY // 1024):
            yield b" " * 1024
        yield b"}"

    response = await client.put(f"/tasks/{task}", content=chunks())
    assert "content-length" not in response.request.headers
    assert_error(response, 413)
    assert (await client.get(f"/tasks/{task}")).json()["progress"] is None


# --- One walk over every route with bad input --------------------------------------------------


def bad_requests(space: str, task: str) -> list[tuple[str, str, dict, int]]:
    """(method, path, httpx keyword arguments, expected status) for every refused request."""
    spaces, tasks = "/spaces", f"/spaces/{space}/tasks"
    put, url = f"/tasks/{task}", f"/tasks/{task}/report"
    unknown = str(uuid.uuid4())
    cases: list[tuple[str, str, dict, int]] = []

    def body(method: str, path: str, content: bytes | object, status: int) -> None:
        raw = content if isinstance(content, bytes) else json.dumps(content).encode()
        headers = {"content-type": "application/json"}
        cases.append((method, path, {"content": raw, "headers": headers}, status))

    shared_create = [
        {"title": 5},
        {"title": True},
        {"title": ["a"]},
        {"title": {"a": 1}},
        {"title": "x" * 201},
        {"title": "🚀" * 201},
        {"title": "a\u0000b"},
        {"unknown": 1},
        b"{",
        b'{"title": "a"',
        b"",
        b"   ",
        b"[]",
        b"null",
        b'"title"',
        b"{'title': 'a'}",
        b'{"title": NaN}',
        b'{"title": Infinity}',
        b'{"title": 1e400}',
        b'{"title": "a"} trailing',
        b"\xff\xfe",
    ]
    for content in [
        *shared_create,
        {"icon": 5},
        {"icon": True},
        {"icon": "ab"},
        {"icon": "\u0000"},
    ]:
        body("POST", spaces, content, 422)
    for content in [
        *shared_create,
        {"source": "x" * 201},
        {"source": "\u0000"},
        {"source": 1},
        {"parent_uuid": 5},
        {"parent_uuid": "nope"},
        {"parent_uuid": unknown},
        {"space_uuid": space},
    ]:
        body("POST", tasks, content, 422)
    for content in [
        {"current": "5"},
        {"current": True},
        {"end": False},
        {"current": -1},
        {"end": -0.5},
        {"current": [1]},
        {"current": {"n": 1}},
        b'{"current": NaN}',
        b'{"current": Infinity}',
        b'{"end": -Infinity}',
        b'{"current": 1e400}',
        b'{"end": -1e400}',
        {"values": {"a": {"b": 1}}},
        {"values": {"a": [1]}},
        {"values": {"a": None}},
        {"values": [1]},
        {"values": "x"},
        {"values": {f"k{i}": i for i in range(65)}},
        {"values": {"k" * 65: 1}},
        {"values": {"": 1}},
        {"values": {"a": "x" * 1025}},
        {"values": {"log": "x" * 1025}},
        b'{"values": {"a": NaN}}',
        b'{"values": {"a": 1e400}}',
        {"done": "yes"},
        {"done": 1},
        {"done": None},
        {"percent": 50},
        {"current": 1, "progress": {}},
        b"{",
        b"",
        b"[]",
        b"null",
        b"1",
        b'{"current": 1,}',
        b"\xff\xfe",
        padded(b'{"current": 1}', MAX_BODY + 1),
    ]:
        body(
            "PUT",
            put,
            content,
            413 if isinstance(content, bytes) and len(content) > MAX_BODY else 400,
        )
    body("POST", spaces, padded(b"{}", MAX_BODY + 1), 413)
    body("POST", tasks, padded(b"{}", MAX_BODY + 1), 413)
    for params in [
        {"current": "abc"},
        {"current": ""},
        {"current": "-1"},
        {"current": "nan"},
        {"current": "inf"},
        {"end": "-inf"},
        {"current": "1e400"},
        {"current": "true"},
        {"end": "0x10"},
        {"done": "maybe"},
        {"done": ""},
        {"values": "x"},
        {"values[a][b]": "1"},
        {"values[]": "1"},
        {"values[a": "1"},
        {"values[" + "k" * 65 + "]": "1"},
        {f"values[k{i}]": "v" for i in range(65)},
        {"values[a]": "x" * 1025},
        {"percent": "50"},
        {"Current": "1"},
    ]:
        cases.append(("GET", url, {"params": params}, 400))
    for params in [
        {"limit": "0"},
        {"limit": "-1"},
        {"limit": "1.5"},
        {"limit": "abc"},
        {"limit": "true"},
        {"before": "now"},
        {"after": "1"},
        {"state": "done"},
    ]:
        cases.append(("GET", f"/spaces/{space}", {"params": params}, 400))
    for bad in ("not-a-uuid", unknown, "0", space + "0", "%20", "x" * 300):
        cases.append(("GET", f"/spaces/{bad}", {}, 404))
        cases.append(("POST", f"/spaces/{bad}/tasks", {"json": {}}, 404))
        cases.append(("GET", f"/tasks/{bad}", {}, 404))
        cases.append(("PUT", f"/tasks/{bad}", {"json": {"current": 1}}, 404))
        cases.append(("GET", f"/tasks/{bad}/report", {"params": {"done": "true"}}, 404))
        cases.append(("PATCH", f"/tasks/{bad}", {"json": {}}, 405))
    return cases


async def test_every_route_refuses_bad_input_with_an_error_and_stores_nothing(
    client, sql, space, make_task
):
    task = await make_task(title="target")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 10, "values": {"a": "b"}})
    task_before = (await client.get(f"/tasks/{task}")).json()
    space_before = (await client.get(f"/spaces/{space}")).json()
    counts_before = await stored_counts(sql)
    cases = bad_requests(space, task)
    assert len(cases) >= 150
    for method, path, kwargs, status in cases:
        response = await client.request(method, path, **kwargs)
        assert response.status_code != 500
        assert_error(response, status)
    assert await stored_counts(sql) == counts_before
    assert (await client.get(f"/tasks/{task}")).json() == task_before
    assert (await client.get(f"/spaces/{space}")).json() == space_before


async def test_unknown_member_errors_name_the_member(client, space, make_task):
    task = await make_task()
    for response in (
        await client.post("/spaces", json={"colour": "red"}),
        await client.post(f"/spaces/{space}/tasks", json={"colour": "red"}),
        await client.put(f"/tasks/{task}", json={"colour": "red"}),
        await client.get(f"/tasks/{task}/report", params={"colour": "red"}),
    ):
        assert "colour" in response.json()["error"]


async def test_wrongly_typed_member_errors_name_the_member(client, space, make_task):
    task = await make_task()
    assert "title" in (await client.post("/spaces", json={"title": 1})).json()["error"]
    assert (
        "source"
        in (await client.post(f"/spaces/{space}/tasks", json={"source": 1})).json()["error"]
    )
    assert "current" in (await client.put(f"/tasks/{task}", json={"current": "1"})).json()["error"]


async def test_an_unknown_report_member_says_to_put_it_in_values(client, make_task):
    task = await make_task()
    answer = await client.put(f"/tasks/{task}", json={"log": "hello"})
    assert answer.status_code == 400
    assert answer.json() == {
        "error": "Invalid request body: unknown member 'log': a report has current, end, "
        'done and values; put \'log\' in values, as {"values": {"log": ...}}.'
    }
    answer = await client.post(f"/spaces/{(await client.post('/spaces', json={})).json()['uuid']}"
                               "/tasks", json={"tilte": "Deploy"})  # fmt: skip
    assert answer.status_code == 422
    assert answer.json()["error"].endswith(
        "unknown member 'tilte': the members are title, source and parent_uuid."
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"current": "3"},
            "'current' must be a number or null, not a string (write the number without "
            'quotes, as 3 rather than "3").',
        ),
        ({"end": True}, "'end' must be a number or null, not a boolean (true or false)."),
        ({"current": -1}, "'current' must be a number, at least 0."),
        ({"values": []}, "'values' must be a JSON object or null, not an array."),
    ],
)
async def test_a_wrongly_typed_member_is_told_in_words_like_every_other_error(
    client, make_task, body, message
):
    task = await make_task()
    answer = await client.put(f"/tasks/{task}", json=body)
    assert answer.status_code == 400
    assert answer.json() == {"error": f"Invalid request body: {message}"}


async def test_openapi_says_malformed_json_is_400_on_reports_and_422_on_creates(client, make_task):
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path, method, status in (
        ("/tasks/{task_uuid}", "put", "400"),
        ("/spaces", "post", "422"),
        ("/spaces/{space_uuid}/tasks", "post", "422"),
    ):
        description = paths[path][method]["description"]
        assert f"not valid JSON, or holds an unknown or wrongly typed member, is {status}" in (
            description
        )
    task = await make_task()
    assert (await client.put(f"/tasks/{task}", content=b"{")).status_code == 400
    assert (await client.post("/spaces", content=b"{")).status_code == 422


async def test_validation_errors_do_not_claim_the_json_is_malformed(client, make_task):
    task = await make_task()
    message = (await client.put(f"/tasks/{task}", json={"current": -1})).json()["error"]
    assert "not valid JSON" not in message
    message = (await client.put(f"/tasks/{task}", content=b"{")).json()["error"]
    assert "JSON" in message


def test_bad_requests_cover_every_route():
    cases = bad_requests(str(uuid.uuid4()), str(uuid.uuid4()))
    templates = {
        ("POST", "/spaces"),
        ("GET", "/spaces/{}"),
        ("POST", "/spaces/{}/tasks"),
        ("GET", "/tasks/{}"),
        ("PUT", "/tasks/{}"),
        ("PATCH", "/tasks/{}"),
        ("GET", "/tasks/{}/report"),
    }
    seen = set()
    for method, path, _, _ in cases:
        parts = Path(path).parts
        shape = "/" + "/".join("{}" if i == 2 else p for i, p in enumerate(parts) if i)
        seen.add((method, shape))
    assert templates <= seen


async def test_too_many_values_say_the_limit_is_of_members(client, make_task, space):
    task = await make_task()
    values = {f"k{n}": n for n in range(65)}
    message = assert_error(await client.put(f"/tasks/{task}", json={"values": values}), 400)
    assert message == "Invalid request body: 'values' must have at most 64 members."
    long_title = assert_error(await client.post("/spaces", json={"title": "x" * 201}), 422)
    assert "'title' must be at most 200 characters long" in long_title
    events = ["completed", "failed", "stalled", "late", "completed"]
    url = f"/spaces/{space}/channels"
    many = assert_error(
        await client.post(url, json={"url": "json://x.example", "events": events}), 422
    )
    assert "'events' must have at most 4 items" in many


async def test_an_unknown_channel_event_lists_the_valid_ones(client, space):
    answer = await client.post(
        f"/spaces/{space}/channels", json={"url": "json://x.example", "events": ["done"]}
    )
    message = assert_error(answer, 422)
    assert message == (
        "Invalid request body: 'events[0]' must be one of 'completed', 'failed', 'stalled' "
        "or 'late', not 'done'."
    )
