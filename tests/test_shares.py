"""Share links: read-only views of a space that reveal no uuid of the space or its tasks,
on every backend (JSON over ASGI; the stream over a real server)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import re
import shutil
import sqlite3
import time
from uuid import UUID as ParsedUUID

import httpx
import pytest

from .live_server import LiveServer, serving
from .test_events import WAIT_S, new_space, new_task, watching

UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def assert_no_uuid(text: str, *uuids: str) -> None:
    """No UUID at all in `text`, in any spelling, and none of `uuids` even without dashes."""
    assert not UUID.search(text), UUID.search(text)
    for uuid in uuids:
        assert uuid.replace("-", "").lower() not in text.replace("-", "").lower()


async def test_share_links_are_created_listed_and_revoked(client, space):
    created = await client.post(f"/spaces/{space}/shares", json={})
    assert created.status_code == 201
    share = created.json()
    assert set(share) == {"uuid", "url", "created_at"}
    assert share["url"] == f"/shared/{share['uuid']}"
    assert share["uuid"] != space
    listed = (await client.get(f"/spaces/{space}/shares")).json()
    assert listed == [share]
    assert (await client.get(share["url"])).status_code == 200
    revoked = await client.delete(f"/spaces/{space}/shares/{share['uuid']}")
    assert revoked.status_code == 204
    gone = await client.get(share["url"])
    assert gone.status_code == 404 and set(gone.json()) == {"error"}
    assert (await client.get(f"/spaces/{space}/shares")).json() == []
    again = await client.delete(f"/spaces/{space}/shares/{share['uuid']}")
    assert again.status_code == 404


async def test_share_refusals_are_json_errors(client, space):
    unknown = "0b7e4b0e-5f43-4a39-9b9e-7a4c1c1e9f00"
    assert (await client.post(f"/spaces/{unknown}/shares", json={})).status_code == 404
    assert (await client.get(f"/spaces/{unknown}/shares")).status_code == 404
    assert (await client.get(f"/shared/{unknown}")).status_code == 404
    assert (await client.get("/shared/not-a-uuid")).status_code == 404
    assert (await client.get(f"/shared/{unknown}/events")).status_code == 404
    assert (await client.delete(f"/spaces/{space}/shares/not-a-uuid")).status_code == 404
    for body in (b'{"title": "x"}', b"[]", b"{", b""):
        answer = await client.post(f"/spaces/{space}/shares", content=body)
        assert answer.status_code == 422, body
        assert set(answer.json()) == {"error"}


async def test_a_space_holds_at_most_its_cap_of_share_links(app, client, space):
    app.state.service.shares.per_space = 2
    for _ in range(2):
        assert (await client.post(f"/spaces/{space}/shares", json={})).status_code == 201
    refused = await client.post(f"/spaces/{space}/shares", json={})
    assert refused.status_code == 422 and "2" in refused.json()["error"]


async def test_a_share_link_reads_the_space_with_opaque_ids_and_no_uuid(client, space):
    parent = (await client.post(f"/spaces/{space}/tasks", json={"title": "build"})).json()
    child = (
        await client.post(
            f"/spaces/{space}/tasks", json={"title": "compile", "parent_uuid": parent["uuid"]}
        )
    ).json()
    await client.put(f"/tasks/{child['uuid']}", json={"current": 1, "end": 3})
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()
    answer = await client.get(share["url"])
    assert answer.headers["vary"] == "Accept"
    assert_no_uuid(answer.text, space, parent["uuid"], child["uuid"])
    for name, value in answer.headers.items():
        assert_no_uuid(f"{name}: {value}")
    shared = answer.json()
    owner = (await client.get(f"/spaces/{space}")).json()
    [task] = shared["tasks"]
    [owned] = owner["tasks"]
    hidden = {"uuid", "space_uuid", "parent_uuid"}
    assert {k: v for k, v in owned.items() if k not in hidden | {"children"}} == {
        k: v for k, v in task.items() if k not in {"id", "parent_id", "children"}
    }
    assert task["parent_id"] is None
    [step] = task["children"]
    assert step["parent_id"] == task["id"]
    assert step["progress"] == owned["children"][0]["progress"]
    # Stable under one link, different under another.
    assert (await client.get(share["url"])).json() == shared
    other = (await client.post(f"/spaces/{space}/shares", json={})).json()
    assert (await client.get(other["url"])).json()["tasks"][0]["id"] != task["id"]
    # The space read's parameters work the same.
    limited = (await client.get(share["url"], params={"limit": 1, "state": "active"})).json()
    assert [t["id"] for t in limited["tasks"]] == [task["id"]]
    assert (await client.get(share["url"], params={"limit": 0})).status_code == 400


async def test_a_share_links_page_names_no_uuid(client, space):
    await client.post(f"/spaces/{space}/tasks", json={"title": "build"})
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()
    page = await client.get(share["url"], headers=BROWSER)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["referrer-policy"] == "no-referrer"
    html = page.text.replace(share["uuid"], "")  # the link itself is the page's address
    assert_no_uuid(html, space)
    missing = await client.get("/shared/0b7e4b0e-5f43-4a39-9b9e-7a4c1c1e9f00", headers=BROWSER)
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")


@pytest.fixture
def base_url(settings):
    with serving(settings.with_(run_worker=False)) as (host, port):
        yield f"http://{host}:{port}"


async def test_a_share_links_stream_shows_the_same_events_without_uuids(app, base_url):
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        task = await new_task(http, space, title="deploy")
        step = await new_task(http, space, title="push", parent_uuid=task)
        share = (await http.post(f"/spaces/{space}/shares", json={})).json()
        async with watching(http, share["url"] + "/events") as watcher:
            snapshot = await watcher.snapshot()
            assert snapshot == (await http.get(share["url"])).json()
            [top] = snapshot["tasks"]
            await http.put(f"/tasks/{step}", json={"current": 2, "end": 4, "values": {"log": "a"}})
            child, parent = await watcher.task_events(2)
            assert child["parent_id"] == top["id"] and child["progress"]["current"] == 2
            assert parent["id"] == top["id"] and parent["parent_id"] is None
            for event in (child, parent):
                assert_no_uuid(str(event), space, task, step)
            assert set(child) == set(top)


async def test_revoking_a_share_link_ends_its_open_streams(base_url):
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        share = (await http.post(f"/spaces/{space}/shares", json={})).json()
        kept = (await http.post(f"/spaces/{space}/shares", json={})).json()
        async with (
            watching(http, share["url"] + "/events") as revoked,
            watching(http, kept["url"] + "/events") as other,
            watching(http, f"/spaces/{space}/events") as owner,
        ):
            for watcher in (revoked, other, owner):
                await watcher.snapshot()
            await http.delete(f"/spaces/{space}/shares/{share['uuid']}")
            await asyncio.wait_for(revoked.ended.wait(), WAIT_S)
            assert not other.ended.is_set() and not owner.ended.is_set()
        assert (await http.get(share["url"] + "/events")).status_code == 404


async def test_a_link_spelled_in_capitals_shows_the_same_and_is_revoked_all_the_same(base_url):
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        await new_task(http, space, title="x")
        share = (await http.post(f"/spaces/{space}/shares", json={})).json()
        shouted = f"/shared/{share['uuid'].upper()}"
        assert (await http.get(shouted)).json() == (await http.get(share["url"])).json()
        async with watching(http, shouted + "/events") as watcher:
            snapshot = await watcher.snapshot()
            assert snapshot == (await http.get(share["url"])).json()
            await http.delete(f"/spaces/{space}/shares/{share['uuid']}")
            await asyncio.wait_for(watcher.ended.wait(), WAIT_S)


async def _behind_the_feeds_back(settings, sql: str, *params: str) -> None:
    """A write made as another instance with no change feed in common makes it (several
    instances without Redis): in the database, announced to no one."""
    from headway.storage.database import Database

    db = Database(settings.database_url)
    try:
        async with db.write() as st:
            await st.rows(sql, params)
    finally:
        await db.close()


async def test_a_revocation_no_feed_announced_ends_its_streams(settings, base_url):
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        await new_task(http, space, title="quiet")
        share = (await http.post(f"/spaces/{space}/shares", json={})).json()
        async with (
            watching(http, share["url"] + "/events") as revoked,
            watching(http, f"/spaces/{space}/events") as owner,
        ):
            for watcher in (revoked, owner):
                await watcher.snapshot()
            await _behind_the_feeds_back(
                settings, "DELETE FROM shares WHERE uuid = ?", share["uuid"]
            )
            await asyncio.wait_for(revoked.ended.wait(), WAIT_S)
            assert not owner.ended.is_set()


async def test_a_space_deleted_where_no_feed_announced_it_ends_every_stream(settings, base_url):
    from headway.storage import deletes

    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        space = await new_space(http)
        await new_task(http, space, title="quiet")
        share = (await http.post(f"/spaces/{space}/shares", json={})).json()
        async with (
            watching(http, share["url"] + "/events") as shared,
            watching(http, f"/spaces/{space}/events") as owner,
        ):
            for watcher in (shared, owner):
                await watcher.snapshot()
            from headway.storage.database import Database

            db = Database(settings.database_url)
            try:
                async with db.write() as st:
                    await deletes.delete_space(st, space, time.time_ns() // 1000)
            finally:
                await db.close()
            for watcher in (shared, owner):
                await asyncio.wait_for(watcher.ended.wait(), WAIT_S)
        assert (await http.get(share["url"] + "/events")).status_code == 404


def _shared(server: LiveServer, share: dict) -> dict:
    answer = httpx.get(server.url + share["url"], timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_task_ids_are_stable_across_restarts_and_keyed_by_the_servers_secret(tmp_path):
    """A real `headway serve` restarted on its database shows the same ids; a copy of that
    database whose secret was never made (another server) shows others; and the link
    with a task's uuid is not enough to make its id."""
    first_dir, copy_dir = tmp_path / "first", tmp_path / "copy"
    first_dir.mkdir()
    copy_dir.mkdir()
    server = LiveServer(first_dir, HEADWAY_DATABASE_URL=f"sqlite:///{first_dir}/headway.db")
    with server:
        space = server.new_space()
        task = httpx.post(f"{server.url}/spaces/{space}/tasks", json={"title": "t"}).json()
        share = httpx.post(f"{server.url}/spaces/{space}/shares", json={}).json()
        shown = _shared(server, share)
    [shown_task] = shown["tasks"]
    link_only = hmac.new(ParsedUUID(share["uuid"]).bytes, task["uuid"].encode(), "sha256")
    assert shown_task["id"] != base64.urlsafe_b64encode(link_only.digest()[:16]).rstrip(b"=")
    assert shown_task["id"] != link_only.hexdigest()[:32]
    with server:  # restarted on the same database
        assert _shared(server, share) == shown
    for name in ("headway.db", "headway.db-wal"):
        if (first_dir / name).exists():
            shutil.copy(first_dir / name, copy_dir / name)
    with contextlib.closing(sqlite3.connect(copy_dir / "headway.db")) as copied, copied:
        copied.execute("DELETE FROM secrets")
    other = LiveServer(copy_dir, HEADWAY_DATABASE_URL=f"sqlite:///{copy_dir}/headway.db")
    with other:
        elsewhere = _shared(other, share)
    [other_task] = elsewhere["tasks"]
    assert other_task["id"] != shown_task["id"]
    assert {k: v for k, v in other_task.items() if k != "id"} == {
        k: v for k, v in shown_task.items() if k != "id"
    }
