"""Big answers are sent a piece at a time: byte-identical to the whole answer, and a
client that stops reading holds a bounded amount of the server's memory."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import msgspec
import pytest

from headway.config import Settings
from headway.service import SPACE_PAGE

from .live_server import LiveServer

BIG_VALUES = {f"k{i:02d}": "v" * 1000 for i in range(60)}  # about 61 KB of values


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The shared settings, with progress kept a day as by default (not the suite's 60 s):
    Redis expires a key in its own real time, and beside a busy core filling a big space
    takes longer than 60 s, so its first reports would expire before the last read."""
    return settings.with_(progress_ttl=86_400)


async def fill_space(client: httpx.AsyncClient, space: str, count: int) -> list[str]:
    """`count` top-level tasks; every third a parent of two children; some finished."""
    tasks = []
    for i in range(count):
        task = (await client.post(f"/spaces/{space}/tasks", json={"title": f"t{i}"})).json()
        tasks.append(task["uuid"])
        if i % 3 == 0:
            for j in range(2):
                child = await client.post(
                    f"/spaces/{space}/tasks", json={"title": f"c{j}", "parent_uuid": task["uuid"]}
                )
                await client.put(f"/tasks/{child.json()['uuid']}", json={"current": j, "end": 2})
        elif i % 3 == 1:
            await client.put(f"/tasks/{task['uuid']}", json={"done": True})
        else:
            values = {"log": f"step {i}", "n": i}
            await client.put(f"/tasks/{task['uuid']}", json={"current": i, "values": values})
    return tasks


async def test_a_big_space_read_is_streamed_and_byte_identical(app, client, space):
    await fill_space(client, space, SPACE_PAGE * 2 + 17)
    service = app.state.service
    everything = (await client.get(f"/spaces/{space}")).json()["tasks"]
    newest = everything[-1]["created_at"]
    middle = everything[SPACE_PAGE]["created_at"]
    queries = [
        {},
        {"limit": "250"},
        {"limit": "1000"},
        {"before": newest},
        {"before": newest, "limit": "300"},
        {"after": everything[3]["created_at"]},
        {"after": everything[3]["created_at"], "before": middle, "limit": "150"},
        {"state": "finished"},
        {"state": "active", "limit": "210"},
    ]
    for params in queries:
        response = await client.get(f"/spaces/{space}", params=params)
        assert response.status_code == 200
        whole = msgspec.json.encode(await service.reads.get(space, **params))
        assert response.content == whole, params
        if len(whole) > 64 * 1024:
            assert "content-length" not in response.headers, params
    assert len(everything) == SPACE_PAGE * 2 + 17
    stamps = [task["created_at"] for task in everything]
    assert stamps == sorted(stamps)
    paged = (await client.get(f"/spaces/{space}", params={"before": newest})).json()["tasks"]
    assert [t["uuid"] for t in paged] == [t["uuid"] for t in reversed(everything[:-1])]
    small = await client.get(f"/spaces/{space}", params={"limit": "2"})
    assert int(small.headers["content-length"]) == len(small.content)


async def test_a_big_family_is_streamed_and_byte_identical(app, client, make_task):
    parent = await make_task(title="big")
    for _ in range(40):
        child = await make_task(parent_uuid=parent)
        await client.put(f"/tasks/{child}", json={"current": 1, "values": BIG_VALUES})
    whole = msgspec.json.encode(await app.state.service.tasks.get(parent))
    assert len(whole) > 2_000_000
    response = await client.get(f"/tasks/{parent}")
    assert response.content == whole
    assert "content-length" not in response.headers
    # A report to the parent answers the family the same way.
    report = await client.put(f"/tasks/{parent}", json={"values": {"log": "x"}})
    assert report.json()["progress"]["end"] == 40 and len(report.json()["children"]) == 40


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_clients_that_never_read_a_big_answer_hold_bounded_memory(tmp_path):
    sockets: list[socket.socket] = []
    with LiveServer(tmp_path, HEADWAY_RATE_LIMITS="false") as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            space = http.post("/spaces", json={}).json()["uuid"]
            parent = http.post(f"/spaces/{space}/tasks", json={}).json()["uuid"]
            for _ in range(150):
                child = http.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
                http.put(f"/tasks/{child.json()['uuid']}", json={"values": BIG_VALUES})
            size = len(http.get(f"/tasks/{parent}").content)
            assert size > 9_000_000
        before = rss_kib(server.pid)
        request = f"GET /tasks/{parent} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        try:
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", server.port))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(request)
                sockets.append(sock)
            time.sleep(2)  # the server writes what the sockets take, then waits
            grown_kib = rss_kib(server.pid) - before
            # Whole answers would be 8 x 9 MB; pieces in flight are a few hundred KB each.
            assert grown_kib < 24 * 1024, f"RSS grew {grown_kib} KiB"
            # The server still answers others meanwhile.
            assert httpx.get(f"{server.url}/up", timeout=5).status_code == 200
        finally:
            for sock in sockets:
                sock.close()
