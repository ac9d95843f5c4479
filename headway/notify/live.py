"""Live messages: one message per task a `live` channel hears, created at the task's
first report, edited in place as it moves, and left showing how it ended.

One look (`LiveWatch.step`, every `LOOK_S`) reads the live channels, the messages they
keep (`storage.live`), and, for a space whose channels have room for more, its running
tasks that have reported (oldest first, among at most `MAX_LOOKED`); then the views and
estimates of the tasks it shows. For each message it renders the text
(`messages.live`) and sends it when due:
- a task with no message yet gets one, while its channel keeps fewer than
  `HEADWAY_LIVE_MESSAGES` (the tasks beyond get events only);
- a change of state (running, stalled, late, finished, failed) is sent at once;
- any other change of text at most once per `HEADWAY_LIVE_EDIT_INTERVAL`; a text that
  did not change is never sent again;
- a failed send waits as a channel message does (`delivery`: backoff, the service's
  `Retry-After`), and is given up after as many attempts, or at once when the service
  refuses the credentials (the events still go as their own messages).
The last edit, once the task has ended, ends the message: its row goes. A task deleted
takes its row with it (`storage.deletes`).

Only one instance looks at a time (a lease, as the stall watch's); the row of a message is
claimed in the database before its first send, so two instances never make two messages
for one task. A channel's sends run one after the other, in a task of their own, so a
service that hangs holds only its own channel; the next look skips a channel still
sending. A channel sends only when `guard.admit` gives it a place (a few sends at once per
receiver host and per space, in this process): beyond, it waits for a later look, the
channels that waited longest first, and nothing counts as an attempt. Each send asks, once
a thread is free for it, whether its message is still kept: what a deleted task, channel
or space had queued never starts. What is sent and when is counted in `/metrics`; the
channel's deliveries show each message created and each that failed or was given up.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..background.lease import NamedLease
from ..background.loops import repeat
from ..delivery import policy as delivery
from ..delivery.outbox import Flights
from ..domain import tasks as domain
from ..domain.clock import Clock
from ..domain.errors import Unprocessable
from ..domain.estimates import Estimate
from ..ops import metrics
from ..ops.dependencies import unavailable
from ..progress import ProgressStore
from ..storage import channel_queue, channels, live
from ..storage.database import Database
from ..storage.live import LiveChannel, LiveRow
from . import guard, messages
from .schemes import DEFAULT_SCHEMES

if TYPE_CHECKING:  # imported where it is first used (`_send`)
    from .live_send import LiveOutcome

log = logging.getLogger("headway.worker")

LOOK_S = 1.0
LEASE_NAME = "live"
LEASE_S = 30.0  # longer than a look and its sends' records; taken afresh at each look
# Running tasks looked at per space for new messages (oldest first), while a channel has
# room for one: their rows (one query) and their progress (one read of the store).
MAX_LOOKED = 10_000

Views = Callable[[Sequence[str]], Awaitable[list[domain.TaskView]]]
Estimates = Callable[[Sequence[str]], Awaitable[dict[str, Estimate]]]


@dataclass(frozen=True, slots=True)
class Due:
    """One send a look decided: to `channel`, for its row (None: a new message)."""

    channel: LiveChannel
    task_uuid: str
    row: LiveRow | None
    text: messages.Live
    digest: str


class LiveWatch:
    """Keeps the live channels' messages up to date, one `step` at a time."""

    def __init__(
        self,
        db: Database,
        progress: ProgressStore,
        clock: Clock,
        views: Views,
        estimates: Estimates,
        *,
        interval_s: float,
        cap: int,
        allow_private: bool,
        link: Callable[[str | None], str | None],
        schemes: tuple[str, ...] | None = None,
        endpoints: Mapping[str, str] | None = None,
        look_s: float = LOOK_S,
        timeout_s: float = delivery.ATTEMPT_TIMEOUT_S,
    ) -> None:
        self.db = db
        self.progress = progress
        self.clock = clock
        self.views = views
        self.estimates = estimates
        self.interval_us = round(interval_s * 1_000_000)
        self.cap = cap
        self.allow_private = allow_private
        self.link = link
        self.schemes = schemes or DEFAULT_SCHEMES
        self.endpoints = dict(endpoints or {})
        self.look_s = look_s
        self.timeout_s = timeout_s
        self.lease = NamedLease(db, LEASE_NAME, f"live-{uuid.uuid4().hex[:12]}", LEASE_S)
        self.flights = Flights[None]("live sends")  # their rows say what to send again
        self._checked: dict[str, Any] = {}  # channel uuid: its checked URL
        self._turns: dict[str, int] = {}  # channel uuid: when it last started sending
        self._turn = 0

    async def run(self) -> None:
        """Look every `look_s` until cancelled; a failed look is logged, counted, not fatal."""
        await repeat("live", self.step, lambda _: self.look_s, self.close)

    async def close(self) -> None:
        """Cut the sends under way short (their rows say what to send again) and give the
        lease up, so that another instance looks at once."""
        await self.flights.cancel()
        await self.lease.let_go()

    async def run_once(self) -> int:
        """One look, and the sends it started awaited: how many it started."""
        started = await self.step()
        await asyncio.gather(*started)
        return len(started)

    async def step(self) -> list[asyncio.Task[None]]:
        """One look, by the holder of the lease; the channels' sends it started."""
        now = self.clock.now_us()
        async with self.db.read() as fetch:
            found = await live.live_channels(fetch)
        if not found:
            return []
        self._checked = {c.uuid: self._checked[c.uuid] for c in found if c.uuid in self._checked}
        self._turns = {c.uuid: self._turns[c.uuid] for c in found if c.uuid in self._turns}
        # Another instance's lease costs a read; this one's, a write every 10 s.
        if not await self.lease.keep(now):
            return []
        wanted = [c for c in found if c.uuid not in self.flights]
        async with self.db.read() as fetch:
            rows = await live.messages(fetch, [c.uuid for c in wanted])
        by_space: dict[str, list[LiveChannel]] = defaultdict(list)
        for channel in wanted:
            by_space[channel.space_uuid].append(channel)
        held: dict[str, dict[str, LiveRow]] = defaultdict(dict)
        for row in rows:
            held[row.channel_uuid][row.task_uuid] = row
        due: dict[str, list[Due]] = defaultdict(list)
        gone: list[tuple[str, str]] = []
        for space_uuid, space_channels in by_space.items():
            await self._space(space_uuid, space_channels, held, due, gone, now)
        if gone:
            async with self.db.write() as st:
                await live.drop(st, gone)
        started = []
        for channel_uuid in sorted(due, key=lambda key: self._turns.get(key, 0)):
            sends = due[channel_uuid]
            place = guard.admit(sends[0].channel.space_uuid, self._host(sends[0].channel))
            if place is None:
                continue  # its host or its space has enough in flight: at a later look
            self._turn += 1
            self._turns[channel_uuid] = self._turn
            task = self.flights.start(
                channel_uuid, self._send_all(sends), name="headway-live-send", ended=place.release
            )
            started.append(task)
        return started

    def _host(self, channel: LiveChannel) -> str:
        """The receiver host of a channel's sends: its service's endpoint, if set."""
        from .live_send import LIVE_SERVICES

        service = LIVE_SERVICES.get(channel.url.partition("://")[0].lower(), "")
        return guard.receiver_host(self.endpoints.get(service, channel.url))

    async def _space(
        self,
        space_uuid: str,
        space_channels: list[LiveChannel],
        held: dict[str, dict[str, LiveRow]],
        due: dict[str, list[Due]],
        gone: list[tuple[str, str]],
        now: int,
    ) -> None:
        kept = {task for c in space_channels for task in held[c.uuid]}
        order = [*kept, *await self._reported(space_uuid, space_channels, held, kept)]
        views = {view.uuid: view for view in await self.views(order)}
        estimates = await self.estimates([u for u in order if u in views])
        for channel in space_channels:
            mine = held[channel.uuid]
            count = len(mine)
            for task_uuid in order:
                view = views.get(task_uuid)
                row = mine.get(task_uuid)
                if view is None:
                    if row is not None:
                        gone.append((channel.uuid, task_uuid))  # deleted meanwhile
                    continue
                if view.parent_uuid is not None and not channel.steps:
                    continue
                if row is None:
                    unheard = _quiet_s(view, now) is None  # neither it nor a step reported
                    if count >= self.cap or view.finished_at is not None or unheard:
                        continue
                    count += 1
                elif row.given_up:
                    if view.finished_at is not None:
                        gone.append((channel.uuid, task_uuid))  # it ended: nothing to show
                    continue
                elif row.next_at_us > now:
                    continue
                text = self._text(view, estimates.get(task_uuid), channel, now)
                digest = _digest(text)
                if row is not None and row.ref is not None:
                    if row.state == text.state and row.digest == digest:
                        if text.final:
                            gone.append((channel.uuid, task_uuid))
                        continue  # shows this already
                    if row.state == text.state and now < row.sent_at_us + self.interval_us:
                        continue  # an edit within the interval waits for the next
                due[channel.uuid].append(Due(channel, task_uuid, row, text, digest))

    async def _reported(
        self,
        space_uuid: str,
        space_channels: list[LiveChannel],
        held: dict[str, dict[str, LiveRow]],
        kept: set[str],
    ) -> list[str]:
        """The space's running tasks that have reported (a step's report counts for its
        parent) and have no message yet, oldest first: as many as the channels have room
        for. Nothing is read once every channel keeps its cap."""
        room = max((self.cap - len(held[c.uuid]) for c in space_channels), default=0)
        if room <= 0:
            return []
        async with self.db.read() as fetch:
            running = await channels.active_tasks(fetch, space_uuid, MAX_LOOKED)
        steps = any(c.steps for c in space_channels)
        found = await self.progress.get_many([row[0] for row in running])
        heard: dict[str, None] = {}
        for (task_uuid, parent_uuid, _), progress in zip(running, found, strict=True):
            if progress is None:
                continue
            if parent_uuid is None or steps:
                heard[task_uuid] = None
            if parent_uuid is not None:
                heard[parent_uuid] = None  # its step reported: the parent moves
        fresh = [task for task in heard if task not in kept]
        return fresh[: room * (2 if steps else 1)]

    def _text(
        self, view: domain.TaskView, estimate: Estimate | None, channel: LiveChannel, now: int
    ) -> messages.Live:
        usual_s = estimate.usual.p50_s if estimate and estimate.usual else None
        quiet_s = _quiet_s(view, now)
        if view.finished_at is not None:
            state: messages.LiveState = (
                "failed" if messages.failure(view) is not None else "finished"
            )
        elif quiet_s is not None and quiet_s >= channel.stalled_after_s:
            state = "stalled"
        elif estimate is not None and estimate.late:
            state = "late"
        else:
            state = "running"
        return messages.live(
            view,
            state=state,
            left_s=estimate.remaining_s if estimate else None,
            usual_s=usual_s,
            quiet_s=quiet_s,
            space_title=channel.space_title,
            link=self.link(channel.share_uuid),
        )

    async def _send_all(self, sends: list[Due]) -> None:
        for one in sends:
            try:
                await self._send(one)
            except guard.Dropped:
                log.info("live messages: a send was dropped: its message is no longer kept")
            except Exception as exc:  # the database is down: its row says what to send
                if unavailable(exc):
                    log.warning("live messages: a send could not be recorded (%s)", exc)
                else:
                    log.exception("live messages: a send failed")
                return

    async def _send(self, one: Due) -> None:
        from . import live_send

        channel, row = one.channel, one.row
        if row is None:
            now = self.clock.now_us()
            async with self.db.write() as st:
                if not await live.claim(st, channel.uuid, one.task_uuid, now):
                    return  # the channel keeps one already, or is gone
            row = LiveRow(channel.uuid, one.task_uuid, None, "", "", 0, now, 0, False)
        try:
            checked = await self._channel_url(channel)
        except Unprocessable as exc:  # its scheme no longer allowed here: never sent again
            refused = live_send.LiveOutcome(False, row.ref, exc.message, refused=True)
            await self._failed(row, refused)
            return
        text = live_send.LiveText(one.text.title, one.text.lines, final=one.text.final)
        outcome = await live_send.post(
            checked,
            text,
            key=_key(channel.uuid, one.task_uuid),
            ref=row.ref,
            allow_private=self.allow_private,
            timeout_s=self.timeout_s,
            endpoints=self.endpoints,
            wanted=partial(self._kept, channel.uuid, one.task_uuid),
        )
        now = self.clock.now_us()
        if outcome.ok:
            metrics.live_message("created" if row.ref is None else "edited")
            async with self.db.write() as st:
                if one.text.final:
                    await live.drop(st, [(channel.uuid, one.task_uuid)])
                else:
                    await live.shown(st, row, outcome.ref, one.text.state, one.digest, now)
                if row.ref is None or one.text.final:
                    what = "message created" if row.ref is None else "message shows its end"
                    await channel_queue.log(st, channel.uuid, now, "live", "delivered", what)
            return
        await self._failed(row, outcome)

    async def _failed(self, row: LiveRow, outcome: LiveOutcome) -> None:
        """A send that failed: tried again after the delivery policy's wait, or given up
        (credentials refused, or its last attempt)."""
        now = self.clock.now_us()
        attempts = row.attempts + 1
        give_up = outcome.refused or delivery.last_attempt(attempts)
        word = "given_up" if give_up else "failed"
        delay = delivery.retry_delay_s(
            attempts, delivery.jitter(), retry_after_s=outcome.retry_after_s
        )
        async with self.db.write() as st:
            await live.retry(
                st, row, now + round(delay * 1_000_000), attempts=attempts, given_up=give_up
            )
            detail = f"live message: {outcome.detail}"
            await channel_queue.log(st, row.channel_uuid, now, "live", word, detail)
        metrics.live_message(word)

    async def _kept(self, channel_uuid: str, task_uuid: str) -> bool:
        """Whether the channel still keeps a message for the task (not deleted since)."""
        async with self.db.read() as fetch:
            return await live.kept(fetch, channel_uuid, task_uuid)

    async def _channel_url(self, channel: LiveChannel) -> Any:
        found = self._checked.get(channel.uuid)
        if found is None:
            from .urls import check_channel_url

            found = await guard.run(check_channel_url, channel.url, self.schemes)
            self._checked[channel.uuid] = found
        return found


def _quiet_s(view: domain.TaskView, now: int) -> float | None:
    """Seconds since the task's last report (a step's included), or None."""
    progress = view.progress
    if progress is None or progress.updated_at is None:
        return None
    return max(0.0, (now - domain.parse_ts(progress.updated_at)) / 1e6)


def _digest(text: messages.Live) -> str:
    return hashlib.sha256("\n".join((text.title, *text.lines)).encode()).hexdigest()[:32]


def _key(channel_uuid: str, task_uuid: str) -> str:
    """A stable short key of a channel's message for a task, that holds neither uuid:
    ntfy's sequence id, Matrix's transaction ids."""
    return hashlib.sha256(f"{channel_uuid}/{task_uuid}".encode()).hexdigest()[:24]
