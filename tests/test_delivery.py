"""The delivery policy webhooks and channels share (`headway.delivery.policy`), and leases
(`headway.storage.leases`): backoff, Retry-After, giving up, and one holder at a time."""

from __future__ import annotations

import itertools

import pytest

from headway.background.lease import NamedLease
from headway.delivery import policy as delivery
from headway.storage import leases
from headway.storage.leases import Lease

from .conftest import pairs


def test_backoff_doubles_from_ten_seconds_up_to_six_hours():
    delays = [delivery.retry_delay_s(n) for n in range(1, 20)]
    assert delays[:4] == [10, 20, 40, 80]
    assert max(delays) == delivery.MAX_RETRY_S
    assert all(b >= a for a, b in itertools.pairwise(delays))


def test_retries_span_about_a_day_before_the_last_attempt():
    spent = sum(delivery.retry_delay_s(n) for n in range(1, delivery.MAX_ATTEMPTS))
    assert 20 * 3600 <= spent <= 30 * 3600
    assert not delivery.last_attempt(delivery.MAX_ATTEMPTS - 1)
    assert delivery.last_attempt(delivery.MAX_ATTEMPTS)


def test_jitter_scales_the_backoff_within_a_fifth():
    assert delivery.retry_delay_s(3, 1.2) == pytest.approx(48)
    assert all(0.8 <= delivery.jitter() <= 1.2 for _ in range(100))


@pytest.mark.parametrize(
    ("retry_after", "delay"),
    [(120.0, 120.0), (0.0, 1.0), (0.2, 1.0), (10**9, 6 * 3600.0), (-5.0, 1.0)],
)
def test_a_services_retry_after_replaces_the_backoff_within_bounds(retry_after, delay):
    assert delivery.retry_delay_s(9, 1.2, retry_after_s=retry_after) == delay


def test_a_retry_after_is_held_between_nothing_and_six_hours():
    assert delivery.held_retry_after_s(-1) == 0.0
    assert delivery.held_retry_after_s(float("inf")) == 6 * 3600.0


def test_a_delivery_as_old_as_the_give_up_is_given_up():
    give_up_us = delivery.GIVE_UP_S * 1_000_000
    now = 10 * give_up_us
    assert delivery.give_up_before_us(now, give_up_us) == now - give_up_us


def test_a_lease_is_renewed_once_a_third_of_it_has_passed():
    lease = Lease(30.0)
    until = lease.until_us(1_000_000)
    assert until == 31_000_000
    assert not lease.renew(until, 1_000_000 + 9_999_999)
    assert lease.renew(until, 1_000_000 + 10_000_000)


@pytest.mark.parametrize("backend", pairs(progress="memory"), indirect=True)
async def test_a_named_lease_has_one_holder_until_it_lapses_or_is_given_up(app, clock):
    db = app.state.service.db
    now = clock.now_us()
    async with db.write() as st:
        assert await leases.take(st, "job", "one", now, now + 10)
        assert not await leases.take(st, "job", "two", now + 5, now + 15)
        assert await leases.take(st, "job", "one", now + 5, now + 20)  # its own, again
    assert await leases.held_until(db.fetch, "job") == now + 20
    assert await leases.held_until(db.fetch, "other") == 0
    async with db.write() as st:
        assert await leases.take(st, "job", "two", now + 20, now + 30)  # lapsed
        await leases.give_up(st, "job", "one")  # not its holder: nothing happens
    assert await leases.held_until(db.fetch, "job") == now + 30
    async with db.write() as st:
        await leases.give_up(st, "job", "two")
        assert await leases.take(st, "job", "one", now + 21, now + 40)


@pytest.mark.parametrize("backend", pairs(progress="memory"), indirect=True)
async def test_a_named_lease_its_holder_lost_count_of_is_still_its_own(app, clock):
    """A take cancelled after its write (a loop stopped in the middle of a look) or a
    give-back that timed out leaves the table naming this holder while the process thinks
    it holds nothing: it takes the lease again at once instead of waiting on itself until
    it lapses; another holder still waits."""
    db = app.state.service.db
    now = clock.now_us()
    async with db.write() as st:
        assert await leases.take(st, "job", "one", now, now + 30_000_000)
    mine, other = NamedLease(db, "job", "one", 30.0), NamedLease(db, "job", "two", 30.0)
    assert not mine.held
    assert not await other.keep(now + 1)
    assert await mine.keep(now + 1) and mine.held
    assert await leases.held_by(db.fetch, "job") == ("one", mine.until_us)
    assert not await other.keep(now + 2)
