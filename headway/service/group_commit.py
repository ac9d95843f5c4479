"""Group commit: concurrent writes of one kind share one transaction and one commit.

A commit is what a durable write costs (on SQLite with `synchronous=FULL`, an fsync of the
write-ahead log); creates arriving while one commit is under way wait for it, then all go
together in the next transaction. Each caller is answered only after the commit that holds
its write: a batch never answers before it is durable.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

from sqlalchemy.exc import DataError, IntegrityError

from ..storage.database import DatabaseUnavailable

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")
# What a batch's transaction hands its writer: its statements, or a unit of work holding
# them (see `service.unit`).
Handle = TypeVar("Handle")

WriteBatch = Callable[[Handle, Sequence[Item]], Awaitable[Sequence[Outcome | Exception]]]

# Most writes taken into one transaction: bounds the statements' parameter lists and the
# time one batch holds the write lock.
BATCH_CAP = 256

# Errors that one item's data may cause on its own (a constraint, a value the database
# refuses): the batch is written again one item at a time, so that only that item fails.
_ONE_ITEMS_FAULT = (IntegrityError, DataError, sqlite3.IntegrityError, sqlite3.DataError)


class GroupCommit(Generic[Handle, Item, Outcome]):
    """Writes `Item`s in batches, each batch one transaction, `begin()` (which hands out
    the transaction's statements, or a unit of work that holds them and publishes what
    the batch changed as it ends, before any caller is answered).

    `write_batch(handle, items)` writes a batch and returns one outcome per item, in order:
    a value for its caller, or an exception that fails that item alone (it must then have
    written nothing for it). An exception raised by `write_batch` or by the commit fails
    every item of the batch with it (the transaction rolled back).

    A caller cancelled while its item waits in the queue is dropped from it; one cancelled
    once its batch is under way leaves the batch alone: its write commits or fails with the
    others, unanswered.
    """

    def __init__(
        self,
        begin: Callable[[], AbstractAsyncContextManager[Handle]],
        write_batch: WriteBatch[Handle, Item, Outcome],
    ) -> None:
        self._begin = begin
        self._write_batch = write_batch
        self._queue: deque[tuple[Item, asyncio.Future[Outcome]]] = deque()
        # At most one writer at a time: it drains the queue, a batch after another, and
        # ends when the queue is empty. Requests never run a batch themselves, so that
        # cancelling a request cannot cancel the writes of others.
        self._writer: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Writes queued for the next batch (not those of a batch under way)."""
        return len(self._queue)

    async def submit(self, item: Item) -> Outcome:
        """Write `item` with whatever else is waiting; return its outcome once committed."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._drain(), name="headway-group-commit")
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = []
                while self._queue and len(batch) < BATCH_CAP:
                    waiting = self._queue.popleft()
                    if not waiting[1].cancelled():
                        batch.append(waiting)
                if batch:
                    await self._run(batch)
        finally:
            self._writer = None
            # Only when the writer itself was cancelled (the loop is shutting down).
            _fail(self._queue, DatabaseUnavailable("The write was interrupted."))
            self._queue.clear()

    async def _run(self, batch: list[tuple[Item, asyncio.Future[Outcome]]]) -> None:
        try:
            await self._write(batch)
        except BaseException:
            # The writer was cancelled (shutdown): nobody of this batch may wait forever.
            _fail(batch, DatabaseUnavailable("The write was interrupted."))
            raise

    async def _write(self, batch: list[tuple[Item, asyncio.Future[Outcome]]]) -> None:
        items = [item for item, _ in batch]
        try:
            async with self._begin() as handle:
                outcomes = await self._write_batch(handle, items)
        except _ONE_ITEMS_FAULT as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            for one in batch:
                await self._write([one])
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


def _fail(batch: Iterable[tuple[Any, asyncio.Future[Any]]], exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
