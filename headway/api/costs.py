"""What a read costs its client (HEADWAY_RATE_READS, see `headway.limits`): the tasks it
renders, each child included, at least 1.

A read is let through while its client's allowance is not spent, and counts 1 then
(`admit`). The rest is paid as the tasks are rendered: a task's children once it is read,
a space's pages (the owner's read, a share link's, a live stream's snapshot) as each is
rendered, so a big read's debt shows to the client's other reads while it is still sent.
A read's cost is not known before: a space's size is not held anywhere cheap to read
(held small spaces aside), and its children are counted nowhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextvars import ContextVar
from typing import Any

from starlette.requests import Request

from ..domain import TaskView
from ..limits import RateLimiter


class ReadBill:
    """What one read owes beyond the 1 it paid to be let through; `limiter` None: free
    (rate limits off)."""

    __slots__ = ("_address", "_limiter", "_paid")

    def __init__(self, limiter: RateLimiter | None, address: str = "") -> None:
        self._limiter = limiter
        self._address = address
        self._paid = 1  # by `admit`

    async def pay(self, tasks: int) -> None:
        """Count `tasks` more rendered (the first one was paid for by `admit`)."""
        if self._limiter is None:
            return
        owed = tasks - self._paid
        self._paid = max(0, self._paid - tasks)
        if owed > 0:
            await self._limiter.charge("reads", self._address, owed)

    def pages(self, pages: AsyncIterable[list[Any]]) -> AsyncIterable[list[Any]]:
        """`pages`, each paid for as it comes (its tasks and their children)."""
        return pages if self._limiter is None else self._paid_pages(pages)

    async def _paid_pages(self, pages: AsyncIterable[list[Any]]) -> AsyncIterator[list[Any]]:
        async for page in pages:
            await self.pay(tasks_in(page))
            yield page


FREE = ReadBill(None)

# The client of the `/mcp` request being answered, set by `api.mcp` for its tools (which
# the SDK calls without the request); None: rates are off.
MCP_READER: ContextVar[tuple[RateLimiter, str] | None] = ContextVar("mcp_reader", default=None)


async def admit(request: Request) -> ReadBill:
    """Let a read through, counting 1 against its client's read rate (429 if the client's
    allowance is spent); its bill for the rest."""
    limiter: RateLimiter = request.app.state.limiter
    if not limiter.enabled:
        return FREE
    address = limiter.address_of(request.scope)
    if not limiter.counted_here("reads", address):
        await limiter.check("reads", address)
    return ReadBill(limiter, address)


async def admit_tool() -> ReadBill:
    """`admit`, for a read by an `/mcp` tool (its client: `MCP_READER`)."""
    reader = MCP_READER.get()
    if reader is None:
        return FREE
    limiter, address = reader
    await limiter.check("reads", address)
    return ReadBill(limiter, address)


def tasks_in(page: list[Any]) -> int:
    """The tasks of a page of a space read: each top-level task and its children (a
    task's JSON made already, `msgspec.Raw`, is a childless one's)."""
    count = len(page)
    for task in page:
        if type(task) is TaskView and task.children:
            count += len(task.children)
    return count
