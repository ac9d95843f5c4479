"""A byte-level fuzzer over every route: whatever arrives in a body, a query string, a path
or a content type, the answer is a 2xx or a JSON 4xx error, never a 5xx, and the space and
its tasks still read 200 afterwards."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any
from urllib.parse import quote_from_bytes

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from headway.config import Settings

FUZZ = hypothesis_settings(
    max_examples=150,
    deadline=None,
    database=None,  # no .hypothesis directory in a shared working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MCP_HEADERS = {"host": "127.0.0.1", "accept": "application/json, text/event-stream"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The backend's settings, with rate limits off (the fuzzer is a flood by design) and
    webhook addresses unchecked (no DNS lookups of random names)."""
    return replace(settings, rate_limits=False, webhook_allow_private=True)


@pytest.fixture
async def target(client, space, make_task) -> dict[str, str]:
    """The space, a parent task and its child, a webhook: what paths are filled with."""
    parent = await make_task(title="parent")
    child = await make_task(title="child", parent_uuid=parent)
    hook = await client.post(f"/spaces/{space}/webhooks", json={"url": "https://example.com/"})
    assert hook.status_code == 201, hook.text
    return {"s": space, "p": parent, "t": child, "w": hook.json()["uuid"]}


# --- What a hostile client sends ---------------------------------------------------------------

ROUTES = [
    ("POST", "/spaces"),
    ("GET", "/spaces/{s}"),
    ("POST", "/spaces/{s}/tasks"),
    ("GET", "/spaces/{s}/webhooks"),
    ("POST", "/spaces/{s}/webhooks"),
    ("DELETE", "/spaces/{s}/webhooks/{w}"),
    ("GET", "/tasks/{t}"),
    ("PUT", "/tasks/{t}"),
    ("PUT", "/tasks/{p}"),
    ("PATCH", "/tasks/{t}"),
    ("GET", "/tasks/{t}/report"),
    ("GET", "/tasks/{p}/report"),
    ("GET", "/up"),
    ("GET", "/openapi.json"),
    ("POST", "/mcp"),
]
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
MEMBERS = ["title", "icon", "source", "parent_uuid", "url", "current", "end", "values", "done"]
QUERY_NAMES = [
    "current",
    "end",
    "done",
    "limit",
    "before",
    "after",
    "state",
    "values[log]",
    "values[a]",
    "values[a][b]",
    "values[]",
    "values",
    "x",
]
NASTY = [
    b"\xc3\x28",  # a truncated sequence
    b"\xed\xa0\x80",  # a surrogate encoded as UTF-8
    b"\xff\xfe",
    b"\x00",
    b"\\ud800",
    b"\\udfff\\ud800",
    b"1" + b"0" * 400,
    b"1e400",
    b"-1",
    b"nan",
    b"Infinity",
    b"true",
    b"2026-11-22T01:15:09.123456Z",
]
CONTENT_TYPES = [
    None,
    b"application/json",
    b"application/json; charset=latin-1",
    b"text/plain",
    b"application/x-www-form-urlencoded",
    b"multipart/form-data; boundary=x",
    b"application/json; charset=\xff",
    b"*/*",
]

huge = st.integers(min_value=10**300, max_value=10**420)
counts = st.one_of(
    huge,
    st.floats(min_value=0, max_value=1e308),
    st.integers(min_value=0, max_value=2**70),
    st.sampled_from([0, 0.5, 1.7976931348623157e308, 5e-324, -1]),
)
nasty_texts = st.one_of(
    st.sampled_from(["\ud800", "a\udc00b", "\udfff\ud800", "\x00", "🚀" * 3, "x" * 1025]),
    st.text(max_size=30),
)
urls = st.one_of(
    st.sampled_from(
        [
            "http://a..com/",
            "http://xn--a.example/",
            "http://xn--zz.example/",
            "http://" + "a" * 64 + ".example/",
            "http://[2002:7f00:1::]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
        ]
    ),
    st.builds(lambda host: f"http://{host}/", nasty_texts),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    counts,
    st.floats(),
    nasty_texts,
    st.just(str(uuid.uuid4())),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(MEMBERS), nasty_texts), inner, max_size=4),
    ),
    max_leaves=12,
)
# Bodies shaped like each route's, with hostile members; and anything at all.
objects = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "current": counts,
            "end": counts,
            "done": st.booleans(),
            "values": st.dictionaries(nasty_texts, scalars, max_size=3),
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={"title": nasty_texts, "icon": nasty_texts, "source": nasty_texts},
    ),
    st.fixed_dictionaries({"url": urls}),
    st.dictionaries(st.one_of(st.sampled_from(MEMBERS), nasty_texts), json_values, max_size=4),
)


@st.composite
def json_bytes(draw: st.DrawFn, values: st.SearchStrategy[Any] = objects) -> bytes:
    """A JSON document, its text escaped or not (an unescaped surrogate is not UTF-8).

    Python's `json` writes a NaN or an infinity as `NaN` or `Infinity`: not JSON, on purpose.
    """
    text = json.dumps(draw(values), ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def spliced(draw: st.DrawFn) -> bytes:
    """A JSON document with a nasty fragment put somewhere inside it."""
    body = draw(json_bytes())
    at = draw(st.integers(min_value=0, max_value=len(body)))
    return body[:at] + draw(st.sampled_from(NASTY) | st.binary(max_size=8)) + body[at:]


def nested(depth: int) -> bytes:
    return b'{"values": ' + b"[" * depth + b"]" * depth + b"}"


bodies = st.one_of(
    json_bytes(),
    spliced(),
    st.binary(max_size=200),
    st.integers(min_value=1, max_value=50_000).map(nested),
    st.integers(min_value=1, max_value=20_000).map(lambda n: b"{" * n),
)


def encode_query_part(raw: bytes, mode: int) -> bytes:
    """`raw` wholly percent-encoded (0), or with some (1) or all (2) of the characters that
    give a query string its structure left as they are. Bytes beyond ASCII are always
    encoded: an HTTP server refuses them raw in a request line."""
    safe = ("", "[]+%", "[]+%=&;,/?:@!$'()*")[mode]
    return quote_from_bytes(raw, safe=safe).encode()


@st.composite
def query_strings(draw: st.DrawFn) -> bytes:
    """Parameters known and unknown, with text or bytes that are not UTF-8, and repeats."""
    names = st.one_of(st.sampled_from(QUERY_NAMES).map(str.encode), st.binary(max_size=10))
    values = st.one_of(
        st.sampled_from(NASTY),
        st.binary(max_size=20),
        st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.floats(allow_nan=True).map(lambda f: repr(f).encode()),
        st.integers(min_value=-5, max_value=10**500).map(lambda n: str(n).encode()),
    )
    pairs = draw(st.lists(st.tuples(names, values), max_size=5))
    if pairs and draw(st.booleans()):
        pairs.append(draw(st.sampled_from(pairs)))  # a repeated name
    mode = draw(st.integers(min_value=0, max_value=2))
    return b"&".join(
        encode_query_part(name, mode) + b"=" + encode_query_part(value, mode)
        for name, value in pairs
    )


mcp_messages = st.one_of(
    st.builds(
        lambda name, arguments: json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        ).encode("utf-8", "surrogatepass"),
        st.sampled_from(
            ["create_space", "get_space", "create_task", "get_task", "report_progress", "x"]
        ),
        st.dictionaries(
            st.sampled_from([*MEMBERS, "space_uuid", "task_uuid", "limit", "before"]),
            json_values,
            max_size=4,
        ),
    ),
    json_bytes(json_values),
    bodies,
)


# --- The judgement ------------------------------------------------------------------------------


def fill(template: str, target: dict[str, str]) -> str:
    return template.format(**target)


async def send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    query: bytes = b"",
    body: bytes = b"",
    content_type: bytes | None = b"application/json",
) -> httpx.Response:
    headers: dict[str, Any] = dict(MCP_HEADERS) if path == "/mcp" else {}
    if content_type is not None:
        headers["content-type"] = content_type
    url = httpx.URL(f"http://headway.test{path}")
    if query:
        url = url.copy_with(query=query)
    return await client.request(method, url, content=body, headers=headers)


def assert_answered(response: httpx.Response) -> None:
    """A 2xx, or a 4xx JSON error; never a 5xx."""
    request = response.request
    where = f"{request.method} {request.url} {request.content[:200]!r}"
    status = response.status_code
    assert status < 500, (where, status, response.text)
    if request.method == "HEAD" or status in (202, 204):
        return
    assert response.headers["content-type"].startswith("application/json"), where
    body = response.json()
    if status >= 400 and request.url.path != "/mcp":  # /mcp's 400 is a JSON-RPC error
        assert set(body) == {"error"} and body["error"], (where, body)


async def assert_still_readable(client: httpx.AsyncClient, target: dict[str, str]) -> None:
    for path in ("/spaces/{s}", "/tasks/{t}", "/tasks/{p}", "/spaces/{s}/webhooks"):
        response = await client.get(fill(path, target))
        assert response.status_code == 200, (path, response.text)


# --- The fuzzers -------------------------------------------------------------------------------


@FUZZ
@given(
    route=st.sampled_from(ROUTES),
    body=bodies,
    content_type=st.sampled_from(CONTENT_TYPES),
)
async def test_any_body_is_answered_without_a_5xx(client, target, route, body, content_type):
    method, template = route
    response = await send(
        client, method, fill(template, target), body=body, content_type=content_type
    )
    assert_answered(response)
    await assert_still_readable(client, target)


@FUZZ
@given(route=st.sampled_from(ROUTES), query=query_strings())
async def test_any_query_string_is_answered_without_a_5xx(client, target, route, query):
    method, template = route
    body = b"{}" if method in ("POST", "PUT") and template != "/mcp" else b""
    response = await send(client, method, fill(template, target), query=query, body=body)
    assert_answered(response)
    await assert_still_readable(client, target)


@st.composite
def paths(draw: st.DrawFn) -> tuple[str, list[str | bytes]]:
    """A route's path with one segment replaced by fuzz, or extra slashes and segments."""
    _, template = draw(st.sampled_from(ROUTES))
    segments: list[str | bytes] = list(template.strip("/").split("/"))
    fuzz = st.one_of(st.binary(max_size=40), st.sampled_from(NASTY), st.just(b""))
    kind = draw(st.sampled_from(["replace", "append", "slash"]))
    if kind == "replace":
        segments[draw(st.integers(min_value=0, max_value=len(segments) - 1))] = draw(fuzz)
    elif kind == "append":
        segments.append(draw(fuzz))
    else:
        segments.append(b"")  # a trailing slash
    return template, segments


@FUZZ
@given(path=paths(), method=st.sampled_from(METHODS), body=json_bytes())
async def test_any_path_and_method_is_answered_without_a_5xx(client, target, path, method, body):
    _, segments = path
    encoded = "/".join(
        quote_from_bytes(s, safe="") if isinstance(s, bytes) else fill(s, target) for s in segments
    )
    response = await send(client, method, "/" + encoded, body=body)
    assert_answered(response)
    await assert_still_readable(client, target)


@FUZZ
@given(message=mcp_messages, content_type=st.sampled_from(CONTENT_TYPES))
async def test_any_mcp_message_is_answered_without_a_5xx(client, target, message, content_type):
    response = await send(client, "POST", "/mcp", body=message, content_type=content_type)
    assert_answered(response)
    await assert_still_readable(client, target)


# Counts a task may report (finite, within a 64-bit float), the huge ones most of all.
valid_counts = st.one_of(
    st.floats(min_value=0, max_value=1.7976931348623157e308),
    st.sampled_from([1e308, 1.7976931348623157e308, 1e22, 1e20, 5e-324]),
    st.integers(min_value=0, max_value=2**70),
)
READS = [
    "/tasks/{t}",
    "/tasks/{t}/estimate",
    "/tasks/{p}/estimate",
    "/spaces/{s}",
    "/spaces/{s}/jobs",
    "/shared/{share}",
    "/shared/{share}/jobs",
    "/shared/{share}/tasks/{id}/estimate",
    "/shared/{share}/tasks/{id}/badge.svg",
    "/shared/{share}/tasks/{id}/shields.json",
    "/shared/{share}/badge.svg",
    "/shared/{share}/embed",
]


@hypothesis_settings(FUZZ, max_examples=40)
@given(
    reports=st.lists(
        st.tuples(valid_counts, st.one_of(st.none(), valid_counts), st.floats(0, 30)),
        min_size=3,
        max_size=5,
    )
)
async def test_counts_up_to_the_largest_float_reported_seconds_apart_leave_every_read_whole(
    client, space, make_task, clock, reports
):
    """However huge `current` and `end`, and however far apart their reports on the
    server's clock, every read of the task, its parent, its space and its share link
    answers, and so does MCP's `get_estimate`: never a 5xx."""
    parent = await make_task(title="Huge")
    task = await make_task(title="Huge step", parent_uuid=parent)
    for current, end, apart_s in reports:
        answer = await client.put(f"/tasks/{task}", json={"current": current, "end": end})
        assert answer.status_code == 200, answer.text
        clock.advance(apart_s)
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    task_id = (await client.get(f"/shared/{share}")).json()["tasks"][-1]["children"][0]["id"]
    target = {"s": space, "t": task, "p": parent, "share": share, "id": task_id}
    for path in READS:
        response = await client.get(fill(path, target))
        assert response.status_code == 200, (path, response.text)
    for tool in ("get_estimate", "get_task"):
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {"task_uuid": parent}},
        }
        response = await send(client, "POST", "/mcp", body=json.dumps(message).encode())
        assert response.status_code == 200 and not response.json()["result"]["isError"]
    assert (await client.delete(f"/spaces/{space}/shares/{share}")).status_code == 204
