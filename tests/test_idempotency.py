"""Safe retries: every create honours an `Idempotency-Key`, on every backend pair (over
ASGI, and over a real server): a retry answers the first answer and creates nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from headway.service.idempotency import KEEP_S

from .live_server import serving

UNKNOWN = "0b7e4b0e-5f43-4a39-9b9e-7a4c1c1e9f00"


@pytest.fixture
def settings(settings):
    """Webhooks and channels registered here point at 127.0.0.1; retries come in bursts."""
    return settings.with_(webhook_allow_private=True, rate_limits=False)


# Each create: its path (below a space, or "" for POST /spaces), a body, another body
# (byte for byte: a share link's only body is `{}`), and the table it writes to.
CREATES = {
    "spaces": ("", b'{"title": "nightly"}', b'{"title": "weekly"}', "spaces"),
    "tasks": ("/tasks", b'{"title": "build"}', b'{"title": "test"}', "tasks"),
    "webhooks": (
        "/webhooks",
        b'{"url": "http://127.0.0.1:9/hook"}',
        b'{"url": "http://127.0.0.1:9/other"}',
        "webhooks",
    ),
    "channels": (
        "/channels",
        b'{"url": "json://127.0.0.1:9/x"}',
        b'{"url": "json://127.0.0.1:9/y"}',
        "channels",
    ),
    "shares": ("/shares", b"{}", b"{ }", "shares"),
}
JSON = {"content-type": "application/json"}


def path_of(kind: str, space: str) -> str:
    suffix = CREATES[kind][0]
    return "/spaces" if not suffix else f"/spaces/{space}{suffix}"


async def count(sql, table: str) -> int:
    return (await sql(f"SELECT count(*) FROM {table}"))[0][0]


def keyed(key: str) -> dict[str, str]:
    return {"idempotency-key": key, **JSON}


@pytest.mark.parametrize("kind", CREATES)
async def test_a_retried_create_answers_the_first_answer_and_creates_nothing(
    client, space, sql, kind
):
    path, body, table = path_of(kind, space), CREATES[kind][1], CREATES[kind][3]
    before = await count(sql, table)
    first = await client.post(path, content=body, headers=keyed("retry-1"))
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    for _ in range(2):
        again = await client.post(path, content=body, headers=keyed("retry-1"))
        assert again.status_code == 201
        assert again.content == first.content  # same uuid (and a webhook's same secret)
        assert again.headers["idempotent-replayed"] == "true"
    assert await count(sql, table) == before + 1
    # Another key, or none, creates again.
    other = await client.post(path, content=body, headers=keyed("retry-2"))
    plain = await client.post(path, content=body, headers=JSON)
    assert len({first.json()["uuid"], other.json()["uuid"], plain.json()["uuid"]}) == 3
    assert await count(sql, table) == before + 3


@pytest.mark.parametrize("kind", CREATES)
async def test_the_same_key_with_another_body_is_422_and_creates_nothing(client, space, sql, kind):
    path, body, other, table = path_of(kind, space), *CREATES[kind][1:]
    assert (await client.post(path, content=body, headers=keyed("k"))).status_code == 201
    before = await count(sql, table)
    refused = await client.post(path, content=other, headers=keyed("k"))
    assert refused.status_code == 422
    assert "Idempotency-Key" in refused.json()["error"]
    assert await count(sql, table) == before


async def test_the_same_key_on_another_endpoint_of_the_space_is_422(client, space, sql):
    made = await client.post(f"/spaces/{space}/tasks", json={}, headers=keyed("k"))
    assert made.status_code == 201
    refused = await client.post(f"/spaces/{space}/shares", json={}, headers=keyed("k"))
    assert refused.status_code == 422 and set(refused.json()) == {"error"}
    assert await count(sql, "shares") == 0


@pytest.mark.parametrize(
    "key",
    [b"x" * 256, b"", b"tab\there", b"nul\x00", b"caf\xc3\xa9", b"bell\x07"],
    ids=["256-characters", "empty", "tab", "nul", "not-ascii", "control"],
)
@pytest.mark.parametrize("kind", ["spaces", "tasks", "shares"])
async def test_a_key_too_long_empty_or_not_printable_is_400(client, space, sql, kind, key):
    path, body, table = path_of(kind, space), CREATES[kind][1], CREATES[kind][3]
    before = await count(sql, table)
    # httpx refuses to send some of these bytes itself: the raw headers go as they are.
    request = client.build_request("POST", path, content=body, headers=JSON)
    request.headers = httpx.Headers([*request.headers.raw, (b"idempotency-key", key)])
    answer = await client.send(request)
    assert answer.status_code == 400, answer.text
    assert set(answer.json()) == {"error"} and "Idempotency-Key" in answer.json()["error"]
    assert await count(sql, table) == before


async def test_a_key_given_twice_is_400(client, space, sql):
    request = client.build_request("POST", f"/spaces/{space}/tasks", json={})
    request.headers = httpx.Headers(
        [*request.headers.raw, (b"idempotency-key", b"a"), (b"idempotency-key", b"a")]
    )
    answer = await client.send(request)
    assert answer.status_code == 400 and "twice" in answer.json()["error"]
    assert await count(sql, "tasks") == 0


async def test_a_key_of_255_printable_characters_spaces_included_is_accepted(client, space):
    key = ("a key with spaces ~!@#$%^&*()" * 10)[:255]
    first = await client.post(f"/spaces/{space}/tasks", json={}, headers=keyed(key))
    again = await client.post(f"/spaces/{space}/tasks", json={}, headers=keyed(key))
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()


async def test_a_key_belongs_to_its_space(client, space, sql):
    other = (await client.post("/spaces", json={})).json()["uuid"]
    one = await client.post(f"/spaces/{space}/tasks", json={}, headers=keyed("k"))
    two = await client.post(f"/spaces/{other}/tasks", json={}, headers=keyed("k"))
    assert one.status_code == two.status_code == 201
    assert one.json()["uuid"] != two.json()["uuid"]
    assert await count(sql, "tasks") == 2


async def test_a_space_create_key_belongs_to_its_client_address(app, sql):
    answers = []
    for address in ("192.0.2.1", "192.0.2.2", "192.0.2.1"):
        transport = httpx.ASGITransport(app=app, client=(address, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as c:
            answers.append(await c.post("/spaces", json={"title": "t"}, headers=keyed("k")))
    assert [a.status_code for a in answers] == [201, 201, 201]
    uuids = [a.json()["uuid"] for a in answers]
    assert uuids[0] == uuids[2] != uuids[1]
    assert await count(sql, "spaces") == 2


async def test_a_key_is_forgotten_a_day_later_and_swept(app, client, space, sql, clock):
    path = f"/spaces/{space}/tasks"
    first = (await client.post(path, json={}, headers=keyed("daily"))).json()
    clock.advance(KEEP_S - 1)
    assert (await client.post(path, json={}, headers=keyed("daily"))).json() == first
    clock.advance(2)
    later = await client.post(path, json={}, headers=keyed("daily"))
    assert later.status_code == 201 and "idempotent-replayed" not in later.headers
    assert later.json() != first
    assert await count(sql, "tasks") == 2
    # A key sent again with another body after a day is a new key.
    assert (await client.post(path, json={"title": "a"}, headers=keyed("k"))).status_code == 201
    clock.advance(KEEP_S + 1)
    assert (await client.post(path, json={"title": "b"}, headers=keyed("k"))).status_code == 201
    assert await count(sql, "idempotency_keys") == 2
    await app.state.sweeper.step()
    assert await count(sql, "idempotency_keys") == 1  # "daily"'s; "k"'s is new
    clock.advance(KEEP_S + 1)
    await app.state.sweeper.step()
    assert await count(sql, "idempotency_keys") == 0


async def test_a_refused_create_records_no_key(app, client, space, sql):
    app.state.service.shares.per_space = 1
    path = f"/spaces/{space}/shares"
    kept = (await client.post(path, json={})).json()
    refused = await client.post(path, json={}, headers=keyed("k"))
    assert refused.status_code == 422 and "1 share" in refused.json()["error"]
    await client.delete(f"{path}/{kept['uuid']}")
    made = await client.post(path, json={}, headers=keyed("k"))
    assert made.status_code == 201 and "idempotent-replayed" not in made.headers
    missing = await client.post(f"/spaces/{UNKNOWN}/tasks", json={}, headers=keyed("k"))
    assert missing.status_code == 404
    assert await count(sql, "idempotency_keys") == 1


@pytest.mark.parametrize("kind", CREATES)
async def test_concurrent_creates_with_one_key_create_one(client, space, sql, kind):
    path, body, table = path_of(kind, space), CREATES[kind][1], CREATES[kind][3]
    before = await count(sql, table)
    answers = await asyncio.gather(
        *(client.post(path, content=body, headers=keyed("at-once")) for _ in range(12))
    )
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.content for a in answers}) == 1
    assert sum("idempotent-replayed" not in a.headers for a in answers) == 1
    assert await count(sql, table) == before + 1


async def test_concurrent_task_creates_with_keys_and_without_share_batches(client, space, sql):
    """Keys in a batch of creates with others: each keyed create once, the rest as ever."""
    path = f"/spaces/{space}/tasks"

    async def create(n: int) -> httpx.Response:
        headers = keyed(f"key-{n % 5}") if n % 2 else {}
        return await client.post(path, json={}, headers=headers)

    answers = await asyncio.gather(*(create(n) for n in range(60)))
    assert {a.status_code for a in answers} == {201}
    keyed_uuids = {n % 5: set() for n in range(60) if n % 2}
    for n, answer in enumerate(answers):
        if n % 2:
            keyed_uuids[n % 5].add(answer.json()["uuid"])
    assert all(len(found) == 1 for found in keyed_uuids.values())
    assert await count(sql, "tasks") == 30 + 5


async def test_deleting_a_space_forgets_its_keys(app, client, space, sql):
    await client.post(f"/spaces/{space}/tasks", json={}, headers=keyed("a"))
    await client.post(f"/spaces/{space}/shares", json={}, headers=keyed("b"))
    made = (await client.post("/spaces", json={}, headers=keyed("c"))).json()
    assert await count(sql, "idempotency_keys") == 3
    assert (await client.delete(f"/spaces/{space}")).status_code == 204
    assert (await client.delete(f"/spaces/{made['uuid']}")).status_code == 204
    # At once: a retry is decided afresh, as if its key had never been sent.
    again = await client.post("/spaces", json={}, headers=keyed("c"))
    assert again.status_code == 201 and again.json()["uuid"] != made["uuid"]
    retried = await client.post(f"/spaces/{space}/tasks", json={}, headers=keyed("a"))
    assert retried.status_code == 404
    await app.state.sweeper.remove()  # and the keys go with the spaces' rows
    assert await sql("SELECT space_uuid FROM idempotency_keys") == [(again.json()["uuid"],)]


async def test_a_replayed_webhook_keeps_its_secret_and_listing_shows_one(client, space):
    body: dict[str, Any] = {"url": "http://127.0.0.1:9/hook"}
    path = f"/spaces/{space}/webhooks"
    first = (await client.post(path, json=body, headers=keyed("w"))).json()
    again = (await client.post(path, json=body, headers=keyed("w"))).json()
    assert again["secret"] == first["secret"]
    listed = (await client.get(path)).json()
    assert listed == [{"uuid": first["uuid"], "url": body["url"], "deliveries": []}]


async def test_a_retried_create_over_a_real_server_creates_one(settings):
    with serving(settings) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await http.post("/spaces", json={"title": "s"}, headers=keyed("s"))
            again = await http.post("/spaces", json={"title": "s"}, headers=keyed("s"))
            assert space.status_code == again.status_code == 201
            assert again.json() == space.json()
            uuid = space.json()["uuid"]
            path = f"/spaces/{uuid}/tasks"
            tasks = await asyncio.gather(
                *(http.post(path, json={"title": "t"}, headers=keyed("t")) for _ in range(8))
            )
            assert len({task.json()["uuid"] for task in tasks}) == 1
            listed = (await http.get(f"/spaces/{uuid}")).json()["tasks"]
            assert [task["uuid"] for task in listed] == [tasks[0].json()["uuid"]]
