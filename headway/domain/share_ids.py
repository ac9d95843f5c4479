"""What a share link shows: a space's tasks with every uuid replaced by an opaque id.

A task's id under a link is an HMAC of its uuid, keyed by a key of that link derived from
the server's secret (kept in the database, the same on every instance and across
restarts): stable for that task under that link, different under every other link and on
every other server. No one holding the link can recover the uuid from it, nor, lacking
the secret, confirm a guessed uuid against it (nor the space's, which is never shown).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import msgspec

from .tasks import ProgressView, TaskView

_decode_task = msgspec.json.Decoder(TaskView).decode


class SharedTask(msgspec.Struct, gc=False):
    """A task as a share link shows it: every member of a task but `uuid`, `space_uuid`
    and `parent_uuid`, which become `id` and `parent_id` (null for a top-level task)."""

    id: str
    parent_id: str | None
    title: str | None
    source: str | None
    created_at: str
    finished_at: str | None
    duration: int | None
    progress: ProgressView | None
    children: list[SharedTask]


class ShareView:
    """The tasks of a space as one share link shows them, under the server's `secret`."""

    __slots__ = ("_key", "share_uuid")

    def __init__(self, share_uuid: str, secret: bytes) -> None:
        self.share_uuid = share_uuid
        link_key = hmac.digest(secret, b"share link\0" + uuid.UUID(share_uuid).bytes, "sha256")
        self._key = hmac.new(link_key, digestmod=hashlib.sha256)

    def task_id(self, task_uuid: str) -> str:
        """The task's id under this link: 128 bits of HMAC, base64url."""
        mac = self._key.copy()
        mac.update(task_uuid.encode())
        return base64.urlsafe_b64encode(mac.digest()[:16]).rstrip(b"=").decode()

    def task(self, task: TaskView | msgspec.Raw) -> SharedTask:
        if isinstance(task, msgspec.Raw):  # a child's JSON as the family cache holds it
            task = _decode_task(task)
        parent = task.parent_uuid
        return SharedTask(
            self.task_id(task.uuid),
            None if parent is None else self.task_id(parent),
            task.title,
            task.source,
            task.created_at,
            task.finished_at,
            task.duration,
            task.progress,
            [self.task(child) for child in task.children],
        )

    async def pages(self, pages: AsyncIterable[list[TaskView]]) -> AsyncIterator[list[Any]]:
        """A space read's pages, as this link shows them."""
        async for page in pages:
            yield [self.task(task) for task in page]
