"""Sending the outbox (`storage.outbox`): every outgoing message, a webhook's delivery
(`worker`), a channel's message (`notify.deliver`) or a live message's edit
(`notify.live`), is sent in a task of its own, so that a slow receiver holds only its
own sends; `Flights` keeps those under way. A stop cuts them short and hands back what
they had claimed, in one short transaction, so that another worker takes it at once
rather than once its lease lapses (a worker that is killed leaves it to lapse). Retries
and giving up follow one policy (`delivery.policy`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ..domain.clock import Clock
    from ..storage.database import Database, Statements

log = logging.getLogger("headway.worker")

HAND_BACK_S = 2.0  # at a stop, for handing back what was cut short

C = TypeVar("C")
GiveBack = Callable[["Statements", Sequence[C], int], Awaitable[None]]


class Flights(Generic[C]):
    """Sends under way, by key (a delivery, a channel), each a task of its own, with the
    claim each holds (`hold`): those a stop cuts short are handed back (`stop`)."""

    def __init__(self, what: str, give_back: GiveBack[C] | None = None) -> None:
        """`what`: the sends, as a log line names them; `give_back`: how their claims
        are handed back (None: nothing is, their rows say what to send again)."""
        self.what = what
        self._give_back = give_back
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._held: dict[str, C] = {}
        self._cut: list[C] = []

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, key: object) -> bool:
        return key in self._tasks

    def start(
        self,
        key: str,
        send: Coroutine[Any, Any, None],
        *,
        name: str,
        held: C | None = None,
        ended: Callable[[], None] = lambda: None,
    ) -> asyncio.Task[None]:
        """Run `send` in a task of its own, holding `held` (or what `hold` gives it
        later); `ended()` once it ends, however."""
        task = asyncio.create_task(send, name=name)
        self._tasks[key] = task
        if held is not None:
            self._held[key] = held
        task.add_done_callback(lambda done: self._ended(key, done, ended))
        return task

    def hold(self, key: str, held: C) -> None:
        """The send under `key` holds `held` now (a channel it has taken)."""
        self._held[key] = held

    def _ended(self, key: str, task: asyncio.Task[None], ended: Callable[[], None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        held = self._held.pop(key, None)
        if held is not None and task.cancelled():
            self._cut.append(held)
        ended()

    async def cancel(self) -> None:
        """Cut every send under way short, and wait for them to end."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self, db: Database, clock: Clock) -> None:
        """Cut every send short and hand back what they held, in one short transaction;
        bounded, and never raises: what could not be handed back waits for its lease."""
        await self.cancel()
        cut, self._cut = self._cut, []
        if not cut or self._give_back is None:
            return
        try:
            async with asyncio.timeout(HAND_BACK_S):
                async with db.write() as st:
                    await self._give_back(st, cut, clock.now_us())
            log.info("handed back %d %s cut short by the stop", len(cut), self.what)
        except Exception as exc:
            log.warning(
                "%d %s cut short wait for their leases to lapse (%s)", len(cut), self.what, exc
            )
