"""The background worker: delivers completion events from the outbox to webhooks, and
has notification channels send what they have queued (`notify.deliver`).

Each step is a function the tests call directly; `Worker.run` only repeats them and
sleeps. Delivery is at least once per webhook: a claimed attempt whose worker dies is
claimed again when its lease lapses, with the same event id (`webhook-id`). An attempt,
its name lookup included, ends within `delivery.ATTEMPT_TIMEOUT_S`, well within its lease,
so no other worker claims it while it runs; the lookup runs on the webhooks' own threads
(`webhooks.lookup`), never on the event loop's default executor. Retries and giving up
follow `delivery`, as those of channels do.

The backlog is bounded: a claim costs the same whatever it holds (see
`deliveries.claim_due`), and an event still undelivered `give_up_s` after its creation is
given up (`sweep`), as the oldest are beyond a webhook's cap when new ones come
(`storage.webhooks.fan_out`).

Delivery is fair: each attempt runs as a task of its own, up to CONCURRENCY at once;
new deliveries are claimed whenever one ends, taking turns across spaces and receivers
(see `deliveries.claim_due`); and no space has more than PER_SPACE, no receiver (scheme,
host and port) more than PER_RECEIVER attempts in flight. So one space's backlog or one
slow receiver holds only its own turns, never another space's delivery. The limits are
per worker process.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ..background.loops import repeat
from ..domain.clock import Clock
from ..ops import metrics
from ..ops.logs import endpoint, masked
from ..storage import deliveries, outbox
from ..storage import webhooks as webhook_rows
from ..storage.database import Database
from ..storage.deliveries import Claim
from . import policy as delivery
from . import webhooks
from .outbox import Flights

if TYPE_CHECKING:
    import httpx

    from ..notify.deliver import ChannelSender

log = logging.getLogger("headway.worker")


HEARTBEAT_S = 5.0
STALE_AFTER_S = 30.0
CONCURRENCY = 64  # attempts in flight at once, in all
PER_SPACE = 8  # attempts in flight for one space
PER_RECEIVER = 4  # attempts in flight to one receiver (scheme://host:port)
BATCH = 32  # deliveries claimed in one transaction
CLAIM_ROUNDS = 4  # claims in a row while each finds more due (see `deliveries.Round.again`)
SWEEP_BATCH = 200  # events given up or swept in one short transaction
SWEEP_ROUNDS = 20  # such transactions per sweep, at most


@dataclass(frozen=True, slots=True)
class Outcome:
    delivered: bool
    error: str = ""


class Worker:
    """Claims due deliveries, posts them, and records what happened."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        allow_private: bool = False,
        http: httpx.AsyncClient | None = None,
        jitter: Callable[[], float] | None = None,
        batch: int = BATCH,
        concurrency: int = CONCURRENCY,
        per_space: int = PER_SPACE,
        per_receiver: int = PER_RECEIVER,
        poll_s: float = 1.0,
        attempt_timeout_s: float = delivery.ATTEMPT_TIMEOUT_S,
        channels: ChannelSender | None = None,
        give_up_s: float = delivery.GIVE_UP_S,
        resolve: webhooks.Resolver | None = None,
        woken: asyncio.Event | None = None,
    ) -> None:
        """`woken`: set when an event is queued (see `service.unit.Wake`): the worker
        looks for due deliveries at once rather than at its next poll."""
        self.db = db
        self.channels = channels
        self.clock = clock
        self.allow_private = allow_private
        self.id = f"worker-{uuid.uuid4().hex[:12]}"
        # Made at the first delivery: a service whose spaces have no webhook never loads
        # an HTTP client (several MB of memory).
        self._http = http
        self._owns_http = http is None
        self._jitter = jitter or delivery.jitter
        self._batch = batch
        self._concurrency = concurrency
        self._per_space = per_space
        self._per_receiver = per_receiver
        self._poll_s = poll_s
        self._attempt_timeout_s = attempt_timeout_s
        self._give_up_us = round(give_up_s * 1_000_000)
        self._resolve = resolve or webhooks.lookup
        self._wake = woken or asyncio.Event()
        self.attempts = Flights[Claim]("deliveries", deliveries.give_back)
        self._space_load: Counter[str] = Counter()
        self._receiver_load: Counter[str] = Counter()
        self._last_beat = -HEARTBEAT_S  # the event loop's time of the last heartbeat
        self._started = 0  # attempts the last look started

    def wake(self) -> None:
        """Look for due deliveries now rather than at the next poll."""
        self._wake.set()

    async def run_once(self) -> int:
        """One step: claim what is due (as `claim` does), attempt it, and wait until each
        outcome is recorded. Returns how many attempts were made."""
        claims = await self.claim()
        await asyncio.gather(*(self.start(claim) for claim in claims))
        return len(claims)

    async def claim(self) -> list[Claim]:
        """Claim due deliveries for the free places (at most a batch), taking turns
        across spaces and receivers and within the limits of attempts in flight (see
        `deliveries.claim_due`). The caller `start`s each claim at once: its lease runs."""
        claims: list[Claim] = []
        for _ in range(CLAIM_ROUNDS):
            room = min(self._batch, self._concurrency - len(self.attempts)) - len(claims)
            if room <= 0:
                break
            now = self.clock.now_us()
            due = await webhook_rows.next_due_at(self.db.fetch)
            if due is None or due > now:
                break  # nothing due: no write transaction (and on SQLite, no write lock)
            space_load, receiver_load = Counter(self._space_load), Counter(self._receiver_load)
            for claim in claims:  # won in an earlier round, not started yet
                space_load[claim.space_uuid] += 1
                receiver_load[claim.receiver] += 1
            found = await deliveries.claim_due(
                self.db,
                now,
                delivery.CLAIM.until_us(now),
                room,
                per_space=self._per_space,
                per_receiver=self._per_receiver,
                space_load=space_load,
                receiver_load=receiver_load,
            )
            claims.extend(found.claims)
            if not found.again:
                break
        return claims

    def start(self, claim: Claim) -> asyncio.Task[None]:
        """Attempt a claimed delivery in a task of its own and record its outcome as soon
        as it ends: a slow receiver delays only its own deliveries. Its end wakes `run`
        to claim more."""
        self._space_load[claim.space_uuid] += 1
        self._receiver_load[claim.receiver] += 1
        return self.attempts.start(
            f"{claim.event_id}/{claim.webhook_uuid}",
            self._deliver(claim),
            name=f"deliver-{claim.event_id}",
            held=claim,
            ended=partial(self._ended, claim),
        )

    def _ended(self, claim: Claim) -> None:
        for load, key in (
            (self._space_load, claim.space_uuid),
            (self._receiver_load, claim.receiver),
        ):
            load[key] -= 1
            if load[key] <= 0:
                del load[key]
        self._wake.set()

    async def _deliver(self, claim: Claim) -> None:
        try:
            await self.record(claim, await self.attempt(claim))
        except Exception:  # e.g. the database is down: the lease lapses, it is tried again
            log.exception(
                "could not record the attempt of event %s to %s",
                masked(claim.event_id),
                endpoint("webhook", claim.webhook_uuid, claim.url),
            )

    async def attempt(self, claim: Claim) -> Outcome:
        """POST one event to one webhook, signed. A 2xx is delivered; anything else is not.

        The whole attempt, the name lookup included, has `attempt_timeout_s`: a resolver
        that hangs cannot hold it past its lease."""
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=delivery.ATTEMPT_TIMEOUT_S, follow_redirects=False, trust_env=False
            )
        url = httpx.URL(claim.url)
        looking_up = True
        try:
            # httpx's timeout bounds each read; this bounds the whole attempt, so a receiver
            # trickling bytes cannot hold it past its lease. The body is never read.
            async with asyncio.timeout(self._attempt_timeout_s):
                try:
                    found = await webhooks.addresses(
                        url, allow_private=self.allow_private, resolve=self._resolve
                    )
                except webhooks.RefusedAddress as exc:
                    return Outcome(False, f"refused: {exc}")
                looking_up = False
                status = await self._post(claim, url, found)
        except TimeoutError:
            if looking_up:
                return Outcome(False, f"the name lookup took over {self._attempt_timeout_s:g} s")
            return Outcome(False, f"no answer within {self._attempt_timeout_s:g} s")
        except httpx.HTTPError as exc:
            return Outcome(False, f"{type(exc).__name__}: {exc}")
        return Outcome(True) if 200 <= status < 300 else Outcome(False, f"HTTP {status}")

    async def _post(self, claim: Claim, url: httpx.URL, found: list[webhooks.Address]) -> int:
        """POST to each address in turn until one connects (the name's other addresses are
        tried only when connecting fails, so a request is never sent twice); its status."""
        import httpx

        assert self._http is not None
        headers = webhooks.signed_headers(
            claim.secret, claim.event_id, self.clock.now_us() // 1_000_000, claim.payload
        )
        for n, address in enumerate(found):
            # Connect to an address checked (see `webhooks.pinned`): the name is never
            # looked up again, on the default executor or anywhere.
            target, host, extensions = webhooks.pinned(url, address)
            try:
                request = self._http.stream(
                    "POST",
                    target,
                    content=claim.payload,
                    headers={**headers, **host},
                    extensions=extensions,
                )
                async with request as response:
                    return response.status_code
            except httpx.ConnectError:
                if n == len(found) - 1:
                    raise
        raise AssertionError("no address to connect to")  # `addresses` returns at least one

    async def record(self, claim: Claim, outcome: Outcome) -> None:
        """Settle a delivered attempt, or schedule the next one, or give up after the last;
        each in the webhook's log."""
        now = self.clock.now_us()
        async with self.db.write() as st:
            to = endpoint("webhook", claim.webhook_uuid, claim.url)
            if outcome.delivered:
                metrics.delivery("delivered")
                await deliveries.finish_delivery(st, claim, now, "delivered")
                log.info("delivered %s to %s (attempt %d)", claim.event, to, claim.attempt)
            elif delivery.last_attempt(claim.attempt):
                metrics.delivery("given_up")
                metrics.given_up("webhook", "attempts")
                log.warning(
                    "gave up %s to %s after %d attempts: %s",
                    claim.event,
                    to,
                    claim.attempt,
                    masked(outcome.error or ""),
                )
                detail = f"the last of {claim.attempt} attempts failed: {outcome.error}"
                await deliveries.finish_delivery(st, claim, now, "given_up", detail)
            else:
                metrics.delivery("retry")
                delay = delivery.retry_delay_s(claim.attempt, self._jitter())
                due = now + round(delay * 1_000_000)
                await deliveries.retry_delivery(st, claim, due, now, outcome.error)
                log.info(
                    "retrying %s to %s in %.0f s (attempt %d failed: %s)",
                    claim.event,
                    to,
                    delay,
                    claim.attempt,
                    masked(outcome.error or ""),
                )

    async def heartbeat(self) -> None:
        async with self.db.write() as st:
            await outbox.beat(st, self.id, self.clock.now_us())

    async def sweep(self) -> int:
        """Give up events undelivered `give_up_s` after their creation, and delete events
        no webhook was waiting for; each a few short transactions of an index range,
        whatever the backlog. How many deliveries were given up."""
        given_up = 0
        for _ in range(SWEEP_ROUNDS):
            now = self.clock.now_us()
            async with self.db.write() as st:
                before = delivery.give_up_before_us(now, self._give_up_us)
                found = await webhook_rows.give_up_old(st, before, now, SWEEP_BATCH)
            given_up += found
            if found < SWEEP_BATCH:
                break
        if given_up:
            log.warning("gave up %d deliveries undelivered since their creation", given_up)
            metrics.delivery("given_up", given_up)
            metrics.given_up("webhook", "age", given_up)
        for _ in range(SWEEP_ROUNDS):
            async with self.db.write() as st:
                if await webhook_rows.sweep_unwatched(st, SWEEP_BATCH) < SWEEP_BATCH:
                    break
        return given_up

    async def run(self) -> None:
        """Deliver until cancelled: heartbeat, sweep, claim and start attempts, and sleep
        until woken (a new event, or an attempt ended) or the next poll. Cancelled, it
        cancels its attempts in flight, which `close` hands back (a worker that is killed
        leaves their leases to lapse; they are tried again then)."""
        await repeat("worker", self.step, self._poll_wait_s, self._stop, woken=self._wake)

    async def step(self) -> int:
        """One look: heartbeat and sweep when due, start the attempts due and the
        channels' sends; how many attempts it started."""
        now = asyncio.get_running_loop().time()
        if now - self._last_beat >= HEARTBEAT_S:
            await self.heartbeat()
            await self.sweep()
            self._last_beat = now
        claims = await self.claim()
        for claim in claims:
            self.start(claim)
        if self.channels is not None:
            await self.channels.start_due()
        self._started = len(claims)
        return len(claims)

    def _poll_wait_s(self, looked: bool) -> float:
        # More may be due at once where attempts were just started.
        return 0.0 if looked and self._started else self._poll_s

    async def _stop(self) -> None:
        await self.attempts.cancel()
        try:
            async with self.db.write() as st:
                await outbox.forget_worker(st, self.id)
        except Exception:
            log.warning("could not remove the heartbeat of %s", self.id)

    async def close(self) -> None:
        """Stop: attempts and channel sends in flight are cut short and handed back, so
        that another worker takes them at once rather than once their leases lapse."""
        await self.attempts.stop(self.db, self.clock)
        if self.channels is not None:
            await self.channels.close()
        if self._owns_http and self._http is not None:
            await self._http.aclose()


async def worker_status(db: Database, clock: Clock) -> dict[str, object]:
    """The worker's health for `GET /up`: the age of the newest heartbeat."""
    newest = await outbox.latest_beat(db.fetch)
    if newest is None:
        return {"status": "absent", "heartbeat_age_s": None}
    age = max(clock.now_us() - newest, 0) / 1_000_000
    return {"status": "ok" if age <= STALE_AFTER_S else "stale", "heartbeat_age_s": round(age, 3)}
