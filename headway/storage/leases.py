"""Leases: the one rule by which a single worker or instance holds something for a
while, and the SQL of the named ones.

A lease is a time (µs) until which one holder owns something. It is taken by one
conditional update that succeeds only where that time has passed (of several racing,
exactly one wins), lapses by itself when its holder dies, and is given back early by
setting the time to now. Everything Headway holds is held so:
- a delivery's claim (`storage.deliveries`): its `next_attempt_at_us` moved to the
  lease's end; that time is also the claim's token, so an outcome is recorded only
  while the row still carries it;
- a channel's send (`storage.channel_queue`): its `hold_until_us`, the same way;
- a named lease (here, the `leases` table): one instance at a time looks for stalls
  (`notify.stalls`), deletes idle spaces and removes deleted ones (`sweeper`); its
  holder's name, not its time, says whose it is, so the holder takes it afresh.
`Lease` says how long each lasts, and when its holder should take it afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

# Only for types: `headway channels test` reaches `Lease` (through `delivery`) with no
# database package installed.
if TYPE_CHECKING:
    from .database import Fetch, Statements


@dataclass(frozen=True, slots=True)
class Lease:
    """How long a lease lasts: longer than the work done under it can take, with room to
    record its outcome, so that it never lapses while its holder is alive."""

    seconds: float

    def until_us(self, now_us: int) -> int:
        """When a lease taken at `now_us` lapses."""
        return now_us + round(self.seconds * 1_000_000)

    def renew(self, until_us: int, now_us: int) -> bool:
        """Whether a holder whose lease lapses at `until_us` should take it afresh before
        going on: once a third of it has passed."""
        return until_us - now_us <= self.seconds * 1_000_000 * 2 / 3


async def take(st: Statements, name: str, holder: str, now_us: int, until_us: int) -> bool:
    """Hold the named lease until `until_us` if it is free, lapsed or already ours."""
    await st.many(
        "INSERT INTO leases (name, holder, until_us) VALUES (?, '', 0) ON CONFLICT DO NOTHING",
        [(name,)],
    )
    won = await st.rows(
        "UPDATE leases SET holder = ?, until_us = ? WHERE name = ? AND (holder = ? OR "
        "until_us <= ?) RETURNING name",
        (holder, until_us, name, holder, now_us),
    )
    return bool(won)


async def held_until(fetch: Fetch, name: str) -> int:
    """Until when (µs) the named lease is held; 0 if it is free or was never taken."""
    return (await held_by(fetch, name))[1]


async def held_by(fetch: Fetch, name: str) -> tuple[str, int]:
    """Who holds the named lease, and until when (µs); ("", 0) if it was never taken."""
    found = await fetch("SELECT holder, until_us FROM leases WHERE name = ?", (name,))
    return (str(found[0][0]), int(found[0][1])) if found else ("", 0)


async def give_up(st: Statements, name: str, holder: str) -> None:
    """Let the named lease go at once if `holder` has it (a process shutting down)."""
    await st.many("UPDATE leases SET until_us = 0 WHERE name = ? AND holder = ?", [(name, holder)])
