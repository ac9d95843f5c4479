"""The real `headway serve` command, as a user runs it with nothing configured."""

from __future__ import annotations

import httpx

from .live_server import STOPPED_BY_SIGTERM, LiveServer


def test_serve_with_nothing_configured_runs_the_embedded_default(tmp_path):
    with LiveServer(tmp_path) as server:
        health = httpx.get(f"{server.url}/up", timeout=5)
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        assert (tmp_path / "headway.db").is_file()

        with httpx.Client(base_url=server.url, timeout=10) as client:
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
        assert server.stop() == STOPPED_BY_SIGTERM
    output, errors = server.output(), server.errors()
    line, _, rest = output.partition("\n")
    assert server.url in line
    assert rest.strip() == "", f"more than one line printed: {rest!r}"
    assert "Traceback" not in errors
    assert space_uuid not in output + errors


def test_serve_from_a_folder_holding_a_headway_folder_imports_the_installed_package(tmp_path):
    # A clone's parent folder, or any folder with an unrelated `headway/` directory: its
    # migration step must not import that folder as the package.
    (tmp_path / "headway").mkdir()
    with LiveServer(tmp_path) as server:
        health = httpx.get(f"{server.url}/up", timeout=5)
        assert health.status_code == 200
        assert "cannot import" not in server.errors()
