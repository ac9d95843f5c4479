"""The real `headway serve` command, as a user runs it with nothing configured."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

STARTUP_SECONDS = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def headway_command() -> list[str]:
    script = Path(sys.executable).with_name("headway")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "headway.cli"]


def start_serve(
    cwd: Path, stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE, **env: str
) -> subprocess.Popen[str]:
    """`headway serve` in `cwd`, with no HEADWAY_ variable of this process but `env`'s
    (given without their HEADWAY_ prefix, e.g. PORT="8001")."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("HEADWAY_")}
    clean.update({f"HEADWAY_{name}": value for name, value in env.items()})
    return subprocess.Popen(
        [*headway_command(), "serve"], cwd=cwd, env=clean, stdout=stdout, stderr=stderr, text=True
    )


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "headway serve printed nothing"
    return proc.stdout.readline()


def wait_until_up(proc: subprocess.Popen[str], base_url: str) -> httpx.Response:
    """Poll GET /up until the server answers; waiting on the process between tries also
    notices a server that exited."""
    for _ in range(STARTUP_SECONDS * 20):
        try:
            return httpx.get(f"{base_url}/up", timeout=5)
        except httpx.TransportError:
            try:
                code = proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"headway serve exited with {code}")
    pytest.fail("headway serve did not answer in time")


def test_serve_with_nothing_configured_runs_the_embedded_default(tmp_path):
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    proc = start_serve(tmp_path, PORT=str(port))
    try:
        line = read_line(proc, STARTUP_SECONDS)
        assert base_url in line

        health = wait_until_up(proc, base_url)
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        assert (tmp_path / "headway.db").is_file()

        with httpx.Client(base_url=base_url, timeout=10) as client:
            space = client.post("/spaces", json={"title": "real", "icon": "🇫🇷"})
            assert space.status_code == 201
            space_uuid = space.json()["uuid"]
            task = client.post(f"/spaces/{space_uuid}/tasks", json={"title": "copy"})
            assert task.status_code == 201
            task_uuid = task.json()["uuid"]
            report = client.put(f"/tasks/{task_uuid}", json={"current": 1, "end": 4})
            assert report.status_code == 200
            assert report.json()["progress"]["ratio"] == 0.25
            done = client.get(f"/tasks/{task_uuid}/report", params={"done": "true"})
            assert done.json()["finished_at"] is not None
            listed = client.get(f"/spaces/{space_uuid}").json()
            assert listed["icon"] == "🇫🇷"
            assert [t["uuid"] for t in listed["tasks"]] == [task_uuid]
            assert listed["tasks"][0]["progress"]["current"] == 1
            assert client.get("/nope").json()["error"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    rest, errors = proc.communicate(timeout=15)
    assert rest.strip() == "", f"more than one line printed: {rest!r}"
    assert "Traceback" not in errors
    assert space_uuid not in line + rest + errors
