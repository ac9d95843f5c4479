"""Input no well-behaved client sends: each refused with a JSON error, nothing stored, and
the task, its parent and its space still readable afterwards (CONTRACT, "Bad input")."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
import msgspec
import pytest

from headway.delivery import webhooks
from headway.domain import tasks as domain
from headway.domain.tasks import Progress, TaskRow
from tests.support import stored_counts

HUGE = "1" + "0" * 400  # a whole number far beyond a 64-bit float
JSON = {"content-type": "application/json"}
MCP = {"accept": "application/json, text/event-stream", "host": "127.0.0.1"}


class Family:
    """A space with a parent task and its child, the child holding a report, and a way to
    check that a refused request changed none of it."""

    def __init__(self, client: httpx.AsyncClient, sql: Any, space: str) -> None:
        self.client, self.sql, self.space = client, sql, space
        self.parent = self.child = ""
        self.reads: dict[str, Any] = {}
        self.counts: dict[str, int] = {}

    async def build(self, make_task: Any) -> Family:
        self.parent = await make_task(title="parent")
        self.child = await make_task(title="child", parent_uuid=self.parent)
        report = {"current": 1, "end": 4, "values": {"log": "working"}}
        assert (await self.client.put(f"/tasks/{self.child}", json=report)).status_code == 200
        self.reads = await self.read()
        self.counts = await stored_counts(self.sql)
        return self

    async def read(self) -> dict[str, Any]:
        reads = {}
        for path in (f"/tasks/{self.child}", f"/tasks/{self.parent}", f"/spaces/{self.space}"):
            response = await self.client.get(path)
            assert response.status_code == 200, (path, response.text)
            reads[path] = response.json()
        hooks = await self.client.get(f"/spaces/{self.space}/webhooks")
        assert hooks.status_code == 200, hooks.text
        reads["webhooks"] = hooks.json()
        return reads

    async def assert_refused(self, response: httpx.Response, status: int) -> str:
        """`response` is the JSON error `status`, and nothing stored has changed."""
        request = f"{response.request.method} {response.request.url}"
        assert response.status_code == status, (request, response.status_code, response.text)
        assert response.headers["content-type"].startswith("application/json"), request
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
        assert await stored_counts(self.sql) == self.counts, request
        assert await self.read() == self.reads, request
        return body["error"]


@pytest.fixture
async def family(client, sql, space, make_task) -> Family:
    return await Family(client, sql, space).build(make_task)


async def put_raw(client: httpx.AsyncClient, path: str, body: bytes) -> httpx.Response:
    return await client.put(path, content=body, headers=JSON)


async def post_raw(client: httpx.AsyncClient, path: str, body: bytes) -> httpx.Response:
    return await client.post(path, content=body, headers=JSON)


# --- 1. Numbers beyond a 64-bit float ---------------------------------------------------------


async def test_a_count_beyond_a_64_bit_float_is_400_and_stores_nothing(client, family):
    task = f"/tasks/{family.child}"
    for body in (
        b'{"current": 0.5, "end": ' + HUGE.encode() + b"}",
        b'{"current": ' + HUGE.encode() + b', "end": 10}',
        b'{"current": %s, "end": %s}' % (HUGE.encode(), HUGE.encode()),
        b'{"current": 1.7976931348623157e308, "end": 179769313486231580' + b"0" * 292 + b"}",
    ):
        message = await family.assert_refused(await put_raw(client, task, body), 400)
        assert "64-bit" in message
    for params in ({"current": "0.5", "end": HUGE}, {"current": HUGE}, {"end": HUGE}):
        response = await client.get(f"{task}/report", params=params)
        assert "64-bit" in await family.assert_refused(response, 400)
    # The parent's own report is ignored but decoded the same way.
    parent = await put_raw(client, f"/tasks/{family.parent}", b'{"end": ' + HUGE.encode() + b"}")
    await family.assert_refused(parent, 400)
    # The largest float itself is a number like any other.
    largest = await client.put(task, json={"current": 1.0, "end": 1.7976931348623157e308})
    assert largest.status_code == 200
    assert largest.json()["progress"]["ratio"] < 1e-300


async def test_mcp_report_progress_refuses_a_count_beyond_a_64_bit_float(client, family):
    arguments = f'{{"task_uuid": "{family.child}", "current": 0.5, "end": {HUGE}}}'
    message = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
        f'{{"name": "report_progress", "arguments": {arguments}}}}}'
    )
    response = await client.post("/mcp", content=message.encode(), headers={**MCP, **JSON})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    assert "64-bit" in result["content"][0]["text"]
    assert await family.read() == family.reads


async def test_mcp_refuses_a_body_that_is_not_utf_8(client, family):
    arguments = f'{{"task_uuid": "{family.child}", "values": {{"log": "\xc3\x28"}}}}'
    message = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
        f'{{"name": "report_progress", "arguments": {arguments}}}}}'
    )
    body = message.encode("latin-1")  # the raw bytes C3 28: not UTF-8
    response = await client.post("/mcp", content=body, headers={**MCP, **JSON})
    assert "UTF-8" in await family.assert_refused(response, 400)


STORED_NUMBERS = {
    "huge-end": (0.5, 10**400),
    "huge-current": (10**400, 3),
    "both-huge": (10**400, 10**400),
    "huge-over-fraction": (10**400, 0.5),
    "nan-current": (float("nan"), 1),
    "nan-end": (1, float("nan")),
    "infinities": (float("inf"), float("inf")),
    "float-overflow": (1e308, 1e-308),
    "negative-huge": (-(10**400), 10**401),
    "negative-zero-end": (1, -0.0),
}


@pytest.mark.parametrize(("current", "end"), STORED_NUMBERS.values(), ids=STORED_NUMBERS.keys())
def test_ratio_and_aggregation_never_raise_whatever_is_stored(current, end):
    ratio = domain.ratio(current, end, finished=False)
    assert ratio is None or 0 <= ratio <= 1
    assert domain.ratio(current, end, finished=True) == 1
    parent = TaskRow("p", "s", None, None, None, 1)
    child = TaskRow("c", "s", "p", None, None, 2)
    stored = Progress(current, end, msgspec.Raw(b"{}"), 3)
    view = domain.view(parent, None, [(child, stored)])
    assert view.progress is not None and view.progress.aggregated is True
    assert view.children[0].progress.ratio == ratio
    domain.apply_report(None, domain.Report(current=current, end=end), 4, is_parent=False)


# --- 2. Bytes that are not UTF-8, and lone surrogates ------------------------------------------


async def test_text_that_is_not_utf_8_or_holds_a_lone_surrogate_is_refused(client, family):
    space, task = family.space, family.child
    creates = {"/spaces": b"title", f"/spaces/{space}/tasks": b"source"}
    creates[f"/spaces/{space}/webhooks"] = b"url"
    # Each body with what its refusal must name: bytes that are not UTF-8, or an escape of
    # a lone surrogate (valid JSON syntax, but no character: PostgreSQL cannot store it).
    creates_refused = (
        (b'{"%s": "\xc3\x28"}', "UTF-8"),
        (b'{"%s": "http://example.com/\xff"}', "UTF-8"),
        (b'{"%s": "\xed\xa0\x80"}', "UTF-8"),  # a surrogate encoded like a character
        (b'{"%s": "\\ud800"}', "surrogate"),
        (b'{"%s": "a\\udc00b"}', "surrogate"),
        (b'{"%s": "\\udc00\\ud800"}', "surrogate"),
        (b'{"\xff": 1, "%s": "a"}', "UTF-8"),
    )
    for path, member in creates.items():
        for body, named in creates_refused:
            response = await post_raw(client, path, body % member)
            message = await family.assert_refused(response, 422)
            assert named in message, (path, body)
    reports_refused = (
        (b'{"values": {"log": "\xc3\x28"}}', "UTF-8"),
        (b'{"values": {"\xc3\x28": 1}}', "UTF-8"),
        (b'{"current": 1, "values": {"log": "\\ud800"}}', "surrogate"),
        (b'{"values": {"\\udfff": "x"}}', "surrogate"),
    )
    for body, named in reports_refused:
        for path in (f"/tasks/{task}", f"/tasks/{family.parent}"):
            message = await family.assert_refused(await put_raw(client, path, body), 400)
            assert named in message, (path, body)
    for query in (
        "values[log]=%C3%28",
        "values[log]=ok&values[x]=%FF",
        "values[%C3%28]=1",
        "current=1&values[log]=%ED%A0%80",
        "done=true%80",
    ):
        response = await client.get(f"/tasks/{task}/report?{query}")
        assert "UTF-8" in await family.assert_refused(response, 400)
    for query in ("state=%FF", "limit=1&note=%C3%28", "before=%ED%A0%80"):
        response = await client.get(f"/spaces/{space}?{query}")
        assert "UTF-8" in await family.assert_refused(response, 400)


# --- 3. Repeated query parameters --------------------------------------------------------------


async def test_a_repeated_query_parameter_is_400_naming_it(client, family):
    task = f"/tasks/{family.child}/report"
    for query, name in (
        ("current=1&current=5", "current"),
        ("current=1&end=4&end=2", "end"),
        ("done=true&done=false", "done"),
        ("values[a]=1&values[a]=2", "values[a]"),
        ("values[log]=x&current=2&values%5Blog%5D=y", "values[log]"),
    ):
        message = await family.assert_refused(await client.get(f"{task}?{query}"), 400)
        assert name in message
    for query, name in (
        ("limit=1&limit=2", "limit"),
        ("state=active&state=finished", "state"),
        ("before=2026-01-01T00:00:00Z&before=2027-01-01T00:00:00Z", "before"),
        ("after=2026-01-01T00:00:00Z&after=2026-01-01T00:00:00Z", "after"),
    ):
        response = await client.get(f"/spaces/{family.space}?{query}")
        assert name in await family.assert_refused(response, 400)


# --- 4. Trailing slashes -----------------------------------------------------------------------


async def test_a_trailing_slash_is_a_json_404_never_a_redirect(client, family):
    space, task = family.space, family.child
    for method, path in (
        ("GET", "/spaces/"),
        ("POST", "/spaces/"),
        ("GET", f"/spaces/{space}/"),
        ("POST", f"/spaces/{space}/tasks/"),
        ("POST", f"/spaces/{space}/webhooks/"),
        ("GET", f"/tasks/{task}/"),
        ("PUT", f"/tasks/{task}/"),
        ("GET", f"/tasks/{task}/report/?current=2"),
        ("GET", "/up/"),
        ("GET", "/openapi.json/"),
    ):
        response = await client.request(method, path, json={"current": 2})
        assert "location" not in response.headers, path
        assert "openapi" in await family.assert_refused(response, 404)


# --- 5. Webhook URLs ---------------------------------------------------------------------------

REFUSED_URLS = [
    "http://a..com/",
    "http://.example.com/",
    "http://" + "a" * 64 + ".example.com/",
    "http://" + "a." * 127 + "com/",
    "http://xn--a.example.com/",
    "http://xn--zz.example.com/",
    "http://-a-.example.com/",
    "http://a%00b.example.com/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[2002:c0a8:101::1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[64:ff9b:1::a00:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[::127.0.0.1]/",
    "http://[::a9fe:a9fe]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    "http://[2001::7f00:1]/",
]


async def test_a_webhook_url_with_an_invalid_name_or_a_refused_embedded_address_is_422(
    client, family
):
    for url in REFUSED_URLS:
        response = await client.post(f"/spaces/{family.space}/webhooks", json={"url": url})
        assert "url" in await family.assert_refused(response, 422)


@pytest.mark.parametrize(
    "address",
    [
        "2002:7f00:1::",
        "2002:a9fe:a9fe::",
        "2002:a00:1::1",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::808:808",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::127.0.0.1",
        "::8.8.8.8",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "2001::",
    ],
)
def test_is_public_refuses_every_ipv6_encoding_of_an_ipv4_address(address):
    assert not webhooks.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "fec0::1",  # site-local, deprecated
        "feff::1",
        "3fff::1",  # documentation
        "3fff:fff::1",
        "192.88.99.1",  # 6to4 relay anycast, deprecated
        "::ffff:192.88.99.1",
        "2002:c058:6301::",  # 6to4 through that relay
        "2606:4700:4700::1111%eth0",  # a global address with a zone id
        "2606:4700:4700::1111%1",
        "64:ff9b::808:808%0",
    ],
)
def test_is_public_refuses_deprecated_and_reserved_ranges_and_zone_ids(address):
    assert not webhooks.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"],
)
def test_is_public_accepts_public_addresses(address):
    assert webhooks.is_public(ipaddress.ip_address(address))
