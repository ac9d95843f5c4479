"""Creating and reading spaces: icons, ordering, paging and cursors."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from tests.support import stored_counts


def titles(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [task["title"] for task in response.json()["tasks"]]


async def make_titled(make_task, clock, count: int, *, step: float = 1) -> dict[str, str]:
    """Create tasks t0..t{count-1}, `step` seconds apart; their uuids by title."""
    made = {}
    for i in range(count):
        made[f"t{i}"] = await make_task(title=f"t{i}")
        clock.advance(step)
    return made


async def created_at(client, task_uuid: str) -> str:
    return (await client.get(f"/tasks/{task_uuid}")).json()["created_at"]


# --- Creating -------------------------------------------------------------------------------


async def test_create_space_answers_only_uuid_title_icon(client):
    response = await client.post("/spaces", json={"title": "Nightly builds", "icon": "🚀"})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"uuid", "title", "icon"}
    assert body["title"] == "Nightly builds"
    assert body["icon"] == "🚀"
    assert uuid.UUID(body["uuid"]).version == 4


async def test_create_space_with_empty_object_has_null_title_and_icon(client):
    response = await client.post("/spaces", json={})
    assert response.status_code == 201
    assert response.json()["title"] is None
    assert response.json()["icon"] is None


async def test_each_space_gets_its_own_uuid(client):
    first = (await client.post("/spaces", json={})).json()["uuid"]
    second = (await client.post("/spaces", json={})).json()["uuid"]
    assert first != second


@pytest.mark.parametrize(
    "icon",
    ["a", "🇫🇷", "👨‍👩‍👧‍👦", "e\u0301", "é", "🚀", "👍🏽"],
    ids=["letter", "flag", "family", "combining", "precomposed", "emoji", "skin-tone"],
)
async def test_icon_of_one_grapheme_cluster_is_accepted(client, icon):
    response = await client.post("/spaces", json={"icon": icon})
    assert response.status_code == 201, response.text
    assert response.json()["icon"] == icon
    read = await client.get(f"/spaces/{response.json()['uuid']}")
    assert read.json()["icon"] == icon


@pytest.mark.parametrize(
    "icon", ["ab", "", "🇫🇷🇫🇷", "e\u0301e"], ids=["two", "empty", "2flags", "3"]
)
async def test_icon_of_other_than_one_grapheme_cluster_is_422(client, sql, icon):
    before = await stored_counts(sql)
    response = await client.post("/spaces", json={"title": "x", "icon": icon})
    assert response.status_code == 422
    assert isinstance(response.json()["error"], str)
    assert await stored_counts(sql) == before


async def test_icon_of_one_overlong_grapheme_cluster_is_422(client, sql):
    # One user-perceived character, but 101 code points: more than any icon needs.
    before = await stored_counts(sql)
    response = await client.post("/spaces", json={"icon": "e" + "\u0301" * 100})
    assert response.status_code == 422
    assert "icon" in response.json()["error"]
    assert await stored_counts(sql) == before


async def test_title_of_200_emoji_is_accepted(client):
    response = await client.post("/spaces", json={"title": "🚀" * 200})
    assert response.status_code == 201
    read = await client.get(f"/spaces/{response.json()['uuid']}")
    assert read.json()["title"] == "🚀" * 200


# --- Reading ----------------------------------------------------------------------------


async def test_read_space_has_title_icon_and_tasks_but_not_its_uuid(client):
    created = (await client.post("/spaces", json={"title": "Deploys", "icon": "🇫🇷"})).json()
    response = await client.get(f"/spaces/{created['uuid']}")
    assert response.status_code == 200
    assert response.json() == {"title": "Deploys", "icon": "🇫🇷", "tasks": []}


async def test_read_space_accepts_uppercase_uuid(client, space, make_task):
    await make_task(title="t0")
    assert titles(await client.get(f"/spaces/{space.upper()}")) == ["t0"]


@pytest.mark.parametrize(
    "space_uuid",
    [
        "5d3c1e0a-8f4b-4c2d-9a6e-7b1f0c3d2e4a",
        "not-a-uuid",
        "123",
        "00000000-0000-0000-0000-00000000000g",
    ],
)
async def test_read_unknown_space_is_404(client, space, space_uuid):
    response = await client.get(f"/spaces/{space_uuid}")
    assert response.status_code == 404
    assert isinstance(response.json()["error"], str)


async def test_spaces_do_not_see_each_others_tasks(client, space, make_task):
    other = (await client.post("/spaces", json={})).json()["uuid"]
    await make_task(title="mine")
    await make_task(other, title="theirs")
    assert titles(await client.get(f"/spaces/{space}")) == ["mine"]
    assert titles(await client.get(f"/spaces/{other}")) == ["theirs"]


async def test_no_parameters_returns_every_task_and_child_oldest_first(
    client, space, make_task, clock
):
    made = await make_titled(make_task, clock, 3)
    for name in ("c0", "c1"):
        await make_task(title=name, parent_uuid=made["t1"])
        clock.advance(1)
    await make_task(title="t3")
    response = await client.get(f"/spaces/{space}")
    assert titles(response) == ["t0", "t1", "t2", "t3"]
    tasks = response.json()["tasks"]
    assert [c["title"] for c in tasks[1]["children"]] == ["c0", "c1"]
    assert all(c["parent_uuid"] == made["t1"] for c in tasks[1]["children"])
    stamps = [t["created_at"] for t in tasks]
    assert stamps == sorted(stamps)


async def test_bare_limit_returns_newest_tasks_oldest_first(client, space, make_task, clock):
    await make_titled(make_task, clock, 5)
    assert titles(await client.get(f"/spaces/{space}", params={"limit": 2})) == ["t3", "t4"]
    assert titles(await client.get(f"/spaces/{space}", params={"limit": 9})) == [
        f"t{i}" for i in range(5)
    ]


async def test_before_returns_older_tasks_newest_first(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 5)
    cursor = await created_at(client, made["t3"])
    assert titles(await client.get(f"/spaces/{space}", params={"before": cursor})) == [
        "t2",
        "t1",
        "t0",
    ]


async def test_after_returns_newer_tasks_oldest_first(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 5)
    cursor = await created_at(client, made["t1"])
    assert titles(await client.get(f"/spaces/{space}", params={"after": cursor})) == [
        "t2",
        "t3",
        "t4",
    ]


async def test_before_and_after_return_tasks_strictly_between_oldest_first(
    client, space, make_task, clock
):
    made = await make_titled(make_task, clock, 6)
    params = {
        "after": await created_at(client, made["t1"]),
        "before": await created_at(client, made["t5"]),
    }
    assert titles(await client.get(f"/spaces/{space}", params=params)) == ["t2", "t3", "t4"]


async def test_limit_applies_after_before_cursor(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 6)
    params = {"before": await created_at(client, made["t4"]), "limit": 2}
    assert titles(await client.get(f"/spaces/{space}", params=params)) == ["t3", "t2"]


async def test_limit_applies_after_after_cursor(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 6)
    params = {"after": await created_at(client, made["t1"]), "limit": 2}
    assert titles(await client.get(f"/spaces/{space}", params=params)) == ["t2", "t3"]


async def test_limit_with_both_cursors_keeps_the_oldest_between(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 6)
    params = {
        "after": await created_at(client, made["t0"]),
        "before": await created_at(client, made["t5"]),
        "limit": 2,
    }
    assert titles(await client.get(f"/spaces/{space}", params=params)) == ["t1", "t2"]


async def test_children_never_count_against_limit_and_are_never_cut_off(
    client, space, make_task, clock
):
    await make_task(title="t0")
    clock.advance(1)
    parent = await make_task(title="t1")
    clock.advance(1)
    for i in range(3):
        await make_task(title=f"c{i}", parent_uuid=parent)
        clock.advance(1)
    response = await client.get(f"/spaces/{space}", params={"limit": 1})
    assert titles(response) == ["t1"]
    assert [c["title"] for c in response.json()["tasks"][0]["children"]] == ["c0", "c1", "c2"]


async def test_children_are_not_listed_as_top_level_tasks(client, space, make_task):
    parent = await make_task(title="parent")
    await make_task(title="child", parent_uuid=parent)
    assert titles(await client.get(f"/spaces/{space}")) == ["parent"]


async def _state_fixture(client, make_task, clock) -> dict[str, str]:
    """a: finished; b: active; p: active parent with one finished and one active child."""
    made = {"a": await make_task(title="a")}
    clock.advance(1)
    made["p"] = await make_task(title="p")
    clock.advance(1)
    made["c_done"] = await make_task(title="c_done", parent_uuid=made["p"])
    made["c_open"] = await make_task(title="c_open", parent_uuid=made["p"])
    clock.advance(1)
    made["b"] = await make_task(title="b")
    for name in ("a", "c_done"):
        assert (await client.put(f"/tasks/{made[name]}", json={"done": True})).status_code == 200
    return made


async def test_state_active_returns_unfinished_top_level_tasks_with_all_children(
    client, space, make_task, clock
):
    await _state_fixture(client, make_task, clock)
    response = await client.get(f"/spaces/{space}", params={"state": "active"})
    assert titles(response) == ["p", "b"]
    children = response.json()["tasks"][0]["children"]
    assert [c["title"] for c in children] == ["c_done", "c_open"]


async def test_state_finished_returns_finished_top_level_tasks_only(
    client, space, make_task, clock
):
    await _state_fixture(client, make_task, clock)
    assert titles(await client.get(f"/spaces/{space}", params={"state": "finished"})) == ["a"]


async def test_state_combines_with_bare_limit(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 5)
    for name in ("t0", "t2", "t3"):
        await client.put(f"/tasks/{made[name]}", json={"done": True})
    params = {"state": "finished", "limit": 2}
    assert titles(await client.get(f"/spaces/{space}", params=params)) == ["t2", "t3"]
    params = {"state": "active", "limit": 1}
    assert titles(await client.get(f"/spaces/{space}", params=params)) == ["t4"]


# --- Cursors ----------------------------------------------------------------------------


async def test_cursor_round_trips_exactly_between_tasks_created_in_one_microsecond(
    client, space, make_task
):
    # The clock does not move: the tasks are 1 µs apart, so a rounded cursor would fail.
    made = {f"t{i}": await make_task(title=f"t{i}") for i in range(3)}
    middle = await created_at(client, made["t1"])
    assert titles(await client.get(f"/spaces/{space}", params={"before": middle})) == ["t0"]
    assert titles(await client.get(f"/spaces/{space}", params={"after": middle})) == ["t2"]


async def test_created_at_is_rfc3339_utc_with_microseconds_and_z(client, make_task):
    stamp = await created_at(client, await make_task())
    parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    assert parsed.year >= 2026
    assert len(stamp) == len("2026-11-22T01:15:09.123456Z")


async def test_cursor_whose_plus_arrived_as_a_space_still_works(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 3, step=0.25)
    cursor = (await created_at(client, made["t1"])).replace("Z", "+00:00")
    # Unencoded on purpose: the `+` reaches the server as a space.
    response = await client.get(f"/spaces/{space}?before={cursor}")
    assert b"+00:00" in response.request.url.query
    assert titles(response) == ["t0"]
    response = await client.get(f"/spaces/{space}?after={cursor}")
    assert titles(response) == ["t2"]


@pytest.mark.parametrize("offset", [timedelta(hours=2), timedelta(hours=-5, minutes=-30)])
async def test_cursor_with_other_offset_means_the_same_instant(
    client, space, make_task, clock, offset
):
    made = await make_titled(make_task, clock, 3, step=0.000_001)
    stamp = await created_at(client, made["t1"])
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    shifted = moment.astimezone(timezone(offset)).isoformat()
    assert not shifted.endswith(("Z", "+00:00"))
    assert titles(await client.get(f"/spaces/{space}", params={"before": shifted})) == ["t0"]
    assert titles(await client.get(f"/spaces/{space}", params={"after": shifted})) == ["t2"]


async def test_cursor_with_lowercase_z_is_accepted(client, space, make_task, clock):
    made = await make_titled(make_task, clock, 2)
    cursor = (await created_at(client, made["t1"])).replace("Z", "z")
    assert titles(await client.get(f"/spaces/{space}", params={"before": cursor})) == ["t0"]


@pytest.mark.parametrize(
    "cursor",
    [
        "yesterday",
        "",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-22",
        "1790000000",
        "2026-11-22T25:00:00Z",
        "2026-11-22T01:15:09.123456+25:00",
    ],
)
@pytest.mark.parametrize("name", ["before", "after"])
async def test_cursor_that_is_not_a_timestamp_is_400(client, space, name, cursor):
    response = await client.get(f"/spaces/{space}", params={name: cursor})
    assert response.status_code == 400
    assert name in response.json()["error"]


@pytest.mark.parametrize("limit", ["0", "-1", "1.5", "abc", "", "1e3", "²", "٣"])
async def test_limit_that_is_not_a_whole_number_of_at_least_one_is_400(client, space, limit):
    response = await client.get(f"/spaces/{space}", params={"limit": limit})
    assert response.status_code == 400
    assert "limit" in response.json()["error"]


@pytest.mark.parametrize("limit", ["99999999999999999999999", "9" * 5000])
async def test_huge_limit_returns_every_task(client, space, make_task, clock, limit):
    await make_titled(make_task, clock, 3)
    assert titles(await client.get(f"/spaces/{space}", params={"limit": limit})) == [
        "t0",
        "t1",
        "t2",
    ]


@pytest.mark.parametrize("state", ["done", "ACTIVE", "", "running"])
async def test_state_other_than_active_or_finished_is_400(client, space, state):
    response = await client.get(f"/spaces/{space}", params={"state": state})
    assert response.status_code == 400
    assert "state" in response.json()["error"]


async def test_before_finer_than_a_microsecond_keeps_the_task_inside_it(client, space, make_task):
    task = await make_task()
    created = (await client.get(f"/tasks/{task}")).json()["created_at"]  # ...123456Z
    finer = created[:-1] + "5Z"  # half a microsecond later: the task is strictly before
    found = (await client.get(f"/spaces/{space}", params={"before": finer})).json()["tasks"]
    assert [t["uuid"] for t in found] == [task]
    same = (await client.get(f"/spaces/{space}", params={"before": created})).json()["tasks"]
    assert same == []
    after = (await client.get(f"/spaces/{space}", params={"after": finer})).json()["tasks"]
    assert after == []
