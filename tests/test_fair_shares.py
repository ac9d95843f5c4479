"""Fair shares of the live-progress budget and of live streams, on every backend: one
client address (an IPv6 /64) holds at most its share of the budget however many spaces it
spreads over, and gets 429 beyond while every other client goes on; finished and deleted
progress frees its share at once; a network (an IPv6 /48) holds a bounded number of
streams."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis.asyncio as redis

from headway.api.addresses import network_of
from headway.api.holdings import Holdings
from headway.progress import ClientAllowanceFull

from .conftest import pairs
from .live_server import serving
from .test_events import watching
from .test_limits import HEAVY, assert_refused, big_values, client_for, new_space

BUDGET = 1024 * 1024
# A proxy the tests stand behind: X-Forwarded-For names the client.
PROXY = "127.0.0.1"
GREEDY = "2001:db8:aa:1::7"  # counted as 2001:db8:aa:1::/64
OTHER = "198.51.100.20"


async def fair(limited: Any, **changes: Any) -> Any:
    """An app with a 1 MiB budget, an eighth for a space, a quarter for a client."""
    settings = {
        "progress_memory": BUDGET,
        "progress_memory_per_space": 0.125,
        "progress_memory_per_client": 0.25,
        "trusted_proxies": (PROXY,),
        **changes,
    }
    return await limited(**settings)


def grown() -> dict[str, str]:
    """Values 300 bytes larger than `big_values()`."""
    return {**big_values(), "more": "y" * 290}


# About 1 KB larger than HEAVY: a larger allocation in Redis too (its size classes are a
# quarter of a power of two apart: 4 KB values and 300 bytes more are counted the same).
HEAVIER = {**HEAVY, "more": "y" * 1000}


def greedy_and_other(app: Any, clients: list[httpx.AsyncClient]) -> tuple[Any, Any]:
    """A client behind the trusted proxy (IPv6, by X-Forwarded-For) and one of its own."""
    greedy = client_for(app, PROXY, **{"x-forwarded-for": GREEDY})
    other = client_for(app, OTHER)
    clients.extend((greedy, other))
    return greedy, other


async def fill_share(client: httpx.AsyncClient, spaces: list[str]) -> tuple[list[str], Any]:
    """Create tasks round the spaces and report 4 KB values (`HEAVY`) to each until
    refused; the tasks that hold progress, and the refusal."""
    held: list[str] = []
    for n in range(500):
        created = await client.post(f"/spaces/{spaces[n % len(spaces)]}/tasks", json={})
        if created.status_code != 201:
            return held, created
        task = created.json()["uuid"]
        reported = await client.put(f"/tasks/{task}", json={"values": HEAVY})
        if reported.status_code != 200:
            return held, reported
        held.append(task)
    pytest.fail("the client's share never refused it")


async def test_a_greedy_client_over_many_spaces_gets_429_while_another_goes_on(limited, clients):
    app = await fair(limited)
    greedy, other = greedy_and_other(app, clients)
    spaces = [await new_space(greedy) for _ in range(8)]  # 8 x 1/8: the whole budget
    held, refused = await fill_share(greedy, spaces)
    assert "Your address holds as much live progress" in assert_refused(refused, 429)
    # It holds about its quarter, far from what its eight spaces' shares would allow.
    assert BUDGET * 0.1 < len(held) * 4000 < BUDGET * 0.25
    # Its tasks that hold progress report on, as long as they do not grow.
    smaller = {**HEAVY, "log0": "x" * 990}
    assert (await greedy.put(f"/tasks/{held[0]}", json={"values": smaller})).is_success
    # Grown to its whole share, its new tasks are refused too, before anything is made.
    for task in held:
        response = await greedy.put(f"/tasks/{task}", json={"values": HEAVIER})
        if response.status_code == 429:
            break
    created = await greedy.post(f"/spaces/{spaces[0]}/tasks", json={})
    assert "live progress" in assert_refused(created, 429)
    # The other client's creates and reports all pass, in one space or many.
    mine = [await new_space(other) for _ in range(3)]
    for n in range(60):
        task = (await other.post(f"/spaces/{mine[n % 3]}/tasks", json={})).json()["uuid"]
        response = await other.put(f"/tasks/{task}", json={"current": 1, "values": big_values()})
        assert response.status_code == 200, response.text
        again = await other.put(f"/tasks/{task}", json={"current": 2, "values": grown()})
        assert again.status_code == 200, again.text


async def test_an_ipv6_client_is_counted_by_its_64_whatever_its_address(limited, clients):
    app = await fair(limited)
    one = client_for(app, PROXY, **{"x-forwarded-for": GREEDY})
    same_64 = client_for(app, PROXY, **{"x-forwarded-for": "2001:db8:aa:1:ffff::1"})
    next_64 = client_for(app, PROXY, **{"x-forwarded-for": "2001:db8:aa:2::7"})
    clients.extend((one, same_64, next_64))
    spaces = [await new_space(one) for _ in range(8)]
    _, refused = await fill_share(one, spaces)
    assert_refused(refused, 429)
    space = await new_space(same_64)
    task = (await same_64.post(f"/spaces/{space}/tasks", json={})).json()
    response = await same_64.put(f"/tasks/{task['uuid']}", json={"values": HEAVY})
    assert_refused(response, 429)
    task = (await next_64.post(f"/spaces/{space}/tasks", json={})).json()
    response = await next_64.put(f"/tasks/{task['uuid']}", json={"values": HEAVY})
    assert response.status_code == 200


async def test_finished_progress_frees_the_share_and_still_reads_its_last_state(limited, clients):
    app = await fair(limited)
    greedy, _ = greedy_and_other(app, clients)
    spaces = [await new_space(greedy) for _ in range(8)]
    held, refused = await fill_share(greedy, spaces)
    assert_refused(refused, 429)
    # Finishing half of its tasks gives their room back at once, not a day later.
    for task in held[: len(held) // 2]:
        assert (await greedy.put(f"/tasks/{task}", json={"done": True})).status_code == 200
    space = spaces[0]
    for _ in range(10):
        task = (await greedy.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        response = await greedy.put(f"/tasks/{task}", json={"values": big_values()})
        assert response.status_code == 200, response.text
    # A finished task still reads its last numbers and values, as the spec keeps them.
    read = (await greedy.get(f"/tasks/{held[0]}")).json()
    assert read["finished_at"] is not None
    assert read["progress"]["values"] == HEAVY
    assert read["progress"]["ratio"] == 1


async def test_deleted_progress_frees_the_share(limited, clients):
    app = await fair(limited)
    greedy, _ = greedy_and_other(app, clients)
    spaces = [await new_space(greedy) for _ in range(8)]
    held, refused = await fill_share(greedy, spaces)
    assert_refused(refused, 429)
    for task in held[:20]:
        assert (await greedy.delete(f"/tasks/{task}")).status_code == 204
    await greedy.delete(f"/spaces/{spaces[1]}")
    task = (await greedy.post(f"/spaces/{spaces[0]}/tasks", json={})).json()["uuid"]
    response = await greedy.put(f"/tasks/{task}", json={"values": big_values()})
    assert response.status_code == 200, response.text


async def test_a_clients_finished_progress_beyond_its_share_gives_way_oldest_first(
    limited, clients, clock
):
    """Finished progress counts against no share of live progress, but no client keeps
    more than its share of it: beyond, its own oldest reads as expired. Another client's
    finished progress is untouched."""
    app = await fair(limited)
    greedy, other = greedy_and_other(app, clients)
    kept_space = await new_space(other)
    kept = (await other.post(f"/spaces/{kept_space}/tasks", json={})).json()["uuid"]
    done = {"values": HEAVY, "done": True}
    assert (await other.put(f"/tasks/{kept}", json=done)).status_code == 200
    spaces = [await new_space(greedy) for _ in range(8)]
    finished: list[str] = []
    for n in range(100):  # about 1.8 times its share, every one finished at once
        task = (await greedy.post(f"/spaces/{spaces[n % 8]}/tasks", json={})).json()["uuid"]
        response = await greedy.put(f"/tasks/{task}", json=done)
        assert response.status_code == 200, response.text
        finished.append(task)
        clock.advance(us=1)  # one after the other, as writes come
    oldest = (await greedy.get(f"/tasks/{finished[0]}")).json()
    assert oldest["finished_at"] is not None
    assert oldest["progress"]["ratio"] == 1 and oldest["progress"]["values"] == {}
    assert oldest["progress"]["current"] is None and oldest["progress"]["updated_at"] is None
    newest = (await greedy.get(f"/tasks/{finished[-1]}")).json()
    assert newest["progress"]["values"] == HEAVY
    theirs = (await other.get(f"/tasks/{kept}")).json()
    assert theirs["progress"]["values"] == HEAVY
    # And the greedy client still creates and reports: none of that was live.
    task = (await greedy.post(f"/spaces/{spaces[0]}/tasks", json={})).json()["uuid"]
    assert (await greedy.put(f"/tasks/{task}", json={"current": 1})).status_code == 200


@pytest.mark.parametrize("backend", pairs(progress="memory"), indirect=True)
async def test_live_progress_takes_room_from_the_largest_keeper_of_finished_progress(
    limited, clients
):
    """In memory the whole budget is bounded too: when live progress needs room held by
    finished progress, the client keeping the most finished progress gives it first."""
    app = await fair(limited, progress_memory_per_client=0.5, progress_memory_per_space=1.0)
    store = app.state.service.progress
    keeper = client_for(app, "192.0.2.1")
    small = client_for(app, "192.0.2.2")
    live = [client_for(app, f"192.0.2.{n}") for n in (10, 11)]
    clients.extend((keeper, small, *live))
    done = {"values": HEAVY, "done": True}

    async def finish_tasks(client: httpx.AsyncClient, count: int) -> list[str]:
        space = await new_space(client)
        made = []
        for _ in range(count):
            task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
            assert (await client.put(f"/tasks/{task}", json=done)).status_code == 200
            made.append(task)
        return made

    theirs = await finish_tasks(small, 10)
    mine = await finish_tasks(keeper, 90)
    assert store.bytes_used > BUDGET * 0.4
    for client in live:  # 90 each: four fifths of the budget live, whatever an entry costs
        space = await new_space(client)
        for _ in range(90):
            task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
            response = await client.put(f"/tasks/{task}", json={"values": HEAVY})
            if response.status_code != 200:
                assert_refused(response, 429)
                break
    assert store.bytes_used <= store.budget_bytes
    assert (await keeper.get(f"/tasks/{mine[0]}")).json()["progress"]["values"] == {}
    for task in theirs:
        assert (await small.get(f"/tasks/{task}")).json()["progress"]["values"] == HEAVY


async def test_a_create_over_the_share_is_refused_by_mcp_as_by_rest(limited, clients):
    app = await fair(limited, progress_memory_per_client=0.1, mcp_allowed_hosts=("*",))
    greedy, _ = greedy_and_other(app, clients)
    spaces = [await new_space(greedy) for _ in range(4)]
    held, _ = await fill_share(greedy, spaces)
    for task in held:  # grow to the whole share
        if (await greedy.put(f"/tasks/{task}", json={"values": HEAVIER})).is_error:
            break
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "create_task", "arguments": {"space_uuid": spaces[0]}},
    }
    headers = {"accept": "application/json, text/event-stream"}
    answer = (await greedy.post("/mcp", json=call, headers=headers)).json()
    assert answer["result"]["isError"] is True
    assert "live progress" in answer["result"]["content"][0]["text"]


# --- Streams per network ----------------------------------------------------------------


def test_a_network_is_an_ipv6_48_and_an_ipv4_address_is_its_own():
    assert network_of("2001:db8:aa:1::/64") == "2001:db8:aa::/48"
    assert network_of("2001:db8:aa:ffff::/64") == "2001:db8:aa::/48"
    assert network_of("198.51.100.20") == "198.51.100.20"
    assert network_of("unknown") == "unknown"


def test_holdings_cap_each_client_and_each_network_and_give_places_back():
    holdings = Holdings(per_client=2, per_network=3, what="live streams")
    holdings.take("2001:db8:aa:1::/64")
    holdings.take("2001:db8:aa:1::/64")
    with pytest.raises(Exception, match="Your address holds 2"):
        holdings.take("2001:db8:aa:1::/64")
    holdings.take("2001:db8:aa:2::/64")
    with pytest.raises(Exception, match=r"Your network \(2001:db8:aa::/48\) holds 3"):
        holdings.take("2001:db8:aa:3::/64")
    holdings.take("2001:db8:bb:1::/64")  # another /48
    holdings.give_back("2001:db8:aa:1::/64")
    holdings.take("2001:db8:aa:3::/64")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_open_streams_are_capped_per_48(settings):
    served = settings.with_(
        max_streams=20, streams_per_client=2, streams_per_network=3, trusted_proxies=(PROXY,)
    )

    def at(address: str) -> dict[str, str]:
        return {"x-forwarded-for": address}

    with serving(served) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http)
            path = f"/spaces/{space}/events"
            async with (
                watching(http, path, **at("2001:db8:aa:1::1")) as one,
                watching(http, path, **at("2001:db8:aa:1::2")) as two,
                watching(http, path, **at("2001:db8:aa:2::1")) as three,
            ):
                for watcher in (one, two, three):
                    await watcher.snapshot()
                refused = await http.get(path, headers=at("2001:db8:aa:3::1"))
                assert "network (2001:db8:aa::/48)" in assert_refused(refused, 429)
                async with (
                    watching(http, path, **at("2001:db8:bb:1::1")) as elsewhere,
                    watching(http, path, **at(OTHER)) as ipv4,
                ):
                    await elsewhere.snapshot()
                    await ipv4.snapshot()
            # Closed streams give their places back.
            async with watching(http, path, **at("2001:db8:aa:3::1")) as again:
                await again.snapshot()


def test_client_share_full_is_a_429_with_retry_after():
    refusal = ClientAllowanceFull()
    assert refusal.status == 429 and int(refusal.headers["retry-after"]) > 0


async def test_a_held_parent_finished_by_its_done_frees_its_own_progress(limited, clients, clock):
    """A parent's own values count as live while it is active (held open by them until
    its own `done`, whatever its steps do); once finished, they are kept for reading and
    no longer count against its client."""
    app = await fair(limited, progress_memory_per_client=0.03)  # about 31 KB
    greedy, _ = greedy_and_other(app, clients)
    space = await new_space(greedy)
    parents = []
    for _ in range(30):
        parent = (await greedy.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        step = await greedy.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})
        response = await greedy.put(f"/tasks/{parent}", json={"values": big_values()})
        clock.advance(us=1)  # one after the other, as writes come
        if response.status_code == 429:
            break
        parents.append((parent, step.json()["uuid"]))
    else:
        pytest.fail("the client's share never refused it")
    for parent, step in parents:
        assert (await greedy.put(f"/tasks/{step}", json={"done": True})).status_code == 200
        clock.advance(us=1)
        assert (await greedy.get(f"/tasks/{parent}")).json()["finished_at"] is None  # held
        assert (await greedy.put(f"/tasks/{parent}", json={"done": True})).status_code == 200
        clock.advance(us=1)
    read = (await greedy.get(f"/tasks/{parents[-1][0]}")).json()  # (its share of finished
    assert read["finished_at"] is not None  # progress holds the newest, at least)
    assert read["progress"]["values"] == big_values()
    task = (await greedy.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    assert (await greedy.put(f"/tasks/{task}", json={"values": big_values()})).status_code == 200


# --- A space's share, in memory and in Redis ---------------------------------------------


async def fill_space(client: httpx.AsyncClient, space: str) -> tuple[list[str], Any]:
    """Create tasks in the space and report 1 KB values to each until refused; the tasks
    that hold progress, and the refusal (503: the space's share)."""
    held: list[str] = []
    for _ in range(500):
        task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        response = await client.put(f"/tasks/{task}", json={"values": big_values()})
        if response.status_code != 200:
            assert "This space" in assert_refused(response, 503)
            return held, task
        held.append(task)
    pytest.fail("the space's share never refused it")


async def space_holds(app: Any, space: str) -> int:
    """The bytes of live progress the app's store counts for the space."""
    store = app.state.service.progress
    if store.name == "memory":
        return store.space_holds(space)
    admin = redis.Redis.from_url(app.state.settings.redis_url)
    try:
        return int(await admin.hget(f"headway:space:{space}", "live") or 0)
    finally:
        await admin.aclose()


async def test_a_full_space_has_room_again_as_its_progress_finishes_is_deleted_or_expires(
    limited, clients, clock
):
    app = await fair(limited, progress_memory_per_client=1.0)  # the space's share: 128 KiB
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    held, refused = await fill_space(client, space)
    # Values take most of the share; each entry's own cost (with its estimate's instants)
    # the rest.
    assert BUDGET * 0.125 * 0.9 * 0.4 < len(held) * 1000 < BUDGET * 0.125 * 0.9
    assert 0 < await space_holds(app, space) <= BUDGET * 0.125 * 0.9
    # Finishing one gives its room back at once; so does deleting one, or a parent's own
    # `done` (its own progress held it open past its last step).
    parent = held[2]
    step = (await client.post(f"/spaces/{space}/tasks", json={"parent_uuid": parent})).json()
    assert (await client.put(f"/tasks/{step['uuid']}", json={"done": True})).is_success
    for free in (
        client.put(f"/tasks/{held[0]}", json={"done": True}),
        client.delete(f"/tasks/{held[1]}"),
        client.put(f"/tasks/{parent}", json={"done": True}),
    ):
        assert (await free).is_success
        response = await client.put(f"/tasks/{refused}", json={"values": big_values()})
        assert response.status_code == 200, response.text
        refused = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        response = await client.put(f"/tasks/{refused}", json={"values": big_values()})
        assert "This space" in assert_refused(response, 503)
    # Expired progress frees its room too.
    clock.advance(61)
    assert (await client.put(f"/tasks/{refused}", json={"values": big_values()})).is_success
    # A deleted space leaves nothing counted.
    other = await new_space(client)
    await fill_space(client, other)
    assert await space_holds(app, other) > 0
    assert (await client.delete(f"/spaces/{other}")).status_code == 204
    await app.state.sweeper.remove()  # its progress goes first, in the background
    assert await space_holds(app, other) == 0


@pytest.mark.parametrize("backend", pairs(progress="redis"), indirect=True)
async def test_instances_on_one_redis_count_one_share_of_a_space(limited, clients):
    """Two instances of the service on one Redis (and one database): a space filled
    through both holds one share, not one per instance."""
    one = await fair(limited, progress_memory_per_client=1.0)
    other = await fair(limited, progress_memory_per_client=1.0)
    through = [client_for(one), client_for(other)]
    clients.extend(through)
    space = await new_space(through[0])
    accepted = [0, 0]
    for n in range(500):
        instance = n % 2
        created = await through[instance].post(f"/spaces/{space}/tasks", json={})
        task = created.json()["uuid"]
        response = await through[1 - instance].put(f"/tasks/{task}", json={"values": big_values()})
        if response.status_code != 200:
            assert "This space" in assert_refused(response, 503)
            break
        accepted[1 - instance] += 1
    else:
        pytest.fail("the space's share never refused it")
    assert sum(accepted) * 1000 < BUDGET * 0.125 * 0.9  # one share between them
    assert min(accepted) >= max(accepted) - 1
    response = await through[0].put(f"/tasks/{task}", json={"values": big_values()})
    assert "This space" in assert_refused(response, 503)  # the other sees it full too


@pytest.mark.parametrize("backend", pairs(progress="redis"), indirect=True)
async def test_a_full_redis_takes_room_from_the_largest_keeper_of_finished_progress(
    limited, clients, clock
):
    """Redis's budget is its maxmemory: when it is full, finished progress gives way to
    live progress (the client keeping the most first, its oldest first), whether the
    report's rate counter or its progress meets the full Redis first."""
    app = await fair(limited, progress_memory_per_client=0.5, progress_memory_per_space=1.0)
    keeper = client_for(app, "192.0.2.1")
    small = client_for(app, "192.0.2.2")
    live = client_for(app, "192.0.2.10")
    clients.extend((keeper, small, live))
    done = {"values": HEAVY, "done": True}

    async def finish_tasks(client: httpx.AsyncClient, count: int) -> list[str]:
        space = await new_space(client)
        made = []
        for _ in range(count):
            task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
            assert (await client.put(f"/tasks/{task}", json=done)).status_code == 200
            made.append(task)
            clock.advance(us=1)  # one after the other, as writes come
        return made

    theirs = await finish_tasks(small, 5)
    mine = await finish_tasks(keeper, 75)
    space = await new_space(live)
    tasks = [(await live.post(f"/spaces/{space}/tasks", json={})).json()["uuid"] for _ in range(31)]
    admin = redis.Redis.from_url(app.state.settings.redis_url)
    try:
        used = (await admin.info("memory"))["used_memory"]
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", used + 64 * 1024)
        for task in tasks[:30]:  # about 140 KB of live progress: more than is left
            response = await live.put(f"/tasks/{task}", json={"values": HEAVY})
            assert response.status_code == 200, response.text
        # Full before the request comes: its rate counter is refused first, and makes room.
        used = (await admin.info("memory"))["used_memory"]
        await admin.config_set("maxmemory", used - 16 * 1024)
        response = await live.put(f"/tasks/{tasks[30]}", json={"values": HEAVY})
        assert response.status_code == 200, response.text
    finally:
        await admin.config_set("maxmemory", 0)
        await admin.aclose()
    assert (await keeper.get(f"/tasks/{mine[0]}")).json()["progress"]["values"] == {}
    assert (await keeper.get(f"/tasks/{mine[-1]}")).json()["progress"]["values"] == HEAVY
    for task in theirs:
        assert (await small.get(f"/tasks/{task}")).json()["progress"]["values"] == HEAVY
