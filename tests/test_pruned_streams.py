"""Live streams of a full space (HEADWAY_TASKS_PER_SPACE), on every backend pair: each
create removes the oldest finished top-level task, and only the streams that show it start
over. A stream whose window (the newest `limit` tasks) misses it stays open, is sent the new
tasks and pays for no snapshot; one that shows it starts over and ends up as the space read
says. An owner's delete still starts every stream of the space over."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from httpx_sse import aconnect_sse

from headway.coherence.feed import PRUNED, Change
from headway.domain.tasks import TaskView
from headway.live.events import StreamFilter
from headway.live.streams import Round, Stream

from .live_server import serving
from .test_events import WAIT_S, new_space, new_task, watching

SETTLE_S = 10.0  # a follower's view reaches the space read's within this (a hang guard)


@pytest.fixture
async def empty_databases(settings):
    """Shared PostgreSQL and Redis start each test empty (see `test_events`)."""
    from headway.app import create_app

    from .conftest import empty_backend, running

    app = create_app(settings)
    async with running(app):
        await empty_backend(app, settings)


class Follower:
    """A reader as a browser's `EventSource` is: it opens the stream again whenever it
    ends, and holds the space as its snapshots and task events say (with `limit`, the
    newest `limit` top-level tasks). Counts its snapshots; stops at a refusal (429)."""

    def __init__(self, http: httpx.AsyncClient, path: str, limit: int | None = None) -> None:
        self.limit = limit
        self.snapshots = 0
        self.refused: httpx.Response | None = None
        self.seen: set[str] = set()  # every task an event was sent of
        self._top: dict[str, dict[str, Any]] = {}
        self._steps: dict[str, dict[str, dict[str, Any]]] = {}
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._follow(http, path))

    async def _follow(self, http: httpx.AsyncClient, path: str) -> None:
        while True:
            async with aconnect_sse(http, "GET", path) as source:
                if source.response.status_code != 200:
                    await source.response.aread()
                    self.refused = source.response
                    self._changed.set()
                    return
                async for event in source.aiter_sse():
                    data = json.loads(event.data)
                    if event.event == "snapshot":
                        self.snapshots += 1
                        self._top, self._steps = {}, {}
                        for task in data["tasks"]:
                            self._put(task)
                            for step in task["children"]:
                                self._put(step)
                    elif event.event == "task":  # not `estimates`, beside the tasks
                        self.seen.add(data["uuid"])
                        self._put(data)
                    self._changed.set()

    def _put(self, task: dict[str, Any]) -> None:
        if task["parent_uuid"] is None:
            self._top[task["uuid"]] = task
        else:
            self._steps.setdefault(task["parent_uuid"], {})[task["uuid"]] = task

    def view(self) -> list[tuple[Any, ...]]:
        """The top-level tasks shown, oldest first, as `shown` puts a space read's."""
        tasks = sorted(self._top.values(), key=lambda task: task["created_at"])
        if self.limit is not None:
            tasks = tasks[-self.limit :]
        return [
            shown(task, sorted(self._steps.get(task["uuid"], {}).values(), key=_age))
            for task in tasks
        ]

    async def live(self) -> None:
        """Wait for its first snapshot."""
        await self.settled(lambda: self.snapshots > 0)

    async def settled(self, check: Any, timeout: float = SETTLE_S) -> None:
        """Wait until `check()` holds (as events come), or fail."""
        async with asyncio.timeout(timeout):
            while not check():
                assert self.refused is None, self.refused.text
                self._changed.clear()
                await self._changed.wait()

    async def shows(self, read: dict[str, Any]) -> None:
        """Wait until it shows what the space read `read` answered."""
        expected = [shown(task, task["children"]) for task in read["tasks"]]
        try:
            await self.settled(lambda: self.view() == expected)
        except TimeoutError:
            assert self.view() == expected  # the difference, named

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self._task


def _age(task: dict[str, Any]) -> str:
    return task["created_at"]


def shown(task: dict[str, Any], steps: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What a reader shows of a task: its state and its steps'."""
    return (
        task["uuid"],
        task["finished_at"],
        task["progress"],
        [(step["uuid"], step["finished_at"]) for step in steps],
    )


@contextlib.asynccontextmanager
async def following(
    http: httpx.AsyncClient, path: str, limit: int | None = None
) -> AsyncIterator[Follower]:
    follower = Follower(http, path, limit)
    try:
        await follower.live()
        yield follower
    finally:
        await follower.close()


async def finished_task(http: httpx.AsyncClient, space: str, **body: Any) -> str:
    task = await new_task(http, space, **body)
    assert (await http.put(f"/tasks/{task}", json={"done": True})).status_code == 200
    return task


async def reads_that_pass(http: httpx.AsyncClient, path: str) -> int:
    """How many reads of `path` pass before one is refused (at most 50)."""
    for passed in range(50):
        answer = await http.get(path)
        if answer.status_code == 429:
            return passed
        assert answer.status_code == 200, answer.text
    return 50


async def test_a_stream_whose_window_misses_the_pruned_tasks_stays_open_and_pays_nothing(
    settings, empty_databases
):
    """Cap 5, a stream of the newest 2, 20 creates each removing the oldest finished task
    (10 each awaited on the stream, then 10 without waiting, which may remove tasks of the
    window before the stream is sent the new ones, or new ones before they are sent):
    one snapshot (2 tasks paid for), the new tasks as events, the space read's newest 2
    in the end, and the reader's read allowance (20 tasks) still there, where a snapshot
    per create would have spent it twice over."""
    cap, limit, creates = 5, 2, 20
    served = settings.with_(tasks_per_space=cap, rate_reads="20/hour", run_worker=False)
    with serving(served) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http)
            for _ in range(cap):
                await finished_task(http, space)
            path = f"/spaces/{space}?limit={limit}"
            async with following(http, f"/spaces/{space}/events?limit={limit}", limit) as reader:
                made = []
                for _ in range(creates // 2):
                    made.append(await finished_task(http, space))
                    await reader.settled(lambda: made[-1] in reader.seen)
                made.extend([await finished_task(http, space) for _ in range(creates // 2)])
                await reader.shows((await http.get(path)).json())  # 2 tasks paid for
                assert reader.snapshots == 1
                assert set(made[-limit:]) <= reader.seen
            whole = (await http.get(f"/spaces/{space}")).json()["tasks"]  # 5 paid for
            assert [task["uuid"] for task in whole] == made[-cap:]
            # 20 - 2 (the snapshot) - 2 - 5 = 11: six reads of 2 pass, into debt for the last.
            assert await reads_that_pass(http, path) >= 5


async def test_streams_that_show_a_pruned_task_start_over_and_show_what_the_space_read_does(
    settings, empty_databases
):
    """Cap 4: two old tasks still active, a finished one (with a step), an active one. A
    new task removes the finished one. The streams left showing it start over: without a
    limit, or `state=finished`, or the newest 3 (the new task pushes out an older active
    one, not the removed one). The newest 2's and 1's do not: the new task pushes the
    removed one out of the first, and the second never showed it. Each ends up as the
    space read with its parameters says; so again when the next create removes the
    next finished one."""
    with serving(settings.with_(tasks_per_space=4, run_worker=False)) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http)
            await new_task(http, space, title="old, active")
            await new_task(http, space, title="old, active too")
            finished = await new_task(http, space, title="finished")
            await finished_task(http, space, parent_uuid=finished)  # finishes its parent
            later = await new_task(http, space, title="active")
            events = f"/spaces/{space}/events"
            queries = ("", "?state=finished", "?limit=3", "?limit=2", "?limit=1")
            async with contextlib.AsyncExitStack() as stack:
                limits = [int(query[7:]) if "limit" in query else None for query in queries]
                readers = [
                    await stack.enter_async_context(following(http, events + query, limit))
                    for query, limit in zip(queries, limits, strict=True)
                ]
                starting_over, going_on = readers[:3], readers[3:]

                async def all_show(snapshots: int) -> None:
                    for reader in starting_over:
                        await reader.settled(lambda r=reader: r.snapshots == snapshots)
                    for reader, query in zip(readers, queries, strict=True):
                        await reader.shows((await http.get(f"/spaces/{space}{query}")).json())
                    assert [reader.snapshots for reader in going_on] == [1, 1]

                newer = await new_task(http, space, title="removes the finished one")
                assert (await http.get(f"/tasks/{finished}")).status_code == 404
                await all_show(2)
                assert all(newer in reader.seen for reader in going_on)
                # The newest 3 are (old active too, later, newer): `later` is not the oldest.
                assert (await http.put(f"/tasks/{later}", json={"done": True})).status_code == 200
                finished_only = readers[1]
                await finished_only.settled(lambda: later in finished_only.seen)  # shown there
                await new_task(http, space, title="removes the next")
                assert (await http.get(f"/tasks/{later}")).status_code == 404
                await all_show(3)


async def test_an_owners_delete_still_starts_every_stream_over(settings, empty_databases):
    with serving(settings.with_(run_worker=False)) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http)
            doomed = await new_task(http, space, title="doomed")
            await new_task(http, space, title="newer")
            async with watching(http, f"/spaces/{space}/events?limit=1") as watcher:
                assert [t["title"] for t in (await watcher.snapshot())["tasks"]] == ["newer"]
                assert (await http.delete(f"/tasks/{doomed}")).status_code == 204
                await asyncio.wait_for(watcher.ended.wait(), WAIT_S)


async def test_a_task_pruned_while_its_event_is_read_is_not_sent(settings, empty_databases):
    """A round that read a task before it was pruned leaves it out: the streams were told
    it went, and those that do not show it went on."""
    from headway.app import create_app

    app = create_app(settings.with_(run_worker=False))
    with serving(settings, app=app) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http)
            older = await new_task(http, space, title="older")
            async with watching(http, f"/spaces/{space}/events?limit=1") as watcher:
                await watcher.snapshot()
                newer = await new_task(http, space, title="newer")
                assert [t["uuid"] for t in await watcher.task_events(1)] == [newer]
                # `older` is still sent events (it was in the snapshot), but not shown.
                service = app.state.service
                views = service.tasks.event_views

                async def pruned_as_read(uuids):
                    found = await views(uuids)
                    if older in uuids:
                        app.state.live.feed.publish(Change(PRUNED, space, older))
                    return found

                service.tasks.event_views = pruned_as_read
                await http.put(f"/tasks/{older}", json={"current": 1})
                await http.put(f"/tasks/{newer}", json={"current": 2})
                [event] = await watcher.task_events(1)
                assert (event["uuid"], event["progress"]["current"]) == (newer, 2)
                assert not watcher.ended.is_set()


def _view(uuid: str, created_at: str, parent: str | None = None) -> TaskView:
    return TaskView(uuid, "s", parent, None, None, created_at, None, None, None, [])


def test_a_pruned_task_starts_its_window_over_only_if_the_new_task_leaves_it_there():
    oldest_went = StreamFilter(None, "t2", {"b": "t2", "c": "t3"}, 2)
    assert not oldest_went.pruned("b", 0)  # waits for the round that renders the new one
    assert not oldest_went.still_shows_pruned(0)  # a round begun before it went
    assert oldest_went.admits(_view("d", "t4"))  # the new one pushes it out
    assert not oldest_went.still_shows_pruned(1)
    newer_went = StreamFilter(None, "t2", {"b": "t2", "c": "t3"}, 2)
    assert not newer_went.pruned("c", 0)
    assert newer_went.admits(_view("d", "t4"))  # pushes `b` out: `c` is still shown
    assert newer_went.still_shows_pruned(1)
    assert not newer_went.pruned("a", 1) and not newer_went.still_shows_pruned(2)  # not shown
    unlimited = StreamFilter("finished", None, {"b": "t2"}, None)
    assert unlimited.pruned("b", 0) and not unlimited.pruned("z", 0)


async def test_a_stream_starts_over_only_for_a_pruned_task_it_would_go_on_showing():
    def stream(window: dict[str, str] | None, limit: int | None = None) -> Stream:
        made = Stream(cast(Any, None), None, cast(Any, None))
        made.follow(None if window is None else StreamFilter(None, None, window, limit))
        return made

    quiet = stream({"b": "t2"}, 1)
    quiet.pruned("a", 0)
    assert quiet.ended is None
    everything = stream(None)
    everything.pruned("a", 0)
    assert everything.ended == "resync"
    holding = stream({"a": "t1", "b": "t2"}, 2)
    holding.offer(Round([_view("x", "t3", parent="a"), _view("a", "t1")], 1, 1))  # unsent
    holding.pruned("a", 1)
    holding.offer(Round([_view("d", "t4")], 3, 2))  # the new one
    assert b'"uuid":"d"' in (sent := await holding.next_events() or b"")
    assert b'"uuid":"a"' not in sent and b'"uuid":"x"' not in sent
    assert holding.ended is None  # `d` pushed `a` out
    pushed_out = stream({"b": "t2"}, 1)
    pushed_out.pruned("b", 0)
    pushed_out.offer(Round([_view("d", "t4")], 1, 1))
    assert await pushed_out.next_events() and pushed_out.ended is None
    left_shown = stream({"b": "t2", "c": "t3"}, 2)
    left_shown.pruned("c", 0)
    left_shown.offer(Round([_view("d", "t4")], 1, 1))
    assert await left_shown.next_events()  # the new task's event, then the end
    assert left_shown.ended == "resync" and await left_shown.next_events() is None
    early = Stream(cast(Any, None), None, cast(Any, None))
    early.pruned("a", 0)  # while its snapshot is sent: judged once it is
    early.pruned("b", 0)
    assert early.ended is None
    early.follow(StreamFilter(None, None, {"b": "t2", "c": "t3"}, 2))
    early.offer(Round([_view("d", "t4")], 1, 1))
    await early.next_events()
    assert early.ended is None  # `b` was pushed out by `d`
