"""The sweeper: the background job that keeps storage bounded. Each step writes the
spaces' noted activity (`service.activity`), forgets idempotency keys older than a day,
deletes spaces idle for longer than the retention (on one instance at a time: a lease in
the database), and removes the rows of deleted spaces.

A space's delete (its owner's or retention's) only marks it deleted, in one short
transaction (see `storage.deletes`); its rows are removed here afterwards, in short
transactions that other writers, readers and reporters do not notice (see
`service.removal`). The delete wakes the sweeper of its process, which removes them at
once; a space whose removal was cut short (the process stopped) is finished by whichever
instance's sweeper holds the removal's lease next: at once where the one that stopped
gave it back, else once it has lapsed."""

from __future__ import annotations

import asyncio
import logging
import uuid

from ..domain.clock import Clock
from ..service import Service
from ..service.removal import MOST_AT_ONCE, Run
from ..storage.database import Database
from .lease import NamedLease
from .loops import repeat

log = logging.getLogger("headway")

STEP_S = 60.0
LEASE_NAME = "sweeper"
# Deleted spaces' rows are removed on one instance at a time, under this lease: renewed
# as batches go, given back once nothing is left.
REMOVAL_LEASE = "space-removal"
REMOVAL_S = 30.0
# Idle spaces deleted per step.
SPACES_PER_STEP = 10


class Sweeper:
    """Retention: deletes spaces with no create, report or read for `retention_us`
    (None: keeps everything); removes deleted spaces' rows; and writes activity as it
    goes."""

    def __init__(
        self,
        service: Service,
        db: Database,
        clock: Clock,
        retention_us: int | None,
        *,
        step_s: float = STEP_S,
        batch: int = MOST_AT_ONCE,
        hold_s: float | None = None,
        woken: asyncio.Event | None = None,
    ) -> None:
        """`db`: where its leases are held; `woken`: set when a space is deleted (see
        `service.unit.Wake`): its rows are removed at once rather than at the next step."""
        self.service = service
        self.clock = clock
        self.retention_us = retention_us
        self.step_s = step_s
        self.sizes = service.removal.sizes(batch, hold_s)
        holder = f"sweeper-{uuid.uuid4().hex[:12]}"
        # Idle spaces are deleted by one instance at a time: the one that took this lease
        # at its last step (it lasts three steps).
        self.lease = NamedLease(db, LEASE_NAME, holder, step_s * 3)
        # Deleted spaces' rows are removed by one instance at a time.
        self.removal = NamedLease(db, REMOVAL_LEASE, holder, REMOVAL_S)
        self._woken = woken or asyncio.Event()
        self._removing = asyncio.Lock()  # one removal at a time in this process
        self._next_step = 0.0  # when the next step is due (the event loop's time)

    def wake(self) -> None:
        """A space was deleted: remove its rows now rather than at the next step."""
        self._woken.set()

    async def run(self) -> None:
        """Step every `step_s` seconds, and remove deleted spaces' rows whenever woken,
        until cancelled; a failed look is logged and counted, and the next comes all the
        same. Stopped, it gives its leases back: another instance's sweeper goes on at
        once (one that was killed leaves them to lapse)."""
        loop = asyncio.get_running_loop()
        self._next_step = loop.time() + self.step_s
        await repeat("sweeper", self._look, self._until_step_s, self._let_go, woken=self._woken)

    async def _look(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_step:
            await self.remove()  # woken: a space was deleted
            return
        self._next_step = loop.time() + self.step_s
        await self.step()

    def _until_step_s(self, _looked: bool) -> float:
        return max(self._next_step - asyncio.get_running_loop().time(), 0.0)

    async def _let_go(self) -> None:
        await self.lease.let_go()
        await self.removal.let_go()

    async def step(self) -> int:
        """Write the activity noted here and forget idempotency keys older than a day (a
        bounded number of short deletes, on any instance: deleting twice harms nothing);
        then, if some spaces are idle and this instance holds the lease, delete up to
        SPACES_PER_STEP of them; then remove deleted spaces' rows. Returns how many
        spaces were deleted for their idleness."""
        await self.service.activity.flush()
        forgotten = await self.service.keys.forget_expired()
        if forgotten:
            log.info("sweeper: forgot %d idempotency keys older than a day", forgotten)
        deleted = await self.delete_idle()
        await self.remove()
        return deleted

    async def delete_idle(self) -> int:
        """Delete up to SPACES_PER_STEP spaces idle since before the retention, if this
        instance holds the lease; how many. Each goes as its owner's delete does, in one
        conditional transaction that checks it is still idle (activity noted meanwhile
        keeps it); its rows are removed by `remove`."""
        if self.retention_us is None:
            return 0
        now = self.clock.now_us()
        cutoff = now - self.retention_us
        idle = await self.service.deletes.idle_spaces(cutoff, SPACES_PER_STEP)
        if not idle:
            return 0  # nothing to do: no lease taken, nothing written
        if not await self.lease.take(now):
            return 0
        deleted = 0
        for space_uuid in idle:
            if await self.service.deletes.idle_space(space_uuid, cutoff):
                log.info("sweeper: deleted a space idle since before the retention")
                deleted += 1
        return deleted

    async def remove(self, batches: int | None = None) -> int:
        """Remove the rows of deleted spaces, a batch per transaction, oldest delete
        first, until none is left, if this instance holds (or takes) the removal's lease;
        how many transactions. With `batches`, stop after that many (the lease is then
        kept until it lapses, as a process that stopped would keep it)."""
        async with self._removing:
            run = Run(batches, self._keeps_removal, self.sizes)
            removal, tried = self.service.removal, set[str]()
            while (space_uuid := await removal.next_space(tried)) is not None:
                if not tried and not await self.removal.take(self.clock.now_us()):
                    return 0
                tried.add(space_uuid)
                if not await removal.space(space_uuid, run):
                    return run.done
            if tried:
                await self.removal.give_back()
            return run.done

    async def _keeps_removal(self) -> bool:
        """Whether the removal's lease is still this instance's (renewed once a third of
        it has passed; False: another took it)."""
        return await self.removal.keep(self.clock.now_us())
