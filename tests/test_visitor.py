"""One client's budgets in one place (`headway.api.visitor`): a request's visitor is its
address, and each check a client's requests pass is the visitor's."""

from __future__ import annotations

import pytest

from headway.api.visitor import FREE, Visitors
from headway.config import Settings
from headway.domain.clock import ManualClock
from headway.domain.errors import BadRequest, TooManyRequests


def scope(peer: str, *headers: tuple[bytes, bytes]) -> dict[str, object]:
    return {"client": (peer, 50_000), "headers": list(headers)}


def test_a_visitor_is_its_address_as_rates_count_it():
    visitors = Visitors(Settings(trusted_proxies=("10.0.0.0/8",)))
    assert visitors.of(scope("192.0.2.7")).address == "192.0.2.7"
    assert visitors.of(scope("2001:db8:1:2::9")).address == "2001:db8:1:2::/64"
    forwarded = scope("10.0.0.1", (b"x-forwarded-for", b"198.51.100.4"))
    assert visitors.of(forwarded).address == "198.51.100.4"


async def test_admit_counts_one_of_a_kind_against_the_visitors_rate():
    visitors = Visitors(Settings(rate_limits=True, rate_tasks="2/minute"), ManualClock(0))
    one, other = visitors.of(scope("192.0.2.1")), visitors.of(scope("192.0.2.2"))
    await one.admit("tasks")
    await one.admit("tasks")
    with pytest.raises(TooManyRequests):
        await one.admit("tasks")
    await other.admit("tasks")  # its own allowance


async def test_a_read_is_let_through_for_1_and_pays_the_rest_as_it_is_rendered():
    clock = ManualClock(0)
    visitors = Visitors(Settings(rate_limits=True, rate_reads="5/minute"), clock)
    visitor = visitors.of(scope("192.0.2.1"))
    bill = await visitor.read_bill()
    await bill.pay(5)  # a parent and its 4 children: 1 paid, 4 owed, all taken
    with pytest.raises(TooManyRequests):
        await visitor.read_bill()
    assert await Visitors(Settings(rate_limits=False)).of(scope("192.0.2.1")).read_bill() is FREE


def test_a_visitor_holds_at_most_its_streams_and_gives_them_back():
    visitors = Visitors(Settings(rate_limits=True, streams_per_client=1))
    visitor = visitors.of(scope("192.0.2.1"))
    visitor.hold_stream()
    with pytest.raises(TooManyRequests):
        visitors.of(scope("192.0.2.1")).hold_stream()  # the same client, another request
    visitors.of(scope("192.0.2.2")).hold_stream()
    visitor.let_go_stream()
    visitors.of(scope("192.0.2.1")).hold_stream()
    unlimited = Visitors(Settings(rate_limits=False, streams_per_client=1)).of(scope("192.0.2.1"))
    unlimited.hold_stream()
    unlimited.hold_stream()


def test_an_idempotency_key_is_the_visitors_own():
    visitor = Visitors(Settings()).of(scope("192.0.2.1"))
    assert visitor.idempotency([], "tasks", b"{}") is None
    key = visitor.idempotency([(b"idempotency-key", b"k1")], "tasks", b"{}")
    assert key is not None and key.key == "k1" and key.client == "192.0.2.1"
    with pytest.raises(BadRequest):
        visitor.idempotency([(b"idempotency-key", b"a"), (b"idempotency-key", b"b")], "tasks", b"")
