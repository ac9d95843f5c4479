"""One instance at a time: a named lease (`storage.leases`) as a background loop holds
it, taken, kept with as few writes as it can, and given back. The stall watch
(`notify.stalls`), the live messages' watch (`notify.live`) and the sweeper (its idle
deletes and its removals) hold theirs so."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..storage import leases
from ..storage.leases import Lease

if TYPE_CHECKING:
    from ..storage.database import Database

log = logging.getLogger("headway")

LET_GO_S = 2.0  # how long a shutdown waits to give a lease back (it lapses anyway)


class NamedLease:
    """The named lease `name`, as `holder` holds it for `seconds` at a time."""

    def __init__(self, db: Database, name: str, holder: str, seconds: float) -> None:
        self.db = db
        self.name = name
        self.holder = holder
        self.lease = Lease(seconds)
        self.until_us = 0  # when the lease this process holds lapses; 0: not held

    @property
    def held(self) -> bool:
        """Whether this process took it at its last try."""
        return self.until_us != 0

    async def take(self, now_us: int) -> bool:
        """Hold it for a lease from `now_us` if it is free, lapsed or ours already."""
        until = self.lease.until_us(now_us)
        async with self.db.write() as st:
            won = await leases.take(st, self.name, self.holder, now_us, until)
        self.until_us = until if won else 0
        return won

    async def keep(self, now_us: int) -> bool:
        """Hold it, writing only when needed: a read while another instance holds it, a
        take when this one does not yet, or once a third of its lease has passed. A lease
        the table says is this holder's is taken again even where this process lost count
        of it (a take cancelled after it was written, a give-back that timed out)."""
        if not self.held:
            holder, until = await leases.held_by(self.db.fetch, self.name)
            if holder != self.holder and until > now_us:
                return False
        if not self.held or self.lease.renew(self.until_us, now_us):
            return await self.take(now_us)
        return True

    async def lapses_at(self) -> int:
        """When (µs) whoever holds it lets it lapse; 0 if it is free."""
        return await leases.held_until(self.db.fetch, self.name)

    async def give_back(self) -> None:
        """Nothing is left to do under it: free for any instance at once."""
        self.until_us = 0
        async with self.db.write() as st:
            await leases.give_up(st, self.name, self.holder)

    async def let_go(self) -> None:
        """At a shutdown, give it back if held, so that another instance takes it at
        once; bounded, and never raises: it lapses by itself anyway."""
        if not self.held:
            return
        try:
            async with asyncio.timeout(LET_GO_S):
                await self.give_back()
        except Exception as exc:
            self.until_us = 0
            log.warning("the lease %s could not be given up (%s)", self.name, exc)
