"""The walk-through (docs/walkthrough.md) against real answers, where it can drift from
them: the 405's headers and body, `/up`'s shape, the error examples, steps given to a parent
still running, and idempotency keys that are random because a replay hands out a space's
uuid."""

from __future__ import annotations

import json
import re
from typing import Any

from . import docs


def walk_through() -> str:
    return docs.page("walkthrough")


def console_lines() -> list[str]:
    blocks = docs.blocks(walk_through(), "console")
    return [line for block in blocks for line in block.splitlines()]


def answer_after(command: str) -> list[str]:
    """The lines the walk-through shows after the command line `command`, up to the next one."""
    lines = console_lines()
    start = lines.index(command) + 1
    end = next((n for n in range(start, len(lines)) if lines[n].startswith("$ ")), len(lines))
    return lines[start:end]


def shape(value: Any) -> Any:
    """The keys of every object in `value`, nested, without the values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    return None


async def test_the_405_example_shows_the_real_headers_and_body(client, make_task):
    shown = answer_after("$ curl -s -i -X PATCH localhost:8000/tasks/$T -d '{}'")
    blank = shown.index("")
    status, headers, body = shown[0], shown[1:blank], shown[blank + 1]
    real = await client.patch(f"/tasks/{await make_task()}", json={})
    assert status == f"HTTP/1.1 {real.status_code} Method Not Allowed"
    assert dict(line.split(": ", 1) for line in headers) == dict(real.headers)
    assert json.loads(body) == real.json()


async def test_the_up_example_has_every_check_the_real_answer_has(client):
    [shown] = answer_after("$ curl -s localhost:8000/up")
    real = await client.get("/up")
    assert shape(json.loads(shown)) == shape(real.json())


async def test_the_error_examples_are_real_answers(client, space, make_task):
    task = await make_task()
    limit = await client.get(f"/spaces/{space}?limit=0")
    assert answer_after('$ curl -s "localhost:8000/spaces/$S?limit=0"') == [limit.text]
    nested = await client.put(f"/tasks/{task}", json={"values": {"nested": {"a": 1}}})
    command = """$ curl -s -X PUT localhost:8000/tasks/$T -d '{"values": {"nested": {"a": 1}}}'"""
    assert [json.loads(line) for line in answer_after(command)] == [nested.json()]


async def test_steps_are_given_to_a_parent_still_running(client, space, make_task):
    """In the walk-through, no step is created under a task it has already finished (a
    step added to a finished parent does not reopen it, as the real answer shows)."""
    finished: set[str] = set()
    parents: list[str] = []
    for line in console_lines():
        done = re.match(
            r"\$ curl -s -X PUT localhost:8000/tasks/\$(\w+) -d '\{\"done\": true\}'", line
        )
        if done:
            finished.add(done[1])
        parent = re.search(r'parent_uuid\\": \\"\$(\w+)\\"', line)
        if parent:
            parents.append(parent[1])
            assert parent[1] not in finished, line
    assert parents, "the walk-through shows a step"

    job = await make_task()
    await client.put(f"/tasks/{job}", json={"done": True})
    step = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": job})
    assert step.status_code == 201
    assert (await client.get(f"/tasks/{job}")).json()["finished_at"] is not None


async def test_idempotency_keys_are_random_since_a_replay_answers_the_space(client):
    key = {"idempotency-key": "build-42"}
    first = await client.post("/spaces", json={"title": "Mine"}, headers=key)
    again = await client.post("/spaces", json={"title": "Mine"}, headers=key)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["uuid"] == first.json()["uuid"]  # the credential, to whoever replays
    text = " ".join(walk_through().split())
    assert "A replayed `POST /spaces` answers the space's uuid" in text
    assert "random" in text
    keys = re.findall(r"Idempotency-Key: ([^'\"]+)", walk_through())
    assert keys and set(keys) == {"$K"}  # the examples use a random key
