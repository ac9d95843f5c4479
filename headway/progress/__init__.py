"""The progress store: where each task's live state is held until it expires."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, NoReturn, Protocol, TypeVar

from ..domain.errors import TooManyRequests, Unavailable
from ..domain.estimates import Track
from ..domain.tasks import Progress
from ..ops import metrics

T = TypeVar("T")

# How long a client refused for a full budget, or for its full allowance, is told to wait.
BUDGET_RETRY_AFTER_S = 30
# The client a write is counted for when none is known (a test, a tool of the operator).
NO_CLIENT = "unknown"
# New tasks are admitted only while the store, their space and their client are below
# this fraction of their budgets; the rest is headroom for tasks that already report, so
# they keep working.
ADMIT_NEW_BELOW = 0.9
# When finished progress must give way, this fraction of the budget (Redis: of its
# maxmemory) more is freed at once, so that who gives it is decided rarely.
ROOM_SLACK = 1 / 64


class ProgressBudgetFull(Unavailable):
    """The live-progress budget (of the store, or of one space) has no room for a write.
    Answered 503 with `Retry-After`; nothing is written."""

    def __init__(self, which: str) -> None:
        super().__init__(
            "This space holds as much live progress as one space may; report smaller values, "
            "or retry when older progress expires."
            if which == "space"
            else "The server holds as much live progress as it may; retry later.",
            headers={"retry-after": str(BUDGET_RETRY_AFTER_S)},
        )
        self.which = which


class ClientAllowanceFull(TooManyRequests):
    """The client address holds its allowance of the live-progress budget
    (HEADWAY_PROGRESS_MEMORY_PER_CLIENT), over all the spaces it writes to: its new tasks,
    and its reports that would hold more, are answered 429 with `Retry-After` until some
    of its progress is finished, deleted or expires. Nothing is written."""

    def __init__(self) -> None:
        super().__init__(
            "Your address holds as much live progress as one client may, over all its "
            "spaces; finish or delete tasks, report smaller values, or retry later.",
            headers={"retry-after": str(BUDGET_RETRY_AFTER_S)},
        )


def refuse(which: str) -> NoReturn:
    """Raise, counted, the refusal of a write that would take `which` over its budget:
    "client" (ClientAllowanceFull), "space" or "store" (ProgressBudgetFull)."""
    metrics.refused(
        {"client": "client_budget", "space": "space_budget"}.get(which, "progress_budget")
    )
    if which == "client":
        raise ClientAllowanceFull()
    raise ProgressBudgetFull(which)


class Measurement(NamedTuple):
    """One gauge of a store as a scrape shows it (see `headway.ops.metrics`)."""

    name: str
    documentation: str
    value: float


class ProgressStore(Protocol):
    """Live progress by task uuid, expiring `ttl` seconds after its last write.

    Expiry is decided by the store's clock against each entry's `updated_at_us`. Reads
    never extend the expiry. An expired entry reads as None.

    Each write is counted for the client address that wrote it (see
    `api.addresses.ClientAddresses`): no client may hold more than its allowance of the
    budget in progress of unfinished tasks, however many spaces it writes to. A finished
    task's progress is kept for reading until it expires, but no longer counts against
    its space's or its client's allowance: it gives way (reads as expired) when room is
    needed, and each client's finished progress is bounded by its allowance as well.

    A store shared by several instances also keeps the versions of families that their
    caches check (`coherence.FamilyVersions`); a store of one process has no use
    for them and does not.
    """

    name: str
    remembers_since_us: int | None
    """When this store's memory began: progress reported before then is lost (a store in
    the process's memory starts empty at each restart). None for a store whose progress
    outlives the server's restarts."""

    async def get(self, task_uuid: str) -> Progress | None: ...

    async def track(self, task_uuid: str) -> Track | None:
        """The track of the task's reports (`estimates.follow`), kept beside its live
        progress and gone with it; None if it has none (no count reported, finished,
        expired, or estimates off)."""

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        """The progress of each task, in the order asked (None where there is none)."""

    def admit(
        self,
        task_uuid: str,
        space_uuid: str,
        progress: Progress,
        *,
        client: str = NO_CLIENT,
        finished: bool = False,
    ) -> None:
        """Raise ProgressBudgetFull or ClientAllowanceFull if the write of `progress` by
        `client` would go over a budget or an allowance. A store that decides only as it
        writes (Redis, atomically for every instance) raises from `put` instead, and keeps
        this check, which passes everything."""

    async def admit_client(self, client: str) -> None:
        """Raise ClientAllowanceFull if the client holds so much progress that no new task
        of its could report (a create is refused before anything is written)."""

    async def put(
        self,
        task_uuid: str,
        progress: Progress,
        space_uuid: str,
        *,
        client: str = NO_CLIENT,
        finished: bool = False,
    ) -> None:
        """Store `progress`, written by `client`, of a task that has `finished` or not;
        raise ProgressBudgetFull if the store itself is full, ClientAllowanceFull if the
        client's allowance is (a store that decides as it writes)."""

    async def delete(self, task_uuids: Sequence[str]) -> None:
        """Forget the progress of these tasks (deleted), freeing what it held."""

    async def release(self, task_uuids: Sequence[str]) -> None:
        """These tasks finished without a write of their progress (a parent finished by
        its last step): keep their progress as finished, no longer live."""

    async def gauges(self) -> list[Measurement]:
        """What a scrape shows of the store, measured now (cheap: no scan of entries);
        raises if the store does not answer."""

    async def ping(self) -> None:
        """Raise if the store does not answer."""

    async def retry_with_room(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` again, a write of another user of the store's memory (the rate
        counters, in Redis) that the store's full memory just refused, once finished
        progress gave way; a store whose memory no one else uses just tries again."""
        return await attempt()

    async def close(self) -> None: ...
