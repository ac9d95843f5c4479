"""What an anonymous client sends cannot freeze or exhaust the server: the real server of
`headway serve` (`headway.api.server`), on a real socket, with short limits.

Also the headers every answer carries (nosniff, CORS on REST but not /mcp), and a
keep-alive connection that outlives an unexpected error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from headway.api.server import MAX_HEAD, MAX_REQUEST_TARGET
from headway.app import create_app
from headway.config import Settings
from headway.service.spaces import Spaces
from headway.service.tasks import Tasks

from .live_server import serving

Address = tuple[str, int]


@pytest.fixture
def limited(tmp_path: Path) -> Settings:
    """SQLite in tmp_path, and limits short enough for a test to reach them."""
    return Settings(
        database_url=f"sqlite:///{tmp_path}/headway.db",
        run_worker=False,
        webhook_allow_private=True,
        header_timeout=1,
        body_timeout=1,
        max_connections=5,
    )


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers["content-type"] == "application/json"
        return json.loads(self.body)


class Connection:
    """One raw client connection: bytes out exactly as given, answers read one by one."""

    def __init__(self, address: Address) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """Send; False once the server has closed the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def answered(self, timeout: float) -> bool:
        return bool(select.select([self.sock], [], [], timeout)[0])

    def request(self, method: str, path: str, body: bytes = b"") -> Answer:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.send(head.encode() + b"\r\n" + body)
        return self.answer()

    def answer(self) -> Answer:
        status_line = self.reader.readline()
        assert status_line.startswith(b"HTTP/1.1 "), status_line
        headers = {}
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = self.reader.read(int(headers.get("content-length", "0")))
        return Answer(int(status_line.split()[1]), headers, body)

    def closed_by_server(self) -> bool:
        try:
            return self.reader.read(1) == b""
        except ConnectionResetError:
            return True


@contextlib.contextmanager
def connection(address: Address) -> Iterator[Connection]:
    conn = Connection(address)
    try:
        yield conn
    finally:
        conn.close()


def assert_refusal(answer: Answer, status: int) -> None:
    assert answer.status == status
    assert answer.json()["error"]
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["connection"] == "close"


# --- Huge and slow requests ------------------------------------------------------------


def test_a_huge_header_is_refused_431_at_once_while_others_are_served(limited):
    with serving(limited) as address, connection(address) as big, connection(address) as other:
        big.send(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        for _ in range(16):  # 1 MiB, unless refused on the way
            if not big.send(b"a" * 65_536):
                break
            assert other.request("GET", "/up").status == 200
        big.send(b"\r\n\r\n")
        assert big.answered(timeout=10)
        answer = big.answer()
        assert_refusal(answer, 431)
        assert str(MAX_HEAD) in answer.json()["error"]
        assert other.request("GET", "/up").status == 200


def test_a_long_url_is_refused_431(limited):
    with serving(limited) as address, connection(address) as conn:
        answer = conn.request("GET", "/up?pad=" + "a" * MAX_REQUEST_TARGET)
        assert_refusal(answer, 431)
        assert str(MAX_REQUEST_TARGET) in answer.json()["error"]


def test_a_header_trickled_byte_by_byte_is_cut_off_408(limited):
    with serving(limited) as address, connection(address) as conn:
        conn.send(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        trickle = b"X-Slow: " + b"a" * 92  # one byte every 0.3 s, for at most 30 s
        sent = 0
        for byte in trickle:
            if conn.answered(timeout=0.3) or not conn.send(bytes([byte])):
                break
            sent += 1
        waited = time.monotonic() - started
        assert conn.answered(timeout=0)
        assert_refusal(conn.answer(), 408)
        # Cut off in the middle, at its header_timeout of 1 s (a busy machine can make the
        # cut late, never early).
        assert sent < len(trickle) and waited >= 0.9
        assert conn.closed_by_server()


def test_a_body_trickled_slowly_is_cut_off_408(limited):
    body = json.dumps({"title": "slow" * 20}).encode()
    with serving(limited) as address, connection(address) as conn:
        conn.send(
            b"POST /spaces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        started = time.monotonic()
        sent = 0
        for byte in body[:-1]:  # one byte every 0.3 s, for at most 30 s
            if conn.answered(timeout=0.3) or not conn.send(bytes([byte])):
                break
            sent += 1
        waited = time.monotonic() - started
        assert conn.answered(timeout=0)
        assert_refusal(conn.answer(), 408)
        # Cut off in the middle, at its body_timeout of 1 s (late on a busy machine, never
        # early).
        assert sent < len(body) - 1 and waited >= 0.9
        assert conn.closed_by_server()


def test_connections_beyond_max_connections_are_shed_503_and_the_others_served(limited):
    with serving(limited) as address, contextlib.ExitStack() as stack:
        held = [stack.enter_context(connection(address)) for _ in range(5)]
        for conn in held:
            assert conn.request("GET", "/up").status == 200

        with connection(address) as extra:
            answer = extra.request("GET", "/up")
            assert_refusal(answer, 503)
            assert answer.headers["retry-after"] == "1"
            assert extra.closed_by_server()

        for conn in held:  # still kept alive and served
            assert conn.request("GET", "/up").status == 200

        held.pop().close()  # a place frees up (the server sees it close when it next runs)
        deadline = time.monotonic() + 20
        while True:
            with connection(address) as again:
                if again.request("GET", "/up").status == 200:
                    break
            assert time.monotonic() < deadline, "a freed place was never given again"
            time.sleep(0.05)


# --- Headers every answer carries ----------------------------------------------------------


def _space_task_webhook(client: httpx.Client) -> tuple[str, str, str]:
    space = client.post("/spaces", json={"title": "headers"}).json()["uuid"]
    task = client.post(f"/spaces/{space}/tasks", json={"title": "t"}).json()["uuid"]
    hook = client.post(f"/spaces/{space}/webhooks", json={"url": "http://127.0.0.1:9/h"})
    return space, task, hook.json()["uuid"]


MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


def test_every_kind_of_answer_says_nosniff(limited):
    with serving(limited) as (host, port), httpx.Client(base_url=f"http://{host}:{port}") as c:
        space, task, hook = _space_task_webhook(c)
        answers = {
            "health": c.get("/up"),
            "openapi": c.get("/openapi.json"),
            "created": c.post("/spaces", json={"title": "x"}),
            "space": c.get(f"/spaces/{space}"),
            "task read (fast path)": c.get(f"/tasks/{task}"),
            "report (fast path)": c.put(f"/tasks/{task}", json={"current": 1, "end": 2}),
            "bad report (fast path)": c.put(f"/tasks/{task}", content=b"{"),
            "unknown task (fast path)": c.get(f"/tasks/{uuid.uuid4()}"),
            "create (fast path)": c.post(f"/spaces/{space}/tasks", json={}),
            "bad create (fast path)": c.post(f"/spaces/{space}/tasks", content=b"{"),
            "create, unknown space (fast path)": c.post(f"/spaces/{uuid.uuid4()}/tasks", json={}),
            "report by URL (fast path)": c.get(f"/tasks/{task}/report", params={"current": 1}),
            "bad report by URL (fast path)": c.get(f"/tasks/{task}/report", params={"x": 1}),
            "unknown path": c.get("/nope"),
            "wrong method": c.delete("/spaces"),
            "no content": c.delete(f"/spaces/{space}/webhooks/{hook}"),
            "task deleted": c.delete(
                f"/tasks/{c.post(f'/spaces/{space}/tasks', json={}).json()['uuid']}"
            ),
            "preflight": c.options(f"/spaces/{space}", headers={"origin": "https://a.example"}),
            "mcp": c.post("/mcp", json=MCP_INITIALIZE, headers=MCP_ACCEPT),
            "mcp wrong method": c.get("/mcp"),
        }
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {
        "health": 200,
        "openapi": 200,
        "created": 201,
        "space": 200,
        "task read (fast path)": 200,
        "report (fast path)": 200,
        "bad report (fast path)": 400,
        "unknown task (fast path)": 404,
        "create (fast path)": 201,
        "bad create (fast path)": 422,
        "create, unknown space (fast path)": 404,
        "report by URL (fast path)": 200,
        "bad report by URL (fast path)": 400,
        "unknown path": 404,
        "wrong method": 405,
        "no content": 204,
        "task deleted": 204,
        "preflight": 204,
        "mcp": 200,
        "mcp wrong method": 405,
    }
    for name, answer in answers.items():
        assert answer.headers.get("x-content-type-options") == "nosniff", name
        assert len(answer.headers.get_list("x-content-type-options")) == 1, name


def test_rest_answers_any_origin_and_mcp_none(limited):
    origin = {"origin": "https://page.example"}
    with serving(limited) as (host, port), httpx.Client(base_url=f"http://{host}:{port}") as c:
        space, task, _ = _space_task_webhook(c)
        preflight = c.options(
            f"/spaces/{space}/tasks",
            headers={
                **origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type, x-trace",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "*"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert preflight.headers["access-control-allow-headers"] == "content-type, x-trace"
        assert int(preflight.headers["access-control-max-age"]) > 0

        task_preflight = c.options(
            f"/tasks/{task}", headers={**origin, "access-control-request-method": "PUT"}
        )
        assert task_preflight.status_code == 204
        methods = task_preflight.headers["access-control-allow-methods"].split(", ")
        assert {"GET", "PUT"} <= set(methods)
        assert task_preflight.headers["access-control-allow-headers"] == "content-type"

        for answer in (
            c.get(f"/spaces/{space}", headers=origin),
            c.put(f"/tasks/{task}", json={"current": 1}, headers=origin),
            c.get(f"/tasks/{task}", headers=origin),
            c.post(f"/spaces/{space}/tasks", json={"title": "u"}, headers=origin),
            c.get("/nope", headers=origin),
            c.get("/up", headers=origin),
        ):
            assert answer.headers["access-control-allow-origin"] == "*", answer.request.url

        mcp = [
            c.post("/mcp", json=MCP_INITIALIZE, headers=MCP_ACCEPT),
            c.post("/mcp", json=MCP_INITIALIZE, headers={**MCP_ACCEPT, **origin}),
            c.options(
                "/mcp",
                headers={
                    **origin,
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "content-type",
                },
            ),
        ]
    assert [answer.status_code for answer in mcp] == [200, 403, 405]
    for answer in mcp:
        assert not [name for name in answer.headers if name.startswith("access-control-")]


# --- Unexpected errors -----------------------------------------------------------------


def test_a_keep_alive_connection_outlives_an_unexpected_error(limited, monkeypatch, caplog):
    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Spaces, "create", broken)  # POST /spaces: the router
    monkeypatch.setattr(Tasks, "get", broken)  # GET /tasks/{uuid}: the fast path
    caplog.set_level(logging.ERROR, logger="headway")
    requests = [("POST", "/spaces", b'{"title": "t"}'), ("GET", f"/tasks/{uuid.uuid4()}", b"")]
    with serving(limited, app=create_app(limited)) as address, connection(address) as conn:
        for method, path, body in requests:
            answer = conn.request(method, path, body)
            assert answer.status == 500
            assert answer.json() == {"error": "Internal error; it has been logged."}
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert "connection" not in answer.headers
        assert conn.request("GET", "/up").status == 200  # the same connection
    logged = [r for r in caplog.records if r.name == "headway" and r.exc_info]
    assert [r.exc_info[1].args for r in logged] == [("a bug",), ("a bug",)]
