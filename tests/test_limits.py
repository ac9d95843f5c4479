"""Abuse limits: rates per client address (429) and the live-progress budget (503), on
every backend. Every refusal carries `Retry-After` and a JSON error, and stores nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import httpx
import pytest
import redis.asyncio as redis
from limits import parse_many
from starlette.applications import Starlette

from headway.api.addresses import ClientAddresses
from headway.api.limits import rate_limiter
from headway.config import Settings
from headway.domain.clock import ManualClock

from .conftest import pairs
from .live_server import LiveServer
from .test_events import watching


@pytest.fixture
def time_passes(settings: Settings, clock: ManualClock) -> Callable[[float], Awaitable[None]]:
    """Move time forward by `seconds` for rate counters: the test's clock, which token
    buckets in memory count on, and Redis' sliding windows, which are keys with a TTL
    (each TTL shortened by as much, or the key dropped, as if that time had passed)."""

    async def advance(seconds: float) -> None:
        clock.advance(seconds)
        if settings.redis_url is None:
            return
        passed_ms = round(seconds * 1000)
        admin = redis.Redis.from_url(settings.redis_url)
        try:
            async for key in admin.scan_iter(match="headway:rate*"):
                left_ms = await admin.pttl(key)  # -1: no TTL, -2: gone
                if left_ms > passed_ms:
                    await admin.pexpire(key, left_ms - passed_ms)
                elif left_ms > 0:
                    await admin.delete(key)
        finally:
            await admin.aclose()

    return advance


def client_for(app: Starlette, address: str = "127.0.0.1", **headers: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://headway.test", headers=headers)


def assert_refused(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["retry-after"]) >= 1
    return response.json()["error"]


async def new_space(client: httpx.AsyncClient) -> str:
    response = await client.post("/spaces", json={})
    assert response.status_code == 201, response.text
    return response.json()["uuid"]


# --- Rates ------------------------------------------------------------------------------


async def test_task_creates_over_the_rate_are_refused_429_and_store_nothing(limited, clients):
    app = await limited(rate_tasks="3/minute")
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    for _ in range(3):
        assert (await client.post(f"/spaces/{space}/tasks", json={})).status_code == 201
    message = assert_refused(await client.post(f"/spaces/{space}/tasks", json={"title": "x"}), 429)
    assert "Too many tasks" in message
    assert len((await client.get(f"/spaces/{space}")).json()["tasks"]) == 3


async def test_a_rate_is_counted_per_client_address(limited, clients):
    app = await limited(rate_spaces="2/minute")
    first, second = client_for(app, "127.0.0.2"), client_for(app, "127.0.0.3")
    clients.extend([first, second])
    await new_space(first)
    await new_space(first)
    assert_refused(await first.post("/spaces", json={}), 429)
    await new_space(second)  # another address is not affected


async def test_ipv4_mapped_clients_are_each_their_own_ipv4_address(limited, clients):
    """A dual-stack listener (or a proxy) writes IPv4 clients as `::ffff:a.b.c.d`: each is
    its IPv4 address, not the /64 every mapped address (and `::1`) shares; a trusted
    proxy written so is trusted as its IPv4 address."""
    app = await limited(rate_spaces="2/minute")
    first, second = client_for(app, "::ffff:192.0.2.1"), client_for(app, "::ffff:192.0.2.2")
    same = client_for(app, "192.0.2.1")
    clients.extend([first, second, same])
    await new_space(first)
    await new_space(first)
    assert_refused(await first.post("/spaces", json={}), 429)
    assert_refused(await same.post("/spaces", json={}), 429)  # the same client
    await new_space(second)  # another client is not affected
    limiter = ClientAddresses(("10.0.0.0/8",))
    proxied = [(b"x-forwarded-for", b"::ffff:198.51.100.7")]
    assert limiter.client_address("::ffff:10.1.2.3", proxied) == "198.51.100.7"
    assert limiter.client_address("::ffff:c000:201") == "192.0.2.1"


async def test_the_client_wheel_has_a_rate_of_its_own(limited, clients):
    """`GET /client/<wheel>` (428 KB) is rated per client address (HEADWAY_RATE_WHEELS);
    `GET /client`, a line of text, is not; with rate limits off, neither."""
    from headway.api import wheel

    path = f"/client/{wheel.file_name()}"
    app = await limited(rate_wheels="2/minute")
    client, other = client_for(app, "192.0.2.1"), client_for(app, "192.0.2.2")
    clients.extend([client, other])
    for _ in range(2):
        assert (await client.get(path)).status_code == 200
    assert "Too many client wheels downloaded" in assert_refused(await client.get(path), 429)
    assert (await client.get("/client")).status_code == 200
    assert (await other.get(path)).status_code == 200
    unlimited = client_for(await limited(rate_wheels="1/minute", rate_limits=False))
    clients.append(unlimited)
    for _ in range(3):
        assert (await unlimited.get(path)).status_code == 200


async def test_reports_and_report_by_url_share_the_report_rate(limited, clients, make_task):
    app = await limited(rate_reports="4/minute")
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    for current in range(2):
        assert (await client.put(f"/tasks/{task}", json={"current": current})).status_code == 200
        assert (await client.get(f"/tasks/{task}/report?current={current}")).status_code == 200
    assert_refused(await client.put(f"/tasks/{task}", json={"current": 9, "end": 9}), 429)
    assert_refused(await client.get(f"/tasks/{task}/report?done=true"), 429)
    # The refused finish changed nothing, and reads are never counted.
    read = (await client.get(f"/tasks/{task}")).json()
    assert read["finished_at"] is None and read["progress"]["current"] == 1


async def test_webhook_registrations_and_mcp_requests_are_rated(limited, clients):
    app = await limited(rate_webhooks="1/minute", rate_tasks="1/minute", mcp_allowed_hosts=("*",))
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    url = {"url": "https://93.184.215.14/hook"}
    assert (await client.post(f"/spaces/{space}/webhooks", json=url)).status_code in (201, 422)
    assert_refused(await client.post(f"/spaces/{space}/webhooks", json=url), 429)
    mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"accept": "application/json, text/event-stream"}
    assert (await client.post("/mcp", json=mcp, headers=accept)).status_code == 200
    assert_refused(await client.post("/mcp", json=mcp, headers=accept), 429)


async def test_rate_limits_off_never_refuse(limited, clients):
    app = await limited(rate_limits=False, rate_spaces="1/minute")
    client = client_for(app)
    clients.append(client)
    for _ in range(5):
        await new_space(client)


async def test_a_refused_client_may_go_on_once_its_retry_after_has_passed(
    limited, clients, time_passes
):
    app = await limited(rate_spaces="4/second", rates_on_the_clock=True)
    client = client_for(app)
    clients.append(client)
    for _ in range(4):
        await new_space(client)
    response = await client.post("/spaces", json={})
    assert_refused(response, 429)
    assert response.headers["retry-after"] == "1"
    # Not yet: a token bucket has refilled 0.8 of a token, Redis' window has not moved on.
    await time_passes(0.2)
    assert_refused(await client.post("/spaces", json={}), 429)
    await time_passes(0.8)
    await new_space(client)


def test_a_bucket_refills_at_its_rate_and_holds_at_most_its_size(clock):
    from headway.api.limits import TokenBuckets

    buckets = TokenBuckets(clock, longest_s=60)
    items = parse_many("2/second;5/minute")
    key = ("spaces", "192.0.2.1")
    assert [buckets.take(key, items) for _ in range(2)] == [0, 0]
    assert buckets.take(key, items) == pytest.approx(0.5)  # the next second-token
    clock.advance(0.5)
    assert buckets.take(key, items) == 0
    clock.advance(3600)  # refilled, but never beyond a bucket's size
    assert [buckets.take(key, items) for _ in range(2)] == [0, 0]
    assert buckets.take(key, items) > 0


async def test_idle_buckets_are_dropped_so_many_addresses_cannot_grow_memory(limited, clock):
    from headway.api.limits import TokenBuckets

    buckets = TokenBuckets(clock, longest_s=60)
    items = parse_many("5/second;100/minute")
    for i in range(TokenBuckets.SWEEP_ABOVE):
        assert buckets.take(("tasks", f"10.0.{i // 256}.{i % 256}"), items) == 0
    clock.advance(121)  # twice the longest period: even a debt would be paid by then
    buckets.take(("tasks", "192.0.2.1"), items)
    assert len(buckets) == 1


def test_buckets_of_addresses_all_active_at_once_are_bounded_too(clock, monkeypatch):
    """Addresses active within the longest period (a day, for creates) are many for a
    client holding many IPv6 /64s: past MOST, those updated longest ago go."""
    from headway.api.limits import TokenBuckets

    monkeypatch.setattr(TokenBuckets, "MOST", 2_000)
    monkeypatch.setattr(TokenBuckets, "SWEEP_ABOVE", 500)
    buckets = TokenBuckets(clock, longest_s=86_400)
    items = parse_many("100000/day")
    for i in range(10_000):
        clock.advance(us=1)
        assert buckets.take(("creates", f"2001:db8:{i}::/64"), items) == 0
        assert len(buckets) <= 2_000
    buckets.take(("creates", "2001:db8:9999::/64"), items)  # the newest are still counted
    assert buckets._state[("creates", "2001:db8:9999::/64")][0] < 100_000 - 1


def test_ipv6_clients_are_counted_per_slash_64():
    limiter = ClientAddresses()
    first = limiter.client_address("2001:db8:1:2::1")
    assert first == limiter.client_address("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert limiter.client_address("2001:db8:1:3::1") != first
    assert limiter.client_address("192.0.2.7") == "192.0.2.7"


async def test_forwarded_for_is_believed_only_from_trusted_proxies(limited, clients):
    app = await limited(rate_spaces="1/minute", trusted_proxies=("10.0.0.0/8",))
    proxy_a = client_for(app, "10.1.1.1", **{"x-forwarded-for": "203.0.113.7"})
    proxy_b = client_for(app, "10.2.2.2", **{"x-forwarded-for": "198.51.100.1, 10.3.3.3"})
    liar = client_for(app, "192.0.2.50", **{"x-forwarded-for": "203.0.113.99"})
    clients.extend([proxy_a, proxy_b, liar])
    await new_space(proxy_a)
    assert_refused(await proxy_a.post("/spaces", json={}), 429)  # 203.0.113.7 used its one
    await new_space(proxy_b)  # 198.51.100.1: the nearest untrusted hop, not the proxy
    await new_space(liar)  # counted as 192.0.2.50 itself: its header is not believed
    assert_refused(await liar.post("/spaces", json={}, headers={"x-forwarded-for": "1.2.3.4"}), 429)


def test_forwarding_headers_name_the_nearest_untrusted_hop():
    limiter = ClientAddresses(("10.0.0.0/8",))

    def client(peer: str, **headers: str) -> str:
        encoded = [(name.replace("_", "-").encode(), v.encode()) for name, v in headers.items()]
        return limiter.client_address(peer, encoded)

    forwarded = 'for=192.0.2.1;proto=https, for="[2001:db8::7]:4711", For=10.9.9.9:80'
    assert client("10.0.0.1", forwarded=forwarded) == "2001:db8::/64"
    assert client("10.0.0.1", forwarded="for=192.0.2.1:443") == "192.0.2.1"
    assert client("10.0.0.1", x_real_ip="192.0.2.2") == "192.0.2.2"
    # X-Forwarded-For first: the other headers may be the client's own.
    assert client("10.0.0.1", x_forwarded_for="192.0.2.3", x_real_ip="192.0.2.4") == "192.0.2.3"
    # Garbage is never a client of its own: the nearest address believed counts.
    for garbage in ("not-an-ip", "192.0.2.5, 999.1.1.1", "[::1]", ""):
        assert client("10.0.0.1", x_forwarded_for=garbage) == "10.0.0.1"
    for garbage in ("for=unknown", "for=_hidden", "proto=http", 'for="[::1', "for="):
        assert client("10.0.0.1", forwarded=garbage) == "10.0.0.1"
    assert client("10.0.0.1", x_real_ip="x") == "10.0.0.1"
    # From anyone else, none of them is believed.
    for name in ("x_forwarded_for", "forwarded", "x_real_ip"):
        assert client("192.0.2.50", **{name: "for=192.0.2.6"}) == "192.0.2.50"


FORWARDING = ("x-forwarded-for", "forwarded", "x-real-ip")


def rotating(n: int) -> dict[str, str]:
    """Forwarding headers naming a new client each time, as an attacker rotates them."""
    header = FORWARDING[n % 3]
    value = f"for=203.0.113.{n}" if header == "forwarded" else f"203.0.113.{n}"
    return {header: value}


async def test_forwarding_headers_from_loopback_are_not_believed_by_default(tmp_path):
    """A real `headway serve` with nothing configured: a client on loopback naming a new
    address in each request is still one client, for rates and for streams."""
    limits = {"HEADWAY_RATE_SPACES": "5/minute", "HEADWAY_STREAMS_PER_CLIENT": "3"}
    with LiveServer(tmp_path, **limits) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            spaces = [await http.post("/spaces", json={}, headers=rotating(n)) for n in range(6)]
            assert [answer.status_code for answer in spaces[:5]] == [201] * 5
            assert "Too many spaces" in assert_refused(spaces[5], 429)
            path = f"/spaces/{spaces[0].json()['uuid']}/events"
            async with contextlib.AsyncExitStack() as stack:
                for n in range(3):
                    watcher = await stack.enter_async_context(watching(http, path, **rotating(n)))
                    await watcher.snapshot()
                refused = await http.get(path, headers=rotating(3))
                assert "Your address holds 3" in assert_refused(refused, 429)


async def test_forwarding_headers_from_a_trusted_proxy_name_the_client(tmp_path):
    env = {"HEADWAY_RATE_SPACES": "2/minute", "HEADWAY_TRUSTED_PROXIES": "127.0.0.1"}
    with LiveServer(tmp_path, **env) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            for n in range(6):  # each names a client of its own
                for _ in range(2):
                    answer = await http.post("/spaces", json={}, headers=rotating(n))
                    assert answer.status_code == 201, answer.text
                assert_refused(await http.post("/spaces", json={}, headers=rotating(n)), 429)
            # Not an address: the proxy itself (127.0.0.1) is the client, not a new one.
            assert (await http.post("/spaces", json={})).status_code == 201
            assert (await http.post("/spaces", json={})).status_code == 201
            for garbage in ("not-an-ip", "unknown", "203.0.113.1, not-an-ip"):
                refused = await http.post("/spaces", json={}, headers={"x-forwarded-for": garbage})
                assert_refused(refused, 429)
            refused = await http.post("/spaces", json={}, headers={"forwarded": "for=nobody"})
            assert_refused(refused, 429)


@pytest.mark.parametrize("backend", pairs(progress="redis"), indirect=True)
async def test_redis_counters_are_shared_by_instances(limited, clients):
    first = await limited(rate_spaces="2/minute")
    second = await limited(rate_spaces="2/minute")
    a, b = client_for(first), client_for(second)
    clients.extend([a, b])
    await new_space(a)
    await new_space(b)
    assert_refused(await a.post("/spaces", json={}), 429)
    assert_refused(await b.post("/spaces", json={}), 429)


# --- The live-progress budget -------------------------------------------------------------


def big_values(size: int = 1000) -> dict[str, str]:
    return {"log": "x" * size}


# Values of 4 KB where a test fills a budget: a quarter of the requests 1 KB values take.
HEAVY = {f"log{n}": "x" * 1000 for n in range(4)}
GROWN = {**HEAVY, "more": "x" * 20}  # a little more than HEAVY


@pytest.mark.parametrize("backend", pairs(progress="memory"), indirect=True)
async def test_progress_budget_refuses_new_tasks_but_lets_reporting_tasks_go_on(
    limited, clients, clock
):
    """The memory store's budget (Redis has its maxmemory: see the test after next)."""
    app = await limited(
        progress_memory=1024 * 1024, progress_memory_per_space=1.0, progress_memory_per_client=1.0
    )
    client = client_for(app)
    clients.append(client)
    space = await new_space(client)
    reported: list[str] = []
    refused = None
    for _ in range(500):
        task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
        response = await client.put(f"/tasks/{task}", json={"values": HEAVY})
        if response.status_code != 200:
            refused = task
            assert "live progress" in assert_refused(response, 503)
            break
        reported.append(task)
    assert refused is not None, "the budget never refused a report"
    store = app.state.service.progress
    assert store.bytes_used <= store.budget_bytes
    # Nothing was stored for the refused task.
    read = (await client.get(f"/tasks/{refused}")).json()
    assert read["progress"] is None and read["finished_at"] is None
    # A finish needs no room among live progress: finished progress is no longer live,
    # and gives way when live progress needs the room.
    finished = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    finish = {"values": HEAVY, "done": True}
    shown = (await client.put(f"/tasks/{finished}", json=finish)).json()
    assert shown["finished_at"] is not None and shown["progress"]["values"] == HEAVY
    assert store.live_bytes <= store.budget_bytes * 0.9
    # A task that already holds progress keeps reporting, even a little more.
    response = await client.put(f"/tasks/{reported[0]}", json={"values": GROWN})
    assert response.status_code == 200, response.text
    assert (await client.put(f"/tasks/{reported[1]}", json={"done": True})).status_code == 200
    # Once old progress expires, there is room again.
    clock.advance(61)
    assert (await client.put(f"/tasks/{refused}", json={"values": HEAVY})).status_code == 200
    assert store.bytes_used < store.budget_bytes // 10


async def test_no_space_takes_more_than_its_share_of_the_budget(limited, clients):
    """In memory and in Redis alike: a space's live progress stops at its share (new
    tasks at 90% of it), answered 503; its reporting tasks go on; other spaces go on."""
    app = await limited(
        progress_memory=2 * 1024 * 1024,
        progress_memory_per_space=0.25,
        progress_memory_per_client=1.0,
    )
    client = client_for(app)
    clients.append(client)
    greedy, modest = await new_space(client), await new_space(client)
    held: list[str] = []
    for _ in range(250):
        task = (await client.post(f"/spaces/{greedy}/tasks", json={})).json()["uuid"]
        response = await client.put(f"/tasks/{task}", json={"values": HEAVY})
        if response.status_code != 200:
            assert "This space" in assert_refused(response, 503)
            break
        held.append(task)
    else:
        pytest.fail("the space was never refused")
    share = 2 * 1024 * 1024 * 0.25
    # Each task 4.5-5.1 KB counted (its values, its entry, its estimate's track).
    assert share * 0.9 * 0.4 < len(held) * 4000 < share * 0.9
    refused = (await client.get(f"/tasks/{task}")).json()
    assert refused["progress"] is None  # nothing stored for the refused report
    # Its tasks that hold progress report on, a little more even (room above the 90%).
    response = await client.put(f"/tasks/{held[0]}", json={"values": GROWN})
    assert response.status_code == 200, response.text
    task = (await client.post(f"/spaces/{modest}/tasks", json={})).json()["uuid"]
    assert (await client.put(f"/tasks/{task}", json={"values": HEAVY})).status_code == 200


@pytest.mark.parametrize("backend", pairs(progress="redis"), indirect=True)
async def test_redis_out_of_memory_is_a_503_with_retry_after(app, client, make_task):
    other = await make_task()
    url = app.state.settings.redis_url
    admin = redis.Redis.from_url(url)
    try:
        used = (await admin.info("memory"))["used_memory"]
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", used + 64 * 1024)
        filler = 0
        for size in (16 * 1024, 64):  # fill Redis up to its maxmemory
            while True:
                try:
                    await admin.set(f"filler:{filler}", b"x" * size)
                except redis.ResponseError:
                    break
                filler += 1
        # Held over its maxmemory: a connection's buffers freed meanwhile, or a key of
        # another database expiring, would otherwise let a small write in.
        used = (await admin.info("memory"))["used_memory"]
        await admin.config_set("maxmemory", used - 64 * 1024)
        # Refused while counting its rate or while storing it: a 503 either way.
        assert_refused(await client.put(f"/tasks/{other}", json={"current": 1}), 503)
        assert (await client.get(f"/tasks/{other}")).json()["progress"] is None
    finally:
        await admin.config_set("maxmemory", 0)
        await admin.aclose()
    assert (await client.put(f"/tasks/{other}", json={"current": 2})).status_code == 200


def test_default_rates_never_refuse_a_busy_well_behaved_client(clock):
    """CONTRACT: 3,000 spaces and tasks a minute from one address, in bursts of 200 at
    once, and 1,000 tasks reporting ten times a second, pass untouched."""
    from headway.api.limits import TokenBuckets

    limiter = rate_limiter(Settings())
    buckets = TokenBuckets(clock, longest_s=60)
    creates = {kind: limiter._limits[kind] for kind in ("spaces", "tasks")}
    for _ in range(3):  # three minutes of it
        for _ in range(15):  # 15 bursts of 200 a minute, half spaces, half tasks
            for i in range(200):
                kind = "spaces" if i % 2 else "tasks"
                assert buckets.take((kind, "192.0.2.1"), creates[kind]) == 0
            clock.advance(4)
    reports = limiter._limits["reports"]
    for _ in range(30):  # three seconds of 1,000 tasks reporting every 100 ms
        for _ in range(1000):
            assert buckets.take(("reports", "192.0.2.1"), reports) == 0
        clock.advance(0.1)


async def test_a_burst_of_250_creates_at_once_passes_untouched_with_default_limits(client, space):
    """Defaults never limit a well-behaved client, also with counters in Redis: a burst
    wider than a connection pool waits for connections instead of failing."""
    responses = await asyncio.gather(
        *(client.post(f"/spaces/{space}/tasks", json={"title": f"t{i}"}) for i in range(250))
    )
    assert sorted({r.status_code for r in responses}) == [201]
    assert len((await client.get(f"/spaces/{space}")).json()["tasks"]) == 250


def test_the_rated_kinds_are_one_list() -> None:
    """`limits.Kind` names the same kinds as the settings' `rate_<kind>` list."""
    from typing import get_args

    from headway import config
    from headway.api import limits

    assert get_args(limits.Kind) == config.RATED == limits.KINDS
