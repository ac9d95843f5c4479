"""The delivery policy webhooks (`worker`) and channels (`notify.deliver`) share: how long
an attempt may take and its claim holds, when a failed attempt is tried again (backoff,
or the service's `Retry-After`), and when a delivery is given up (after its last
attempt, or once it is older than HEADWAY_DELIVERY_GIVE_UP). Pure rules: no I/O.

Both are at least once: an attempt whose worker dies is tried again once its claim's
lease lapses (see `storage.leases`).
"""

from __future__ import annotations

import random

from ..storage.leases import Lease

ATTEMPT_TIMEOUT_S = 10.0  # a webhook's POST or a channel's send, all of it
# Longer than one attempt can take, with room to record its outcome.
CLAIM = Lease(60)
FIRST_RETRY_S = 10
MAX_RETRY_S = 6 * 3600  # the longest wait, a service's Retry-After included
LEAST_RETRY_AFTER_S = 1.0  # a Retry-After of 0 waits this long: no retry at once
MAX_ATTEMPTS = 15  # 10 s doubling to 6 h, then 6 h: retries span about a day
GIVE_UP_S = 86_400  # HEADWAY_DELIVERY_GIVE_UP's default


def jitter() -> float:
    """A random factor of a retry's delay, so that deliveries that failed together do
    not all come back at once."""
    return random.uniform(0.8, 1.2)


def retry_delay_s(attempt: int, jitter: float = 1.0, retry_after_s: float | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based): FIRST_RETRY_S
    doubling up to MAX_RETRY_S, times `jitter`; or, when the service said how long
    (`retry_after_s`), that, within LEAST_RETRY_AFTER_S and MAX_RETRY_S."""
    if retry_after_s is not None:
        return max(held_retry_after_s(retry_after_s), LEAST_RETRY_AFTER_S)
    return min(FIRST_RETRY_S * 2 ** (attempt - 1), MAX_RETRY_S) * jitter


def held_retry_after_s(seconds: float) -> float:
    """A service's `Retry-After`, as it is taken: between 0 and MAX_RETRY_S."""
    return min(max(seconds, 0.0), float(MAX_RETRY_S))


def last_attempt(attempt: int) -> bool:
    """Whether attempt number `attempt` (1-based) is the last: failed, it is given up."""
    return attempt >= MAX_ATTEMPTS


def give_up_before_us(now_us: int, give_up_us: int) -> int:
    """Deliveries created at this moment (µs) or before, still undelivered at `now_us`,
    are given up: they have waited `give_up_us` (HEADWAY_DELIVERY_GIVE_UP)."""
    return now_us - give_up_us
