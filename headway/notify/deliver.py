"""Sending what channels have queued: one step takes each channel that has something due
and may send (see `storage.channel_queue`), sends one message for all of it (a digest
when there are several), and records the outcome.

Each channel sends in a task of its own, so a channel that hangs holds only itself, and
only when `guard.admit` gives it a place (a few sends at once per receiver host and per
space, in this process): a channel beyond is held back a second (`DEFER_S`), not counted
as an attempt, so that the others due get their turn. Once a thread is free for its
send, the channel is asked whether it is still held by this send: a channel deleted (or
whose space was) meanwhile is never sent to. A message that fails is tried again, and
given up and logged, as a webhook's event is (see `delivery`: backoff for about a day,
without jitter; the service's `Retry-After` honoured), and never retried past the moment
it is to be given up. At least once: a worker that dies mid-send leaves the channel's
lease to lapse, and the message goes again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from ..config import Settings
from ..delivery import policy as delivery
from ..delivery.outbox import Flights
from ..domain.clock import Clock
from ..ops import metrics
from ..ops.dependencies import unavailable
from ..ops.logs import endpoint, masked
from ..storage import channel_queue
from ..storage.database import Database
from . import guard
from .schemes import DEFAULT_SCHEMES

log = logging.getLogger("headway.worker")

DIGEST_S = 5  # after a message, a channel waits this long: what comes meanwhile is one digest
HOUR_US = 3600 * 1_000_000
# Channels sending at once, in this process: one sending thread each (`guard`).
CONCURRENCY = guard.POOL_THREADS
DEFER_S = 1  # a channel whose host or space has enough sends in flight waits this long
LOOKS = 4  # looks for due channels in one `start_due`, while some were held back


def channel_sender(
    settings: Settings, db: Database, clock: Clock, on_end: Callable[[], None] = lambda: None
) -> ChannelSender:
    """The sender the worker runs, as the settings configure it (`on_end`: see `ChannelSender`)."""
    from ..service.channels import read_only_link

    return ChannelSender(
        db,
        clock,
        allow_private=settings.webhook_allow_private,
        messages_per_hour=settings.channel_messages_per_hour,
        link=partial(read_only_link, settings.public_url),
        schemes=settings.channel_schemes,
        give_up_us=settings.delivery_give_up * 1_000_000,
        on_end=on_end,
    )


class ChannelSender:
    """Starts a send for each channel with something due, up to CONCURRENCY at once."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        allow_private: bool,
        messages_per_hour: int,
        link: Callable[[str | None], str | None],
        schemes: tuple[str, ...] | None = None,
        timeout_s: float = delivery.ATTEMPT_TIMEOUT_S,
        give_up_us: int = delivery.GIVE_UP_S * 1_000_000,
        on_end: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_end`: called as each send ends (wakes the worker, which starts more)."""
        self.db = db
        self.clock = clock
        self.allow_private = allow_private
        self.cap = messages_per_hour
        self.link = link
        # A channel whose scheme the operator removed since is not sent to (its messages
        # fail, and are given up in time).
        self.schemes = schemes or DEFAULT_SCHEMES
        self.timeout_s = timeout_s
        self.give_up_us = give_up_us
        self.flights = Flights[channel_queue.Taken]("channel sends", channel_queue.give_back)
        self.on_end = on_end

    async def start_due(self) -> list[asyncio.Task[None]]:
        """Start a send for each channel that has something due and a place (`guard.admit`),
        longest waiting first; those without one are held back `DEFER_S` and the next due
        looked at; returns the sends started."""
        started: list[asyncio.Task[None]] = []
        for _ in range(LOOKS):
            room = CONCURRENCY - len(self.flights)
            if room <= 0:
                break
            now = self.clock.now_us()
            async with self.db.read() as fetch:
                due = await channel_queue.due_channels(fetch, now, room + len(self.flights))
            deferred = []
            for one in due:
                if one.channel_uuid in self.flights or len(self.flights) >= CONCURRENCY:
                    continue
                place = guard.admit(one.space_uuid, guard.receiver_host(one.url))
                if place is None:
                    deferred.append(one.channel_uuid)
                    continue
                task = self.flights.start(
                    one.channel_uuid,
                    self._send(one.channel_uuid),
                    name="headway-channel-send",
                    ended=partial(self._ended, place),
                )
                started.append(task)
            if not deferred:
                break
            async with self.db.write() as st:
                await channel_queue.defer(st, deferred, now, now + DEFER_S * 1_000_000)
        return started

    async def run_once(self) -> int:
        """Start what is due and wait for those sends to end; how many were started."""
        started = await self.start_due()
        await asyncio.gather(*started)
        return len(started)

    def _ended(self, place: guard.Place) -> None:
        place.release()
        self.on_end()

    async def _send(self, channel_uuid: str) -> None:
        try:
            await self.send(channel_uuid)
        except guard.Dropped:
            log.info("a channel's send was dropped: the channel went, or another worker has it")
        except Exception as exc:  # the database is down: the lease lapses, it goes again
            if unavailable(exc):
                log.warning("a channel's send could not be recorded (%s)", exc)
            else:
                log.exception("a channel's send failed")

    async def send(self, channel_uuid: str) -> None:
        """Take the channel, send one message for what it has due, record the outcome."""
        from . import messages, send

        now = self.clock.now_us()
        async with self.db.write() as st:
            taken = await channel_queue.take(
                st, channel_uuid, now, delivery.CLAIM.until_us(now), cap=self.cap, hour_us=HOUR_US
            )
        if taken is None:
            return
        self.flights.hold(channel_uuid, taken)
        too_old = delivery.give_up_before_us(now, self.give_up_us)
        stale = [p for p in taken.pending if p.created_at_us <= too_old]
        live = [p for p in taken.pending if p not in stale]
        to = endpoint("channel", channel_uuid, taken.url)
        if not live:
            await self._settle(taken, [], stale, now, counted=False)
            log.warning("gave up %s to %s: undelivered for too long", _told(stale), to)
            return
        link = self.link(taken.share_uuid)
        told = [_message(p, taken.space_title, link) for p in live]
        message = told[0]
        if len(told) > 1:
            message = messages.digest(told, space_title=taken.space_title, link=link)
        outcome = await send.send(
            taken.url,
            message.title,
            message.body,
            allow_private=self.allow_private,
            timeout_s=self.timeout_s,
            level=message.level,
            schemes=self.schemes,
            wanted=partial(self._held, taken),
        )
        now = self.clock.now_us()
        if outcome.delivered:
            metrics.channel_delivery("delivered", len(live))
            await self._settle(taken, live, stale, now, counted=True)
            log.info("delivered %s to %s", _told(live), to)
            return
        attempt = max(p.attempts for p in live) + 1
        give_up = [p for p in live if delivery.last_attempt(p.attempts + 1)]
        again = [p for p in live if p not in give_up]
        delay = delivery.retry_delay_s(attempt, retry_after_s=outcome.retry_after_s)
        due = now + round(delay * 1_000_000)
        if again:  # not past the moment the oldest is to be given up
            due = max(min(due, min(p.created_at_us for p in again) + self.give_up_us), now + 1)
        async with self.db.write() as st:
            if not await channel_queue.retry(st, taken, [p.id for p in again], due, outcome.detail):
                return
            await channel_queue.remove(st, channel_uuid, [p.id for p in (*give_up, *stale)])
            await channel_queue.log(
                st, channel_uuid, now, _event(live), "failed", outcome.detail or None
            )
            for p in (*give_up, *stale):
                await channel_queue.log(st, channel_uuid, now, p.kind, "given_up", None)
        detail = masked(outcome.detail or "no detail")
        if again:
            log.info("retrying %s to %s in %.0f s (%s)", _told(again), to, delay, detail)
        if give_up or stale:
            log.warning("gave up %s to %s (%s)", _told([*give_up, *stale]), to, detail)
        metrics.channel_delivery("retry", len(again))
        metrics.channel_delivery("given_up", len(give_up) + len(stale))
        metrics.given_up("channel", "attempts", len(give_up))
        metrics.given_up("channel", "age", len(stale))

    async def _held(self, taken: channel_queue.Taken) -> bool:
        """Whether the channel is still there, held by this send's lease."""
        async with self.db.read() as fetch:
            return await channel_queue.held(fetch, taken)

    async def _settle(
        self,
        taken: channel_queue.Taken,
        delivered: list[channel_queue.Pending],
        stale: list[channel_queue.Pending],
        now: int,
        *,
        counted: bool,
    ) -> None:
        ids = [p.id for p in (*delivered, *stale)]
        async with self.db.write() as st:
            if not await channel_queue.sent(
                st, taken, ids, now + DIGEST_S * 1_000_000, counted=counted
            ):
                return
            if delivered:
                many = f"{len(delivered)} events in one message" if len(delivered) > 1 else None
                await channel_queue.log(
                    st, taken.channel_uuid, now, _event(delivered), "delivered", many
                )
            for p in stale:
                await channel_queue.log(st, taken.channel_uuid, now, p.kind, "given_up", None)
        if stale:
            metrics.channel_delivery("given_up", len(stale))
            metrics.given_up("channel", "age", len(stale))

    async def close(self) -> None:
        """Cut the sends under way short and hand back the channels they had taken, so
        that another worker takes them at once rather than once their leases lapse."""
        await self.flights.stop(self.db, self.clock)


def _message(pending: channel_queue.Pending, space_title: str | None, link: str | None) -> Any:
    """The message of one queued event (see `messages`)."""
    from . import messages

    event = json.loads(pending.payload)
    task, where = event["data"], {"space_title": space_title, "link": link}
    if pending.kind == "stalled":
        return messages.stalled(
            task,
            reason=event.get("reason", "silent"),
            for_s=event.get("for_s", 0),
            restarted=event.get("since") == "restart",
            **where,
        )
    if pending.kind == "recovered":
        return messages.recovered(task, **where)
    if pending.kind == "late":
        elapsed_s, usual_s = event.get("elapsed_s", 0), event.get("usual_s", 0)
        return messages.late(task, elapsed_s=elapsed_s, usual_s=usual_s, **where)
    usual_s = event.get("usual_s")
    return messages.finished(
        task, usual_s=usual_s if isinstance(usual_s, int | float) else None, **where
    )


def _event(pending: list[channel_queue.Pending]) -> str:
    """The event a log entry names: the message's kind, or `digest`."""
    return pending[0].kind if len(pending) == 1 else "digest"


def _told(pending: list[channel_queue.Pending]) -> str:
    """What a log line says was sent: `a stalled message`, `a digest of 3 events`."""
    if len(pending) == 1:
        return f"a {pending[0].kind} message"
    return f"a digest of {len(pending)} events"
