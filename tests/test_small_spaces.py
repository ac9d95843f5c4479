"""Small spaces held whole in memory (with Redis, while the space's version is the one
they were read at): every read answers exactly what the paged SQL read answers, and the
next read after a create, a report or a finish sees it."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from headway.caches.families import row_bytes
from headway.caches.spaces import BigSpace, ShownTasks, SmallSpace, SmallSpaces
from headway.domain.tasks import Progress, TaskRow, TaskView, view_json

from .conftest import pairs

every_pair = pytest.mark.parametrize("backend", pairs(), indirect=True)
# Answers are reused only from the memory store, which hands out the same progress object
# until the next write.
memory_only = pytest.mark.parametrize("backend", pairs(progress="memory"), indirect=True)


async def read(client, service, space, params, *, held: bool) -> bytes:
    """The space read's body, from the small space held in memory or from SQL."""
    kept = service._small
    if not held:
        service._small = None
    try:
        answer = await client.get(f"/spaces/{space}", params=params)
    finally:
        service._small = kept
    assert answer.status_code == 200, answer.text
    return answer.content


@every_pair
async def test_every_window_of_a_small_space_reads_as_the_paged_read(app, client, space):
    service = app.state.service
    tasks = []
    for n in range(8):
        body = {"title": f"t{n}"}
        tasks.append((await client.post(f"/spaces/{space}/tasks", json=body)).json()["uuid"])
    for n in range(3):  # steps of t1, one finished
        body = {"title": f"s{n}", "parent_uuid": tasks[1]}
        step = (await client.post(f"/spaces/{space}/tasks", json=body)).json()["uuid"]
        if n == 0:
            await client.put(f"/tasks/{step}", json={"done": True})
    await client.put(f"/tasks/{tasks[2]}", json={"current": 5, "end": 5})
    await client.put(f"/tasks/{tasks[3]}", json={"current": 1, "end": 4, "values": {"log": "a"}})
    stamps = [task["created_at"] for task in (await client.get(f"/spaces/{space}")).json()["tasks"]]
    cursors = [None, stamps[0], stamps[3], stamps[-1]]
    for before, after, limit, state in itertools.product(
        cursors, cursors, [None, 1, 3, 100], [None, "active", "finished"]
    ):
        params = {
            name: value
            for name, value in (("before", before), ("after", after), ("limit", limit))
            if value is not None
        }
        if state:
            params["state"] = state
        held = await read(client, service, space, params, held=True)
        assert held == await read(client, service, space, params, held=False), params
    assert isinstance(service._small.get(space), SmallSpace)


@every_pair
async def test_the_next_read_sees_each_create_report_and_finish(app, client, space):
    async def titles_and_states():
        body = (await client.get(f"/spaces/{space}")).json()
        return [(t["title"], t["finished_at"] is not None, t["progress"]) for t in body["tasks"]]

    assert await titles_and_states() == []
    first = (await client.post(f"/spaces/{space}/tasks", json={"title": "a"})).json()["uuid"]
    assert await titles_and_states() == [("a", False, None)]
    await client.put(f"/tasks/{first}", json={"current": 1, "end": 2})
    [(_, _, progress)] = await titles_and_states()
    assert progress["current"] == 1
    await client.put(f"/tasks/{first}", json={"current": 2, "end": 2})
    [(_, finished, progress)] = await titles_and_states()
    assert finished and progress["ratio"] == 1
    await client.post(f"/spaces/{space}/tasks", json={"title": "b", "parent_uuid": first})
    body = (await client.get(f"/spaces/{space}")).json()
    assert [child["title"] for child in body["tasks"][0]["children"]] == ["b"]


@every_pair
async def test_a_space_larger_than_small_is_read_page_by_page(app, client, space):
    service = app.state.service
    service._small = SmallSpaces(small=3)
    for n in range(4):
        await client.post(f"/spaces/{space}/tasks", json={"title": f"t{n}"})
    body = (await client.get(f"/spaces/{space}")).json()
    assert [task["title"] for task in body["tasks"]] == ["t0", "t1", "t2", "t3"]
    big = service._small.get(space)
    assert isinstance(big, BigSpace) and big.childless


@every_pair
async def test_a_big_space_known_childless_shows_the_first_child_created_in_it(app, client, space):
    """Pages of a big space known to hold no child skip the query for children, until a
    child is created there."""
    service = app.state.service
    service._small = SmallSpaces(small=3)
    tops = [
        (await client.post(f"/spaces/{space}/tasks", json={"title": f"t{n}"})).json()["uuid"]
        for n in range(4)
    ]
    assert all(not t["children"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"])
    assert service._small.get(space).childless
    await client.post(f"/spaces/{space}/tasks", json={"title": "child", "parent_uuid": tops[1]})
    assert not service._small.get(space).childless
    for params in (
        {},
        {"limit": "3", "before": "9999-01-01T00:00:00Z"},
        {"after": "2000-01-01T00:00:00Z"},
    ):
        tasks = (await client.get(f"/spaces/{space}", params=params)).json()["tasks"]
        shown = {t["title"]: [c["title"] for c in t["children"]] for t in tasks}
        assert shown["t1"] == ["child"], params


@every_pair
async def test_held_spaces_stay_within_their_byte_budget(app, client):
    """Rows (and in memory the answers kept with them) count: three spaces of two tasks
    (about 0.7 KB of rows each) do not fit in 1.5 KB."""
    service = app.state.service
    service._small = small = SmallSpaces(small=10, max_bytes=1500)
    spaces = []
    for _ in range(3):
        space = (await client.post("/spaces", json={})).json()["uuid"]
        for n in range(2):
            await client.post(f"/spaces/{space}/tasks", json={"title": f"t{n}"})
        spaces.append(space)
        assert (await client.get(f"/spaces/{space}")).status_code == 200
        assert small.bytes_held <= 1500
    assert small.get(spaces[0]) is None  # the least recently read went first
    assert isinstance(small.get(spaces[-1]), SmallSpace)


@memory_only
async def test_pages_of_a_big_space_reuse_answers_only_while_their_task_is_unchanged(
    app, client, space, clock
):
    """A page of a big space shows each task's JSON as last made while its progress and
    row are unchanged, and made again after a report, a finish or an expiry."""
    service = app.state.service
    service._small = SmallSpaces(small=3)
    tasks = [
        (await client.post(f"/spaces/{space}/tasks", json={"title": f"t{n}"})).json()["uuid"]
        for n in range(5)
    ]
    for task in tasks:
        await client.put(f"/tasks/{task}", json={"current": 1, "end": 4})

    async def page() -> dict[str, dict]:
        body = (await client.get(f"/spaces/{space}", params={"limit": "5"})).json()
        return {t["uuid"]: t for t in body["tasks"]}

    first = await page()
    assert len(service.reads.shown) >= 5
    assert await page() == first
    await client.put(f"/tasks/{tasks[1]}", json={"current": 3, "end": 4})
    await client.put(f"/tasks/{tasks[2]}", json={"done": True})
    again = await page()
    assert again[tasks[1]]["progress"]["current"] == 3
    assert again[tasks[2]]["finished_at"] is not None and again[tasks[2]]["progress"]["ratio"] == 1
    assert again[tasks[0]] == first[tasks[0]]
    clock.advance(61)  # past the progress TTL of 60 s
    expired = await page()
    assert expired[tasks[0]]["progress"] is None
    # The same, byte for byte, as the answer made afresh.
    for task in tasks:
        alone = (await client.get(f"/tasks/{task}")).json()
        assert expired[task] == alone


@every_pair
async def test_pages_held_of_a_big_space_read_as_the_paged_read_after_each_change(
    app, client, space
):
    """A window of a big space read whole in one page is held, and answered from there
    while nothing is created or finished in the space: every read, held or not, answers
    exactly what SQL answers, also right after a create, a child's create, a finish and
    a report."""
    service = app.state.service
    service._small = small = SmallSpaces(small=3)
    tops = [
        (await client.post(f"/spaces/{space}/tasks", json={"title": f"t{n}"})).json()["uuid"]
        for n in range(6)
    ]
    stamps = [t["created_at"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"]]
    windows = [
        {"limit": "2"},
        {"limit": "3", "before": stamps[4]},
        {"limit": "2", "after": stamps[1]},
        {"after": stamps[3]},
        {"limit": "4", "state": "active"},
        {"limit": "4", "state": "finished"},
        {"before": stamps[5], "after": stamps[0]},
    ]

    async def every_window_reads_as_sql() -> None:
        for params in windows:
            for _ in range(2):  # the second from the page held, where it is
                held = await read(client, service, space, params, held=True)
                assert held == await read(client, service, space, params, held=False), params

    await every_window_reads_as_sql()
    assert isinstance(small.get(space), BigSpace) and small._pages  # some pages are held
    changes = [
        ("post", f"/spaces/{space}/tasks", {"title": "newest"}),
        ("post", f"/spaces/{space}/tasks", {"title": "child", "parent_uuid": tops[4]}),
        ("put", f"/tasks/{tops[5]}", {"done": True}),
        ("put", f"/tasks/{tops[3]}", {"current": 2, "end": 5}),
        ("post", f"/spaces/{space}/tasks", {"title": "child", "parent_uuid": tops[1]}),
    ]
    for method, path, body in changes:
        assert (await client.request(method, path, json=body)).status_code in (200, 201)
        await every_window_reads_as_sql()


@every_pair
async def test_pages_held_stay_within_their_byte_budget(app, client, space):
    service = app.state.service
    bound = 5 * row_bytes(TaskRow("", "", None, "t0", None, 0))
    service._small = small = SmallSpaces(small=3, page_bytes=bound)
    for n in range(8):
        await client.post(f"/spaces/{space}/tasks", json={"title": f"t{n}"})
    stamps = [t["created_at"] for t in (await client.get(f"/spaces/{space}")).json()["tasks"]]
    # Empty windows count too (as a row each): however many are read, the bound holds.
    cursors = [*stamps, *(f"2000-01-01T00:00:00.{n:06d}Z" for n in range(20))]
    for before in cursors:
        answer = await client.get(f"/spaces/{space}", params={"limit": 2, "before": before})
        assert answer.status_code == 200
        assert 0 < small.page_bytes_held <= bound
        assert len(small._pages) <= 5


@memory_only
def test_shown_tasks_hold_at_most_their_bounds(backend):
    shown = ShownTasks(held=16)
    rows = [
        TaskRow(f"00000000-0000-4000-8000-{n:012d}", "s", None, f"t{n}", None, n) for n in range(40)
    ]
    made = [shown.json(row, None) for row in rows]
    assert len(shown) <= 16
    assert shown.json(rows[-1], None) is made[-1]  # the newest still held
    by_size = ShownTasks(max_bytes=4096)
    grown: list[int] = []
    counted = ShownTasks(max_bytes=4096, on_grow=grown.append)
    for row in rows:
        by_size.json(row, None)
        counted.json(row, None)
        assert by_size.bytes_held <= 4096 and sum(grown) == counted.bytes_held <= 4096
    assert 5 < len(by_size) < 16


@memory_only
def test_shown_tasks_do_not_keep_answers_holding_large_values(backend):
    """A task holding large values (up to 64 KiB) is answered as its struct, encoded as
    it is sent, rather than copied into the cache outside the live-progress budget."""
    shown = ShownTasks()
    row = TaskRow("00000000-0000-4000-8000-000000000001", "s", None, "big", None, 1)
    small = Progress(1, 2, msgspec.Raw(b'{"log":"x"}'), 5)
    large = Progress(1, 2, msgspec.Raw(msgspec.json.encode({"log": "x" * 60_000})), 6)
    answer = shown.json(row, large)
    assert isinstance(answer, TaskView) and len(shown) == 0
    assert msgspec.json.encode(answer) == bytes(view_json(row, large))
    assert shown.json(row, small) is shown.json(row, small)
    assert len(shown) == 1
