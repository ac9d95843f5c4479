"""Reads rated by what they cost (HEADWAY_RATE_READS): the tasks they render, children
included, at least 1 a request, on every backend (token buckets in this process, fixed
windows in Redis). A read passes while its client's allowance is not spent, then pays for
every task it rendered; a refused read is a 429 with `Retry-After` and a JSON error,
before any byte of its answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from limits import parse_many

from headway.api.limits import TokenBuckets, rate_limiter
from headway.config import Settings
from headway.domain.clock import ManualClock

from . import test_limits
from .live_server import serving
from .test_limits import assert_refused, client_for, new_space
from .test_mcp import HANDSHAKE, JSON_RPC, rpc

# The rate tests' fixture for time passing (`limited` and `clients` are the conftest's).
time_passes = test_limits.time_passes


async def make_tasks(client: httpx.AsyncClient, space: str, count: int, **body: Any) -> list[str]:
    """`count` new tasks of `space`, oldest first: created 20 at a time, which a busy
    machine's Redis answers well within its connect timeout (200 at once did not)."""
    uuids = []
    for start in range(0, count, 20):
        batch = [
            client.post(f"/spaces/{space}/tasks", json=body) for _ in range(min(20, count - start))
        ]
        for response in await asyncio.gather(*batch):
            assert response.status_code == 201, response.text
            uuids.append(response.json()["uuid"])
    return uuids


async def reads_until_refused(client: httpx.AsyncClient, path: str) -> tuple[int, httpx.Response]:
    """GET `path` until refused (at most 10 times): how many passed, and the refusal."""
    for passed in range(10):
        response = await client.get(path)
        if response.status_code != 200:
            return passed, response
    pytest.fail(f"ten reads of {path} passed")


def assert_refused_read(response: httpx.Response) -> None:
    message = assert_refused(response, 429)
    assert response.json() == {"error": message}  # the error, and no byte of the answer
    assert "Too many tasks read" in message and "retry in" in message


async def test_a_client_reading_a_space_in_a_loop_is_refused_while_others_read_on(limited, clients):
    app = await limited(rate_reads="300/hour")  # three reads of its 100 tasks
    owner, greedy, other = (client_for(app, f"192.0.2.{n}") for n in (1, 2, 3))
    clients.extend([owner, greedy, other])
    space = await new_space(owner)
    tasks = await make_tasks(owner, space, 100)
    passed, refused = await reads_until_refused(greedy, f"/spaces/{space}")
    assert passed == 3
    assert_refused_read(refused)
    # Every read of the greedy client's is refused now, however small.
    assert_refused_read(await greedy.get(f"/tasks/{tasks[0]}"))
    assert_refused_read(await greedy.get(f"/spaces/{space}?limit=1"))
    # Another client's reads pass meanwhile, and so do the greedy one's writes.
    assert len((await other.get(f"/spaces/{space}")).json()["tasks"]) == 100
    assert (await other.get(f"/tasks/{tasks[0]}")).status_code == 200
    assert (await greedy.put(f"/tasks/{tasks[0]}", json={"current": 1})).status_code == 200


async def test_a_read_pays_for_every_page_of_a_big_space_as_it_is_sent(limited, clients):
    """A space read from the database a page at a time (200 top-level tasks, then more)
    pays for its later pages too, rendered after its answer began."""
    app = await limited(rate_reads="500/hour")
    app.state.service._small = None  # no space held whole: every read pages
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    await make_tasks(client, space, 250)
    passed, refused = await reads_until_refused(client, f"/spaces/{space}")
    assert passed == 2  # 250 each; had the first page alone been paid for, a third
    assert_refused_read(refused)


async def test_a_task_read_pays_for_its_children(limited, clients):
    app = await limited(rate_reads="50/hour")
    owner, reader = client_for(app, "192.0.2.1"), client_for(app, "192.0.2.2")
    clients.extend([owner, reader])
    space = await new_space(owner)
    parent = (await make_tasks(owner, space, 1))[0]
    await make_tasks(owner, space, 20, parent_uuid=parent)
    passed, refused = await reads_until_refused(reader, f"/tasks/{parent}")
    # 21 each: 50 left, then 29, then 8 (still unspent: it passes, into debt).
    assert passed == 3
    assert_refused_read(refused)
    # A space read pays for the children it nests too: 21 tasks with their parent.
    other = client_for(app, "192.0.2.3")
    clients.append(other)
    for _ in range(3):
        assert (await other.get(f"/spaces/{space}")).status_code == 200
    assert_refused_read(await other.get(f"/spaces/{space}"))


async def test_a_parents_estimate_pays_for_its_steps_as_its_read_does(limited, clients):
    """A parent's estimate reads every step's progress: it is billed 1 + its steps, by
    REST, through a share link and by MCP, as `GET` of the parent is."""
    app = await limited(rate_reads="50/hour", mcp_allowed_hosts=("*",))
    owner = client_for(app, "192.0.2.1")
    clients.append(owner)
    space = await new_space(owner)
    parent = (await make_tasks(owner, space, 1))[0]
    await make_tasks(owner, space, 20, parent_uuid=parent)
    share = (await owner.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    task_id = (await owner.get(f"/shared/{share}")).json()["tasks"][0]["id"]
    for n, path in enumerate(
        [f"/tasks/{parent}/estimate", f"/shared/{share}/tasks/{task_id}/estimate"]
    ):
        reader = client_for(app, f"192.0.2.{10 + n}")
        clients.append(reader)
        passed, refused = await reads_until_refused(reader, path)
        assert passed == 3  # 21 each, as test_a_task_read_pays_for_its_children
        assert_refused_read(refused)
    agent = client_for(app, "192.0.2.20", **JSON_RPC, **{"mcp-protocol-version": HANDSHAKE})
    clients.append(agent)
    call = rpc("tools/call", 1, name="get_estimate", arguments={"task_uuid": parent})
    results = [(await agent.post("/mcp", json=call)).json()["result"] for _ in range(4)]
    assert [result["isError"] for result in results] == [False, False, False, True]


async def test_share_link_reads_and_pages_are_rated_too(limited, clients):
    app = await limited(rate_reads="200/hour")
    owner, reader = client_for(app, "192.0.2.1"), client_for(app, "192.0.2.2")
    clients.extend([owner, reader])
    space = await new_space(owner)
    await make_tasks(owner, space, 100)
    link = (await owner.post(f"/spaces/{space}/shares", json={})).json()["url"]
    assert len((await reader.get(link)).json()["tasks"]) == 100
    page = await reader.get(link, headers={"accept": "text/html"})  # 1: the page alone
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert (await reader.get(f"/spaces/{space}")).status_code == 200
    assert_refused_read(await reader.get(link))
    assert_refused_read(await reader.get(f"/spaces/{space}", headers={"accept": "text/html"}))


async def test_badges_and_the_embed_are_reads_rated_too(limited, clients):
    """A task's badge costs 1, a space's badge (and Shields' JSON) the 50 newest tasks it
    sums up; a client that asks too often is refused while another still gets its badge."""
    app = await limited(rate_reads="105/hour")
    owner, greedy, other = (client_for(app, f"192.0.2.{n}") for n in (1, 2, 3))
    clients.extend([owner, greedy, other])
    space = await new_space(owner)
    await make_tasks(owner, space, 60)
    link = (await owner.post(f"/spaces/{space}/shares", json={})).json()["url"]
    for path in (f"{link}/badge.svg", f"{link}/shields.json"):  # 1 + 49, then 50
        assert (await greedy.get(path)).status_code == 200
    assert (await greedy.get(f"{link}/embed", headers={"accept": "text/html"})).status_code == 200
    refused = await greedy.get(f"{link}/badge.svg")  # 101 paid: this one would be 151
    assert refused.status_code == 200  # let through while the allowance is not spent...
    assert_refused_read(await greedy.get(f"{link}/shields.json"))  # ...then in debt
    assert (await other.get(f"{link}/badge.svg")).status_code == 200


async def test_rate_limits_off_refuse_no_read(limited, clients):
    app = await limited(rate_limits=False, rate_reads="1/hour")
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    task = (await make_tasks(client, space, 5))[0]
    link = (await client.post(f"/spaces/{space}/shares", json={})).json()["url"]
    for _ in range(5):
        for path in (f"/spaces/{space}", f"/tasks/{task}", link):
            assert (await client.get(path)).status_code == 200


async def test_a_refused_reader_reads_again_once_the_clock_has_refilled_it(
    limited, clients, time_passes, settings
):
    app = await limited(rate_reads="300/minute", rates_on_the_clock=True)
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    await make_tasks(client, space, 100)
    passed, refused = await reads_until_refused(client, f"/spaces/{space}")
    assert passed == 3
    assert_refused_read(refused)
    retry_s = int(refused.headers["retry-after"])
    assert retry_s <= 60
    await time_passes(retry_s)
    assert (await client.get(f"/spaces/{space}")).status_code == 200
    if settings.redis_url is None:
        # The read passed with 5 tokens and paid 100: the next waits out that debt.
        debt = await client.get(f"/spaces/{space}")
        assert_refused_read(debt)
        assert int(debt.headers["retry-after"]) == 20  # 96 tokens at 5 a second
        await time_passes(20)
        assert (await client.get(f"/spaces/{space}")).status_code == 200


async def test_a_dashboard_and_a_watch_on_a_large_space_pass_with_the_default_rate(
    limited, clients
):
    """The patterns of the dashboard (its page, snapshots and older pages of 50 top-level
    tasks, the probe after a failed connection) and of `headway watch` (a whole snapshot
    per connection, resyncs) on a space of 300 tasks and a family of 50 steps: nothing
    refused. (The default against a 100,000-task space: the next test.)"""
    app = await limited()
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    parent = (await make_tasks(client, space, 1))[0]
    await make_tasks(client, space, 50, parent_uuid=parent)
    await make_tasks(client, space, 299)
    base = f"/spaces/{space}"
    pages = [client.get(base, headers={"accept": "text/html"}), client.get(f"{base}?limit=1")]
    pages += [client.get(f"{base}?limit=50") for _ in range(20)]  # (re)connections
    pages += [client.get(base) for _ in range(3)]  # a watch connecting, resyncing twice
    responses = await asyncio.gather(*pages)
    oldest = responses[2].json()["tasks"][0]["created_at"]
    while True:  # "older tasks", a page at a time
        older = await client.get(base, params={"limit": 50, "before": oldest})
        responses.append(older)
        if not older.json()["tasks"]:
            break
        oldest = older.json()["tasks"][-1]["created_at"]
    assert {r.status_code for r in responses} == {200}


def test_the_default_read_rate_lets_a_dashboard_and_a_watch_of_100000_tasks_through(
    clock: ManualClock,
):
    """Against the default (token buckets, on the test's clock), a client's dashboard and
    `headway watch` on a 100,000-task space, for ten minutes, never refused; a client
    reading that space whole in a loop is refused after a few reads."""
    items = rate_limiter(Settings())._limits["reads"]
    buckets = TokenBuckets(clock, longest_s=60)
    watcher = ("reads", "192.0.2.1")

    def read(key: tuple[str, str], tasks: int) -> bool:
        if buckets.take(key, items) > 0:
            return False
        buckets.charge(key, items, tasks - 1)
        return True

    # `headway watch` connects, resyncs twice at once, then every 30 s; its owner's
    # dashboard reconnects every 2 s (a snapshot of 50) and loads older pages of 50.
    assert all(read(watcher, 100_000) for _ in range(3))
    for second in range(600):
        clock.advance(1)
        if second % 30 == 29:
            assert read(watcher, 100_000), f"the watch refused at {second} s"
        if second % 2 == 0:
            assert read(watcher, 1) and read(watcher, 50), f"the dashboard refused at {second} s"
        if second < 20:
            assert all(read(watcher, 50) for _ in range(5))
    looping = ("reads", "192.0.2.2")
    passed = 0
    while read(looping, 100_000):
        passed += 1
        clock.advance(0.8)  # what reading it takes
    assert 3 <= passed <= 4


def test_read_debt_is_at_most_one_bucket_and_paid_back_at_the_bucket_rate(clock: ManualClock):
    buckets = TokenBuckets(clock, longest_s=60)
    items = parse_many("100/second")
    key = ("reads", "192.0.2.1")
    assert buckets.take(key, items) == 0
    buckets.charge(key, items, 10_000)  # far beyond the bucket: held at minus its size
    assert buckets.take(key, items) == pytest.approx(1.01)  # from -100 to 1
    clock.advance(1.02)
    assert buckets.take(key, items) == 0


async def test_stream_snapshots_are_paid_for_and_refused_before_any_stream_byte(
    settings: Settings, empty_databases: None
):
    """A live stream's snapshot (each connection's, a resync's) pays for its tasks; once
    the client's allowance is spent, a new stream is a JSON 429, not a stream."""
    with serving(settings.with_(rate_reads="250/hour", run_worker=False)) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http)
            await make_tasks(http, space, 100)
            link = (await http.post(f"/spaces/{space}/shares", json={})).json()["url"]
            for path in (f"/spaces/{space}/events", f"{link}/events"):  # 100 each
                async with http.stream("GET", path) as stream:
                    assert stream.status_code == 200
                    lines = stream.aiter_lines()
                    assert (await anext(lines)).startswith("retry:")
                    assert (await anext(lines)).startswith("id:")
                    assert await anext(lines) == "event: snapshot"
                    assert (await anext(lines)).count('"created_at"') == 100
            assert (await http.get(f"/spaces/{space}?limit=50")).status_code == 200
            assert_refused_read(await http.get(f"/spaces/{space}/events"))


@pytest.fixture
async def empty_databases(settings: Settings) -> None:
    """Shared PostgreSQL and Redis start each test empty, as with the app fixture."""
    from headway.app import create_app

    from .conftest import empty_backend, running

    app = create_app(settings)
    async with running(app):
        await empty_backend(app, settings)


async def test_mcp_reads_are_rated_as_rest_reads_are(limited, clients):
    """`get_space` and `get_task` through `/mcp` pay for their tasks from the same
    allowance; a refusal is a tool result with the same message."""
    app = await limited(rate_reads="300/hour", mcp_allowed_hosts=("*",))
    owner = client_for(app, "192.0.2.1")
    agent = client_for(app, "192.0.2.2", **JSON_RPC, **{"mcp-protocol-version": HANDSHAKE})
    clients.extend([owner, agent])
    space = await new_space(owner)
    task = (await make_tasks(owner, space, 100))[0]

    async def call(name: str, **arguments: str) -> dict[str, Any]:
        answer = await agent.post("/mcp", json=rpc("tools/call", 1, name=name, arguments=arguments))
        assert answer.status_code == 200, answer.text
        return answer.json()["result"]

    for _ in range(3):
        result = await call("get_space", space_uuid=space)
        assert not result["isError"] and len(result["structuredContent"]["tasks"]) == 100
    refused = await call("get_task", task_uuid=task)
    assert refused["isError"]
    assert "Too many tasks read" in refused["content"][0]["text"]
    assert_refused_read(await agent.get(f"/tasks/{task}"))  # one allowance for both
    assert not (await call("create_task", space_uuid=space))["isError"]  # writes go on


def test_reads_are_taken_from_the_bucket_a_chunk_at_a_time(clock: ManualClock):
    """With a big read rate, reads are paid for 64 at a time (the hot path then costs a
    dict lookup); once the allowance is spent, the next chunk is refused."""
    from headway.domain.errors import TooManyRequests

    limiter = rate_limiter(Settings(rate_reads="64000/minute"), clock)
    key = ("reads", "192.0.2.1")
    assert limiter._buckets is not None
    for _ in range(64):
        assert limiter.counted_here("reads", key[1])
    assert limiter._buckets._state[key][0] == 64000 - 64  # one chunk, taken once
    limiter._buckets.charge(key, limiter._limits["reads"], 64000)  # a big read's pages
    with pytest.raises(TooManyRequests):
        limiter.counted_here("reads", key[1])
    # Small rates are counted a read at a time, exactly (the other tests rely on it).
    assert rate_limiter(Settings(rate_reads="300/hour"), clock)._chunk == 1
