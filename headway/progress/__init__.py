"""The progress store: where each task's live state is held until it expires."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from ..domain import Progress
from ..errors import Unavailable
from .feed import ChangeFeed

# How long a client refused for a full budget is told to wait.
BUDGET_RETRY_AFTER_S = 30


class ProgressBudgetFull(Unavailable):
    """The live-progress budget (of the store, or of one space) has no room for a write.
    Answered 503 with `Retry-After`; nothing is written."""

    def __init__(self, which: str) -> None:
        if which == "space":
            message = (
                "This space holds as much live progress as one space may; report smaller "
                "values, or retry when older progress expires."
            )
        else:
            message = "The server holds as much live progress as it may; retry later."
        super().__init__(message, headers={"retry-after": str(BUDGET_RETRY_AFTER_S)})
        self.which = which


class Measurement(NamedTuple):
    """One gauge of a store as a scrape shows it (see `headway.metrics`)."""

    name: str
    documentation: str
    value: float


class ProgressStore(Protocol):
    """Live progress by task uuid, expiring `ttl` seconds after its last write.

    Expiry is decided by the store's clock against each entry's `updated_at_us`. Reads
    never extend the expiry. An expired entry reads as None.

    A store shared by several instances also keeps the versions of families that their
    caches check (`storage.families.FamilyVersions`); a store of one process has no use
    for them and does not.
    """

    name: str

    async def get(self, task_uuid: str) -> Progress | None: ...

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]:
        """The progress of each task, in the order asked (None where there is none)."""

    def admit(self, task_uuid: str, space_uuid: str, progress: Progress) -> None:
        """Raise ProgressBudgetFull if the write of `progress` would go over a budget."""

    async def put(self, task_uuid: str, progress: Progress, space_uuid: str) -> None:
        """Store `progress`; raise ProgressBudgetFull if the store itself is full."""

    async def delete(self, task_uuids: Sequence[str]) -> None:
        """Forget the progress of these tasks (deleted), freeing what it held."""
        ...

    def change_feed(self) -> ChangeFeed:
        """A new change feed beside this store, reaching every instance the store serves
        (the caller closes it)."""

    async def gauges(self) -> list[Measurement]:
        """What a scrape shows of the store, measured now (cheap: no scan of entries);
        raises if the store does not answer."""

    async def ping(self) -> None:
        """Raise if the store does not answer."""

    async def close(self) -> None: ...
