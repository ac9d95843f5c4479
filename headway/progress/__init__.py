"""The progress store: where each task's live state is held until it expires."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..domain import Progress
from ..errors import Unavailable

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


class ProgressStore(Protocol):
    """Live progress by task uuid, expiring `ttl` seconds after its last write.

    Reads never extend the expiry. An expired entry reads as None.
    """

    name: str

    async def get(self, task_uuid: str) -> Progress | None: ...

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]: ...

    def admit(self, task_uuid: str, space_uuid: str, progress: Progress) -> None:
        """Raise ProgressBudgetFull if the write of `progress` would go over a budget."""

    async def put(self, task_uuid: str, progress: Progress, space_uuid: str) -> None:
        """Store `progress`; raise ProgressBudgetFull if the store itself is full."""

    async def ping(self) -> None:
        """Raise if the store does not answer."""

    async def close(self) -> None: ...
