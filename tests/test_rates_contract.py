"""The contract of the rate counters, run on both homes of the counts: this process's
memory (`MemoryRates`, the embedded default) and Redis (`SharedRates`, several
instances), each chosen by `rate_limiter` from the settings as the app chooses it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from headway.api.limits import MemoryRates, RateLimiter, SharedRates, rate_limiter
from headway.config import Settings
from headway.domain.clock import ManualClock
from headway.domain.errors import TooManyRequests

Made = Callable[..., RateLimiter]


@pytest.fixture(params=["memory", "redis"])
async def rates(request: pytest.FixtureRequest) -> AsyncIterator[Made]:
    """Makes the rates of settings with the given `rate_*` changes, counted where the
    parameter says; each is closed at the end."""
    redis_url = None
    if request.param == "redis":
        redis_url = request.getfixturevalue("shared_servers")[1].url
    made: list[RateLimiter] = []

    def make(**changes: object) -> RateLimiter:
        settings = Settings(redis_url=redis_url, rate_limits=True).with_(**changes)
        limiter = rate_limiter(settings, ManualClock())
        assert isinstance(limiter, SharedRates if redis_url else MemoryRates)
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        await limiter.close()


def an_address() -> str:
    """An address no other test counts for (Redis' counters outlive a test)."""
    return f"198.51.100.{uuid.uuid4().int % 250}-{uuid.uuid4().hex[:8]}"


async def admitted(limiter: RateLimiter, kind: str, address: str) -> bool:
    """Whether one more `kind` passes for `address`, counted as a visitor counts it."""
    try:
        if not limiter.counted_here(kind, address):  # type: ignore[arg-type]
            await limiter.check(kind, address)  # type: ignore[arg-type]
    except TooManyRequests:
        return False
    return True


async def test_a_rate_lets_its_limit_through_then_refuses_with_a_retry_after(rates):
    limiter = rates(rate_spaces="3/minute")
    address = an_address()
    passed = [await admitted(limiter, "spaces", address) for _ in range(4)]
    assert passed == [True, True, True, False]
    with pytest.raises(TooManyRequests) as refused:
        await limiter.check("spaces", address)
    assert "Too many spaces created from your address" in refused.value.message
    assert int(refused.value.headers["retry-after"]) >= 1


async def test_each_address_is_counted_on_its_own(rates):
    limiter = rates(rate_reports="2/minute")
    first, second = an_address(), an_address()
    assert [await admitted(limiter, "reports", first) for _ in range(3)] == [True, True, False]
    assert await admitted(limiter, "reports", second)


async def test_every_create_counts_against_the_cap_on_creates_too(rates):
    limiter = rates(rate_creates="2/minute")
    address = an_address()
    assert await admitted(limiter, "spaces", address)
    assert await admitted(limiter, "tasks", address)
    with pytest.raises(TooManyRequests) as refused:
        await limiter.check("webhooks", address)
    assert "creates (of every kind)" in refused.value.message
    assert await admitted(limiter, "reports", address)  # not a create


async def test_a_read_charged_past_its_allowance_leaves_a_debt_the_next_reads_wait_out(rates):
    limiter = rates(rate_reads="100/minute")
    address = an_address()
    assert await admitted(limiter, "reads", address)
    await limiter.charge("reads", address, 500)  # a big read, paid as it was sent
    assert not await admitted(limiter, "reads", address)
    assert await admitted(limiter, "reads", an_address())


async def test_rates_off_refuse_nothing_and_count_nowhere():
    limiter = rate_limiter(Settings(redis_url="redis://127.0.0.1:1/0", rate_limits=False))
    assert not limiter.enabled
    assert isinstance(limiter, MemoryRates)  # no Redis is asked: none is running there
    for _ in range(1000):
        await limiter.check("spaces", "192.0.2.1")
    await limiter.charge("reads", "192.0.2.1", 10**9)
    await limiter.check("reads", "192.0.2.1")
