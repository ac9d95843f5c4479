"""One client's budgets in one place: the `Visitor` of a request, looked up once per
request (`Visitors.of`) from its address, holds every check a client's requests pass:
its rates (`admit`, see `headway.api.limits`), its reads (`read_bill`), its live streams
(`hold_stream`, capped per address and per network by `api.holdings`), its idempotency
keys (`idempotency`) and its allowance of live progress (the `address` the service hands
the progress store, which refuses a client holding its whole allowance).

A read costs the tasks it renders, each child included, and is paid as they are rendered
(`ReadBill`): a task's children once it is read, a space's pages as each is sent, so a
big read's debt shows to the client's other reads while it is still sent. Its cost is not
known before: a space's size is held nowhere cheap to read, and children are counted
nowhere.

Modelled on ntfy's `server/visitor.go`: one small object per client holding what it may
do, so that a route or an `/mcp` tool asks it and decides nothing itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..domain.clock import Clock
from ..domain.errors import BadRequest
from ..domain.tasks import TaskView
from ..service import Idempotency
from .addresses import ClientAddresses
from .holdings import Holdings
from .limits import Kind, RateLimiter, Room, rate_limiter

if TYPE_CHECKING:
    from starlette.types import Scope

IDEMPOTENCY_KEY = b"idempotency-key"


class Visitors:
    """Every client's budgets: their rates (`rates`) and the live streams they hold
    (`streams`); `of(scope)` is the visitor of a request."""

    def __init__(
        self, settings: Settings, clock: Clock | None = None, room: Room | None = None
    ) -> None:
        # Rates run on real time even where a test moves the service's clock (`clock`:
        # the one they count on instead). `room`: see `limits.Room`.
        self.rates = rate_limiter(settings, clock, room)
        self.addresses = ClientAddresses(settings.trusted_proxies)
        capped = settings.rate_limits
        self.streams = Holdings(
            settings.streams_per_client if capped else None,
            settings.streams_per_network if capped else None,
            "live streams",
        )

    def of(self, scope: Scope) -> Visitor:
        """The visitor of a request (its address is worked out once, when first needed:
        a read with rates off needs none)."""
        return Visitor(self, scope)

    async def close(self) -> None:
        await self.rates.close()


class Visitor:
    """One client (an address, as rates count it) and everything it may do."""

    __slots__ = ("_address", "_scope", "_visitors")

    def __init__(self, visitors: Visitors, scope: Scope) -> None:
        self._visitors = visitors
        self._scope = scope
        self._address: str | None = None

    @property
    def address(self) -> str:
        """The client's address, as rates count it (see `addresses.ClientAddresses`)."""
        address = self._address
        if address is None:
            address = self._address = self._visitors.addresses.address_of(self._scope)
        return address

    async def admit(self, kind: Kind) -> None:
        """`RateLimiter.check` of one `kind` for this client (TooManyRequests if over)."""
        rates = self._visitors.rates
        # `counted_here` first: where the counts are in this process, no coroutine more.
        if rates.enabled and not rates.counted_here(kind, address := self.address):
            await rates.check(kind, address)

    async def read_bill(self) -> ReadBill:
        """Let a read through, counting 1 against the client's read rate (429 if its
        allowance is spent); its bill for the rest."""
        rates = self._visitors.rates
        if not rates.enabled:
            return FREE
        address = self.address
        if not rates.counted_here("reads", address):
            await rates.check("reads", address)
        return ReadBill(rates, address)

    def hold_stream(self) -> None:
        """One more live stream held by this client; TooManyRequests (nothing held) if it,
        or its network, holds as many as it may."""
        self._visitors.streams.take(self.address)

    def let_go_stream(self) -> None:
        """One live stream of this client's has ended."""
        self._visitors.streams.give_back(self.address)

    def idempotency(
        self, headers: Iterable[tuple[bytes, bytes]], operation: str, body: bytes
    ) -> Idempotency | None:
        """The request's `Idempotency-Key` (this client's), with the body it came with to
        `operation`, if it has one; 400 if it is given twice or is not 1 to 255 printable
        ASCII characters. A scan of the request's few headers: a create without the key
        pays nothing more."""
        found = None
        for name, value in headers:
            if name == IDEMPOTENCY_KEY:
                if found is not None:
                    raise BadRequest("Idempotency-Key is given twice; send it once.")
                found = value
        if found is None:
            return None
        return Idempotency.of(found.decode("latin-1"), operation, body, self.address)


class ReadBill:
    """What one read owes beyond the 1 it paid to be let through; `rates` None: free
    (rate limits off)."""

    __slots__ = ("_address", "_paid", "_rates")

    def __init__(self, rates: RateLimiter | None, address: str = "") -> None:
        self._rates = rates
        self._address = address
        self._paid = 1  # by `Visitor.read_bill`

    async def pay(self, tasks: int) -> None:
        """Count `tasks` rendered in all (the first one was paid for to be let through)."""
        if self._rates is None:
            return
        owed = tasks - self._paid
        self._paid = max(0, self._paid - tasks)
        if owed > 0:
            await self._rates.charge("reads", self._address, owed)

    def pages(self, pages: AsyncIterable[list[Any]]) -> AsyncIterable[list[Any]]:
        """`pages`, each paid for as it comes (its tasks and their children)."""
        return pages if self._rates is None else self._paid_pages(pages)

    async def _paid_pages(self, pages: AsyncIterable[list[Any]]) -> AsyncIterator[list[Any]]:
        async for page in pages:
            await self.pay(tasks_in(page))
            yield page


FREE = ReadBill(None)


def tasks_in(page: list[Any]) -> int:
    """The tasks of a page of a space read: each top-level task and its children (a
    task's JSON made already, `msgspec.Raw`, is a childless one's)."""
    count = len(page)
    for task in page:
        if type(task) is TaskView and task.children:
            count += len(task.children)
    return count
