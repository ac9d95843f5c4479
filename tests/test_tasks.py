"""Creating and reading tasks: parents, children, uuids."""

from __future__ import annotations

import uuid

import pytest

from tests.support import stored_counts

TASK_FIELDS = {
    "uuid",
    "space_uuid",
    "parent_uuid",
    "title",
    "source",
    "created_at",
    "finished_at",
    "duration",
    "progress",
    "children",
}

# A version 4 uuid no test creates: an unknown space or task, the same in every process.
UNKNOWN = "5d3c1e0a-8f4b-4c2d-9a6e-7b1f0c3d2e4a"


async def test_create_task_answers_201_with_only_its_uuid(client, space):
    response = await client.post(f"/spaces/{space}/tasks", json={"title": "build"})
    assert response.status_code == 201
    assert set(response.json()) == {"uuid"}


async def test_task_uuids_are_version_4_and_distinct(client, make_task):
    made = [await make_task() for _ in range(5)]
    assert len(set(made)) == 5
    assert all(uuid.UUID(u).version == 4 and str(uuid.UUID(u)) == u for u in made)


async def test_created_task_reads_with_every_field_and_progress_null(client, space, make_task):
    task = await make_task(title="build", source="ci-runner-3")
    response = await client.get(f"/tasks/{task}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == TASK_FIELDS
    assert body["uuid"] == task
    assert body["space_uuid"] == space
    assert body["parent_uuid"] is None
    assert body["title"] == "build"
    assert body["source"] == "ci-runner-3"
    assert body["finished_at"] is None
    assert body["duration"] is None
    assert body["progress"] is None
    assert body["children"] == []


async def test_create_task_with_empty_object_has_null_title_and_source(client, make_task):
    body = (await client.get(f"/tasks/{await make_task()}")).json()
    assert body["title"] is None
    assert body["source"] is None


async def test_create_task_accepts_title_and_source_of_200_characters(client, make_task):
    task = await make_task(title="t" * 200, source="s" * 200)
    body = (await client.get(f"/tasks/{task}")).json()
    assert body["title"] == "t" * 200
    assert body["source"] == "s" * 200


async def test_read_task_nests_its_children_oldest_first(client, make_task, clock):
    parent = await make_task(title="deploy")
    steps = []
    for name in ("build", "test", "ship"):
        steps.append(await make_task(title=name, parent_uuid=parent))
        clock.advance(1)
    body = (await client.get(f"/tasks/{parent}")).json()
    assert [c["uuid"] for c in body["children"]] == steps
    assert all(set(c) == TASK_FIELDS for c in body["children"])
    assert all(c["parent_uuid"] == parent for c in body["children"])


async def test_child_reads_with_parent_uuid_and_no_children(client, make_task):
    parent = await make_task()
    child = await make_task(parent_uuid=parent)
    body = (await client.get(f"/tasks/{child}")).json()
    assert body["parent_uuid"] == parent
    assert body["children"] == []


async def test_parent_uuid_in_uppercase_is_accepted_and_stored_canonical(client, make_task):
    parent = await make_task()
    child = await make_task(parent_uuid=parent.upper())
    assert (await client.get(f"/tasks/{child}")).json()["parent_uuid"] == parent


async def test_task_uuid_in_uppercase_reads_the_same_task(client, make_task):
    task = await make_task(title="x")
    assert (await client.get(f"/tasks/{task.upper()}")).json()["uuid"] == task


@pytest.mark.parametrize("space_uuid", [UNKNOWN, "not-a-uuid"])
async def test_create_task_in_unknown_space_is_404(client, sql, space, space_uuid):
    before = await stored_counts(sql)
    response = await client.post(f"/spaces/{space_uuid}/tasks", json={"title": "x"})
    assert response.status_code == 404
    assert isinstance(response.json()["error"], str)
    assert await stored_counts(sql) == before


async def test_create_task_with_unknown_parent_is_422(client, sql, space):
    before = await stored_counts(sql)
    response = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": str(uuid.uuid4())})
    assert response.status_code == 422
    assert "parent_uuid" in response.json()["error"]
    assert await stored_counts(sql) == before


async def test_create_task_under_a_child_is_422(client, sql, space, make_task):
    parent = await make_task()
    child = await make_task(parent_uuid=parent)
    before = await stored_counts(sql)
    response = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": child})
    assert response.status_code == 422
    assert "parent_uuid" in response.json()["error"]
    assert await stored_counts(sql) == before
    assert (await client.get(f"/tasks/{child}")).json()["children"] == []


async def test_create_task_with_parent_in_another_space_is_422(client, sql, space, make_task):
    other = (await client.post("/spaces", json={})).json()["uuid"]
    foreign = await make_task(other)
    before = await stored_counts(sql)
    response = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": foreign})
    assert response.status_code == 422
    assert "parent_uuid" in response.json()["error"]
    assert await stored_counts(sql) == before
    assert (await client.get(f"/tasks/{foreign}")).json()["children"] == []


@pytest.mark.parametrize("parent", ["not-a-uuid", "", "1234"])
async def test_create_task_with_parent_that_is_not_a_uuid_is_422(client, sql, space, parent):
    before = await stored_counts(sql)
    response = await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
    assert response.status_code == 422
    assert "parent_uuid" in response.json()["error"]
    assert await stored_counts(sql) == before


async def test_a_childs_children_stay_empty_after_refused_nesting(client, space, make_task):
    parent = await make_task()
    child = await make_task(parent_uuid=parent)
    await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": child})
    family = (await client.get(f"/tasks/{parent}")).json()
    assert [c["uuid"] for c in family["children"]] == [child]
    assert family["children"][0]["children"] == []


@pytest.mark.parametrize("task_uuid", [UNKNOWN, "not-a-uuid", "0" * 36])
async def test_read_unknown_task_is_404(client, task_uuid):
    response = await client.get(f"/tasks/{task_uuid}")
    assert response.status_code == 404
    assert isinstance(response.json()["error"], str)
