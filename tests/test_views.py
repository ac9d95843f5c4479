"""The fast answers (`domain.view`, encoded in one call, in pieces, or from the family
cache) are byte for byte the reference: `msgspec.json.encode` of the dict `task_view`
builds. And what the caches hold never outlives a change: a finish or a new child shows
in the next read."""

from __future__ import annotations

import msgspec
import pytest

from headway.api.streaming import PIECE_BYTES, space_pieces, task_pieces
from headway.caches.families import KEPT_JOINED_BYTES, FamilyCache, family_bytes, row_bytes
from headway.domain import tasks as domain
from headway.domain.tasks import Progress, TaskRow, format_ts, view

from .reference import task_view

T0 = 1_790_000_000_123_456
SPACE = "5f0c6f43-1d7e-4b6e-9a43-2a5b8f3f1c11"
PARENT = "0b8f5e2c-3a3d-4c61-8a0e-5d1c2b3a4f50"


def row(n: int, *, parent: str | None = None, finished: int | None = None, **fields) -> TaskRow:
    created = T0 + n * 1_000_003
    return TaskRow(
        fields.get("uuid", f"00000000-0000-4000-8000-{n:012d}"),
        SPACE,
        parent,
        fields.get("title", f"task {n}"),
        fields.get("source"),
        created,
        finished,
        None if finished is None else domain.duration_seconds(created, finished),
        fields.get("failed", None if finished is None else False),
        fields.get("error"),
    )


def progress(current, end, values: dict | None = None, at: int = T0 + 5_000_000) -> Progress:
    raw = domain.EMPTY_VALUES if not values else msgspec.Raw(msgspec.json.encode(values))
    return Progress(current, end, raw, at)


def reference(task: TaskRow, found: Progress | None, children=None) -> bytes:
    return msgspec.json.encode(task_view(task, found, children))


UNICODE = {"log": "étape 3/5 — 完了 🚀", "quote": 'a "b" \\ c', "ctl": "tab\there\u0001\u001f"}
NUMBERS = [
    (0, 0),
    (5, 10),
    (3, 7),
    (7.25, 3),  # over the end: clamped
    (1e16, 3e17),
    (2**63 + 1, 2**64),  # beyond 64-bit integers
    (10**30, 1e308),
    (1.5, None),  # a counter without a total
    (None, 4),
    (-0.0, 1),
    (0.1, 0.3),
]

LEAVES = {
    "waiting": (row(1), None),
    "unicode title and no source": (row(2, title='Ünïcode "quoted" \n line', source=None), None),
    "no title": (row(3, title=None, source="cron"), progress(1, 2)),
    "finished, never reported": (row(4, finished=T0 + 9_000_000), None),
    "finished with progress": (row(5, finished=T0 + 61_500_000), progress(3, 3, {"ok": True})),
    "finished, exact second": (row(6, finished=1_790_000_100_000_000), progress(None, None)),
    "unicode values": (row(7), progress(2, 5, UNICODE)),
    "big numbers in values": (row(8), progress(1, 2, {"n": 2**70, "f": 1e-300, "b": False})),
    "updated on a whole second": (row(9), progress(1, 2, at=1_790_000_007_000_000)),
    "a child": (row(10, parent=PARENT), progress(4, 8, {"log": "x"})),
    # The outcome kept with the finish (CONTRACT, "A failure is kept with its finish").
    "failed, progress gone": (row(11, finished=T0 + 9_000_000, failed=True, error="exit 3"), None),
    "failed, then reported again": (
        row(12, finished=T0 + 9_000_000, failed=True, error="exit 3"),
        progress(2, 4, {"log": "again", "error": "other", "n": 1}),
    ),
    "failed, its error as reported": (
        row(13, finished=T0 + 9_000_000, failed=True, error="exit 3"),
        progress(1, 4, {"error": "exit 3"}),
    ),
    "succeeded, then reported an error": (
        row(14, finished=T0 + 9_000_000),
        progress(2, 4, {"error": "late", "log": "x"}),
    ),
    "succeeded, an error that is just a value": (
        row(15, finished=T0 + 9_000_000),
        progress(2, 4, {"error": 3}),
    ),
    "failed through its steps": (
        row(16, finished=T0 + 9_000_000, failed=True),
        progress(2, 4, {"error": "own"}),
    ),
    "finished before outcomes were kept": (
        row(17, finished=T0 + 9_000_000, failed=None),
        progress(2, 4, {"error": "own"}),
    ),
}


@pytest.mark.parametrize(("task", "found"), LEAVES.values(), ids=LEAVES.keys())
def test_a_leaf_encodes_as_the_reference(task, found):
    expected = reference(task, found)
    assert msgspec.json.encode(view(task, found)) == expected
    assert bytes(domain.view_json(task, found)) == expected
    assert b"".join(task_pieces(view(task, found))) == expected


@pytest.mark.parametrize(
    ("case", "values"),
    [
        ("failed, progress gone", {"error": "exit 3"}),
        ("failed, then reported again", {"log": "again", "error": "exit 3", "n": 1}),
        ("failed, its error as reported", {"error": "exit 3"}),
        ("succeeded, then reported an error", {"log": "x"}),
        ("succeeded, an error that is just a value", {"error": 3}),
        ("failed through its steps", {"error": "own"}),
        ("finished before outcomes were kept", {"error": "own"}),
    ],
)
def test_a_finished_tasks_values_show_the_outcome_kept_with_its_finish(case, values):
    task, found = LEAVES[case]
    assert msgspec.json.decode(domain.view_json(task, found))["progress"]["values"] == values


@pytest.mark.parametrize(("current", "end"), NUMBERS)
@pytest.mark.parametrize("finished", [None, T0 + 3_000_000])
def test_numbers_encode_as_the_reference(current, end, finished):
    task = row(1, finished=finished)
    found = progress(current, end, {"current": current} if current is not None else None)
    assert msgspec.json.encode(view(task, found)) == reference(task, found)


def family(count: int, *, values: dict | None = None) -> list[tuple[TaskRow, Progress | None]]:
    """Children of every kind: waiting, reporting, finished with and without progress."""
    members = []
    for n in range(count):
        kind = n % 4
        child = row(100 + n, parent=PARENT, finished=T0 + 9_000_000 + n if kind >= 2 else None)
        found = None if kind in (0, 3) else progress(n, count, values, at=T0 + 7_000_000 + n)
        members.append((child, found))
    return members


PARENTS = {
    "parent, nobody reported": (row(0, uuid=PARENT), None, family(1)[:1]),
    "parent with its own values": (row(0, uuid=PARENT), progress(9, 9, UNICODE), family(5)),
    "finished parent": (row(0, uuid=PARENT, finished=T0 + 99_000_000), None, family(6)),
    "parent older than its children's reports": (
        row(0, uuid=PARENT),
        progress(None, None, at=T0 + 99_000_000),
        family(3),
    ),
}


@pytest.mark.parametrize(("task", "found", "children"), PARENTS.values(), ids=PARENTS.keys())
def test_a_parent_encodes_as_the_reference(task, found, children):
    expected = reference(task, found, children)
    assert msgspec.json.encode(view(task, found, children)) == expected
    assert b"".join(task_pieces(view(task, found, children))) == expected
    shown = [domain.view_json(child, p) for child, p in children]
    assert msgspec.json.encode(view(task, found, children, shown)) == expected


def test_a_big_family_is_cut_into_pieces_that_join_to_the_reference():
    children = family(60, values={"blob": "v" * 4000})
    task = row(0, uuid=PARENT)
    pieces = list(task_pieces(view(task, None, children)))
    assert len(pieces) > 3
    assert all(len(piece) < 2 * PIECE_BYTES for piece in pieces)
    assert b"".join(pieces) == reference(task, None, children)


async def test_a_space_in_pages_encodes_as_the_reference():
    tasks = [(row(n), progress(n, 50, {"log": "é" * (n * 300)})) for n in range(1, 60)]
    tasks.insert(7, (row(0, uuid=PARENT), None, family(9)))
    views = [view(*task) for task in tasks]
    head = {"title": "Ünïcode", "icon": "🚀"}

    async def pages():
        yield views[:5]
        yield []
        yield views[5:40]
        yield views[40:]

    pieces = [piece async for piece in space_pieces(head, pages())]
    assert len(pieces) > 3
    whole = msgspec.json.encode({**head, "tasks": [task_view(*task) for task in tasks]})
    assert b"".join(pieces) == whole

    async def no_pages():
        return
        yield

    empty = b"".join([piece async for piece in space_pieces(head, no_pages())])
    assert empty == msgspec.json.encode({**head, "tasks": []})


@pytest.mark.parametrize(
    "us", [0, 1, 999_999, 1_000_000, T0, 1_790_000_000_000_000, 253_402_300_799_999_999]
)
def test_timestamps_have_microseconds_and_z(us):
    seconds, micros = divmod(us, 1_000_000)
    assert (
        format_ts(us)
        == domain.EPOCH.fromtimestamp(seconds, domain.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        + f".{micros:06d}Z"
    )


# --- The family cache's children ---------------------------------------------------------


def test_the_family_cache_reuses_a_childs_json_until_its_progress_changes():
    cache = FamilyCache()
    parent, children = row(0, uuid=PARENT), [child for child, _ in family(4)]
    cache.put((parent, children), cache.generation)
    _, cached = cache.get(PARENT)
    found = [None, progress(1, 2), None, progress(3, 4)]
    first = cache.children_answer(PARENT, cached, found)
    again = cache.children_answer(PARENT, cached, list(found))
    assert again is first  # nothing moved: the whole answer again
    moved = [None, progress(2, 2), None, found[3]]
    third = cache.children_answer(PARENT, cached, moved)
    assert third is not first
    assert third.shown[1] is not first.shown[1] and third.shown[3] is first.shown[3]
    assert [bytes(j) for j in third.shown] == [
        msgspec.json.encode(task_view(c, p)) for c, p in zip(cached, moved, strict=True)
    ]
    assert third.done == sum(1 for c in cached if c.finished_at_us is not None)
    assert third.latest_us == max(p.updated_at_us for p in moved if p is not None)
    # The answer the reused parts make is the reference answer, byte for byte.
    made = view(parent, None, (), third.shown, (third.done, third.latest_us))
    assert msgspec.json.encode(made) == msgspec.json.encode(
        task_view(parent, None, list(zip(cached, moved, strict=True)))
    )
    # Not the cached family (read from the database meanwhile): nothing to reuse.
    assert cache.children_answer(PARENT, list(cached), found) is None
    cache.forget(PARENT)
    assert cache.children_answer(PARENT, cached, found) is None


async def test_a_finished_child_shows_in_the_next_read_of_its_parent(client, make_task, clock):
    parent = await make_task(title="job")
    steps = [await make_task(parent_uuid=parent, title=f"step {n}") for n in range(3)]
    for step in steps:
        await client.put(f"/tasks/{step}", json={"current": 1, "end": 4})
    before = (await client.get(f"/tasks/{parent}")).json()
    assert before["progress"]["current"] == 0
    clock.advance(2.5)
    await client.put(f"/tasks/{steps[1]}", json={"done": True})
    after = (await client.get(f"/tasks/{parent}")).json()
    assert after["progress"]["current"] == 1 and after["progress"]["ratio"] == pytest.approx(1 / 3)
    finished = after["children"][1]
    assert finished["finished_at"] is not None and finished["duration"] == 2
    assert finished["progress"]["ratio"] == 1
    assert after["children"][0] == before["children"][0]


async def test_a_new_child_shows_in_the_next_read_of_its_parent(client, make_task):
    parent = await make_task(title="job")
    first = await make_task(parent_uuid=parent)
    await client.put(f"/tasks/{first}", json={"current": 1})
    assert len((await client.get(f"/tasks/{parent}")).json()["children"]) == 1
    second = await make_task(parent_uuid=parent)
    read = (await client.get(f"/tasks/{parent}")).json()
    assert [c["uuid"] for c in read["children"]] == [first, second]
    assert read["progress"]["end"] == 2


async def test_a_finished_task_shows_in_the_next_space_read(client, space, make_task, clock):
    task = await make_task(title="once")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 3})
    assert (await client.get(f"/spaces/{space}")).json()["tasks"][0]["finished_at"] is None
    clock.advance(61)
    await client.put(f"/tasks/{task}", json={"current": 3, "end": 3})
    (read,) = (await client.get(f"/spaces/{space}")).json()["tasks"]
    assert read["finished_at"] is not None and read["duration"] == 61
    assert read["progress"]["ratio"] == 1


async def test_reads_over_http_are_the_reference(app, client, space, make_task, clock):
    parent = await make_task(title="job ✓")
    for n in range(5):
        child = await make_task(parent_uuid=parent, title=f"step {n}")
        if n % 2:
            await client.put(f"/tasks/{child}", json={"current": n, "end": 4, "values": UNICODE})
    leaf = await make_task(title="leaf", source="src")
    await client.put(f"/tasks/{leaf}", json={"current": 2**40, "end": 1e16})
    waiting = await make_task(title="waiting")
    clock.advance(120)
    expired = await make_task(title="expired")
    await client.put(f"/tasks/{expired}", json={"current": 1, "end": 2})
    clock.advance(61)  # past the test settings' 60 s expiry: `expired` reads null progress
    service = app.state.service
    answers = []
    for task in (parent, leaf, waiting, expired):
        row_, children = await service.families.get(task)
        found = await service.progress.get_many([row_.uuid, *(c.uuid for c in children)])
        family_ = list(zip(children, found[1:], strict=True))
        expected = msgspec.json.encode(task_view(row_, found[0], family_))
        assert (await client.get(f"/tasks/{task}")).content == expected
        answers.append(msgspec.json.decode(expected))
    assert answers[3]["progress"] is None
    whole = (await client.get(f"/spaces/{space}")).content
    expected_space = {"title": "Test space", "icon": None, "tasks": answers}
    assert whole == msgspec.json.encode(expected_space)
    paged = await client.get(f"/spaces/{space}", params={"limit": "2"})
    assert paged.content == msgspec.json.encode({**expected_space, "tasks": answers[2:]})


def test_the_family_cache_holds_at_most_its_bound_dropping_the_longest_held():
    rows = [row(n) for n in range(200)]
    bound = 80 * row_bytes(rows[0])
    cache = FamilyCache(max_bytes=bound)
    for held in rows:
        cache.put((held, []), cache.generation)
        assert len(cache) <= 80 and cache.bytes_held <= bound
    assert cache.get(rows[-1].uuid) == (rows[-1], ())  # the newest are all there
    assert all(cache.get(held.uuid) is not None for held in rows[-70:])
    assert cache.get(rows[0].uuid) is None  # the oldest went first
    for held in rows[-80:]:
        cache.forget(held.uuid)
    assert len(cache) == 0 and cache.bytes_held == 0


def test_the_family_cache_counts_the_answers_it_keeps_in_its_bound():
    """A parent's children's answers, kept as JSON, count against the cache's bytes: a
    cache full of parents read often holds no more than its bound."""
    bound = 256 * 1024
    cache = FamilyCache(max_bytes=bound)
    for n in range(40):
        parent = row(10_000 + n, uuid=f"00000000-0000-4000-8000-{n:012d}")
        children = [row(100 * n + k) for k in range(50)]
        cache.put((parent, children), cache.generation)
        _, cached = cache.get(parent.uuid)
        found = [progress(1, 2, {"log": "x" * 1000}) for _ in cached]
        assert cache.children_answer(parent.uuid, cached, found) is not None
        assert cache.bytes_held <= bound
        assert cache.bytes_held > family_bytes(parent, children) + 50 * 1000
    assert cache.get(parent.uuid) is not None and len(cache) < 40


def test_the_family_cache_keeps_no_copy_of_large_children():
    """Children holding large values, or a family whose answers together pass
    KEPT_JOINED_BYTES, are not answered from the cache (the answer is then made of
    structs, encoded as it is sent): no cache copies large values outside the
    live-progress budget."""
    cache = FamilyCache()
    parent, children = row(0, uuid=PARENT), [child for child, _ in family(600)]
    cache.put((parent, children), cache.generation)
    _, cached = cache.get(PARENT)
    large = [progress(1, 2, {"log": "x" * 60_000}) for _ in cached]
    assert cache.children_answer(PARENT, cached, large) is None
    small = [progress(1, 2, {"log": "x"}) for _ in cached]
    kept = cache.children_answer(PARENT, cached, small)
    assert kept is not None and len(kept.shown.joined) <= KEPT_JOINED_BYTES
    assert cache.children_answer(PARENT, cached, small) is kept
    middling = [progress(1, 2, {"log": "x" * 1_900}) for _ in cached]  # ~1.4 MB in all
    assert cache.children_answer(PARENT, cached, middling) is None
    # Once too large, the family keeps no answer until it changes (and holds only rows).
    assert cache.children_answer(PARENT, cached, small) is None
    assert cache.bytes_held == family_bytes(parent, children)
    cache.forget(PARENT)
    cache.put((parent, children), cache.generation)
    _, cached = cache.get(PARENT)
    assert cache.children_answer(PARENT, cached, small) is not None


@pytest.mark.parametrize("at_once", [1, 2, 400])
async def test_a_batch_of_families_reads_each_family_whole_once(app, client, space, at_once):
    """`read_families` (a live round's batch) answers what `read_family` answers for each
    task, however the batch is cut into queries, and whichever of a family it names."""
    from headway.storage import queries

    made = lambda body: client.post(f"/spaces/{space}/tasks", json=body)  # noqa: E731
    parent = (await made({})).json()["uuid"]
    children = [(await made({"parent_uuid": parent})).json()["uuid"] for _ in range(3)]
    alone = (await made({})).json()["uuid"]
    wanted = [children[0], parent, children[2], alone, children[1], children[2]]
    db = app.state.service.db
    original = queries.FAMILIES_AT_ONCE
    queries.FAMILIES_AT_ONCE = at_once
    try:
        found = await queries.read_families(db.fetch, wanted)
    finally:
        queries.FAMILIES_AT_ONCE = original
    assert set(found) == set(wanted)
    for uuid in set(wanted):
        row, family = await queries.read_family(db.fetch, uuid)
        assert found[uuid] == (row, family)
    assert [c.uuid for c in found[parent][1]] == children
