"""Late runs, told once: a running task whose job has a usual duration and that runs
beyond it (`estimates.late`: its time so far, or once a tenth done its estimated total,
beyond max(1.2 x p95, p50 + 60 s)) is told `late` to each channel of its space that
wants it, once a run.

The look is the stall watch's (`notify.stalls`): under its lease, one instance at a
time, at each of its looks. A run told late is a row keyed by channel and task, inserted
only if absent, in the same transaction as its message, so that two instances looking
at once send one message; its row goes once the task no longer runs (finished, or
deleted), so that a late run is told again only as another run. A space whose look
fails is skipped (`loops.Parts`): the others are looked at all the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from ..domain.estimates import Estimate
from ..storage import channels
from ..storage.database import Database
from .stalls import Teller, Views

# Running tasks looked at per space (oldest first); beyond, newer ones are not watched.
MAX_WATCHED = 1_000

Estimates = Callable[[Sequence[str]], Awaitable[dict[str, Estimate]]]


class LateWatch(Teller):
    """Looks for late runs, one `step` at a time (inside the stall watch's)."""

    def __init__(self, db: Database, estimates: Estimates, views: Views, *, cap: int) -> None:
        super().__init__("late", db, views, cap)
        self.estimates = estimates

    async def step(self, now: int) -> int:
        """One look, by the holder of the stall watch's lease; how many messages it queued."""
        async with self.db.read() as fetch:
            watchers = await channels.late_watchers(fetch)
            if not watchers:
                return 0
            told = await channels.late_told(fetch, [w[0] for w in watchers])
        by_space: dict[str, list[tuple[str, bool]]] = defaultdict(list)
        for channel_uuid, space_uuid, steps in watchers:
            by_space[space_uuid].append((channel_uuid, steps))
        running: set[str] = set()
        skipped: set[str] = set()
        queued = 0
        for space_uuid, wanting in by_space.items():
            look = partial(self._space, space_uuid, wanting, told, running, now)
            found = await self.parts.run(f"space {space_uuid}", look, None)
            if found is None:
                skipped.update(channel for channel, _ in wanting)  # what it was told stays told
            else:
                queued += found
        ended = [pair for pair in told if pair[1] not in running and pair[0] not in skipped]
        if ended:
            async with self.db.write() as st:
                await channels.forget_late(st, ended)
        return queued

    async def _space(
        self,
        space_uuid: str,
        wanting: list[tuple[str, bool]],
        told: set[tuple[str, str]],
        running: set[str],
        now: int,
    ) -> int:
        """One space's look: its late runs told to the channels that want them."""
        async with self.db.read() as fetch:
            rows = await channels.active_tasks(fetch, space_uuid, MAX_WATCHED)
        parents = {row[0]: row[1] for row in rows}
        running.update(parents)
        found = await self.estimates(list(parents))
        mark = partial(channels.tell_late, at_us=now)
        queued = 0
        for task_uuid, estimate in found.items():
            if not estimate.late or estimate.usual is None:
                continue
            for channel_uuid, steps in wanting:
                if (channel_uuid, task_uuid) in told:
                    continue
                if parents.get(task_uuid) is not None and not steps:
                    continue
                elapsed_s, usual_s = round(estimate.elapsed_s, 3), estimate.usual.p50_s
                if await self.tell(
                    mark, channel_uuid, task_uuid, "late", now, elapsed_s=elapsed_s, usual_s=usual_s
                ):
                    told.add((channel_uuid, task_uuid))
                    queued += 1
        return queued
