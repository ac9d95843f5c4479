"""The progress store: where each task's live state is held until it expires."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..domain import Progress


class ProgressStore(Protocol):
    """Live progress by task uuid, expiring `ttl` seconds after its last write.

    Reads never extend the expiry. An expired entry reads as None.
    """

    name: str

    async def get(self, task_uuid: str) -> Progress | None: ...

    async def get_many(self, task_uuids: Sequence[str]) -> list[Progress | None]: ...

    async def put(self, task_uuid: str, progress: Progress) -> None: ...

    async def ping(self) -> None:
        """Raise if the store does not answer."""

    async def close(self) -> None: ...
