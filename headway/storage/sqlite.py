"""SQLite's own ways, for `storage.database`: a writer on a thread of its own, reads on
the event loop's thread, and the settings of every connection."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.util import await_

from ..domain.errors import DatabaseUnavailable


class SqliteWriter:
    """A SQLite connection for `Database.write`, used only on a thread of its own.

    Each trip runs a list of statements there, and may end the transaction: a batch of
    creates takes two trips (BEGIN and the claim; the insert and COMMIT) where a pooled
    connection took a trip for each statement and more for SQLAlchemy's own. Trips run
    one after another, in the order they were sent. A trip that fails rolls its
    transaction back before it answers.
    """

    def __init__(self, path: str, committed: Callable[[], None]) -> None:
        self._path = path
        self._committed = committed
        # Started by the first trip, and again after `close` (as the engine's pool is).
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()  # `connection`: each thread's own, opened there

    @property
    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="headway-sqlite-writer")
        return self._executor

    async def trip(
        self, statements: list[tuple[str, Sequence[Any], bool]], *, commit: bool = False
    ) -> list[Any]:
        """Run `statements` (sql, parameters, whether executemany), then COMMIT if asked;
        the rows of the last one."""
        loop = asyncio.get_running_loop()
        try:
            rows = await loop.run_in_executor(self._thread, self._run, statements, commit)
        except sqlite3.OperationalError as exc:  # locked past the busy timeout, I/O
            raise DatabaseUnavailable(str(exc)) from exc
        if commit:
            self._committed()
        return rows

    def roll_back(self) -> None:
        """End the transaction under way, if any, once the trips sent before have run;
        never waits (a cancelled write calls this)."""
        self._thread.submit(self._roll_back)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, self._close)
            executor.shutdown(wait=False)

    def _run(self, statements: list[tuple[str, Sequence[Any], bool]], commit: bool) -> list[Any]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = _open_for_writes(self._path)
        rows: list[Any] = []
        try:
            for sql, params, many in statements:
                if many:
                    connection.executemany(sql, params)
                    rows = []
                else:
                    rows = connection.execute(sql, params).fetchall()
            if commit:
                connection.execute("COMMIT")
        except BaseException:
            self._roll_back()
            raise
        return rows

    def _roll_back(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None and connection.in_transaction:
            try:
                connection.execute("ROLLBACK")
            except sqlite3.Error:  # rolled back already, or the file is gone: start over
                self._close()

    def _close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            self._local.connection = None
            connection.close()


class WriterStatements:
    """`Statements` on the `SqliteWriter`. BEGIN IMMEDIATE goes with the first statement
    whose rows are wanted; statements run for their effect (`many`) wait and go with the
    next one, or with the COMMIT: their errors come there."""

    __slots__ = ("_begun", "_waiting", "_writer")
    is_sqlite = True

    def __init__(self, writer: SqliteWriter) -> None:
        self._writer = writer
        self._waiting: list[tuple[str, Sequence[Any], bool]] = [("BEGIN IMMEDIATE", (), False)]
        self._begun = False

    async def rows(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        return await self._send((sql, params, False))

    async def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        self._waiting.append((sql, params, True))

    async def commit(self) -> None:
        if self._begun or len(self._waiting) > 1:  # nothing written: nothing to commit
            await self._send(None, commit=True)

    def roll_back(self) -> None:
        if self._begun:
            self._writer.roll_back()

    async def _send(
        self, last: tuple[str, Sequence[Any], bool] | None, *, commit: bool = False
    ) -> list[Any]:
        statements = self._waiting
        if last is not None:
            statements.append(last)
        self._waiting = []
        self._begun = True
        return await self._writer.trip(statements, commit=commit)


class InLoopReads:
    """Reads of a SQLite file run right on the event loop's thread, on a connection of
    their own.

    A read of a page of a space costs about 200 µs in SQLite itself, and several times
    that once it hops to a driver thread and back under load (see PERF-NOTES). Readers
    never wait for SQLite's writer (WAL), and this connection never waits for anything
    (no busy timeout): in the rare case SQLite answers busy, `fetch` answers None and the
    caller reads on a pooled connection's thread instead, where waiting blocks nothing.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None

    def fetch(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        try:
            connection = self._connection
            if connection is None:
                connection = self._connection = _open_for_reads(self._path)
            return connection.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return None
            self.close()  # opened again by the next read
            raise DatabaseUnavailable(str(exc)) from exc

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


# Whether a database holds Alembic's table (SQLite's way), and the revision in it: the
# same table and query on PostgreSQL, where `Database._revision` reads it too.
HAS_REVISION = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
REVISION = "SELECT version_num FROM alembic_version"


def revision(path: str) -> str | None:
    """The file's migration revision (None: a new file, or one Headway has not set up),
    read on a connection opened for it alone; DatabaseUnavailable if the file cannot be
    opened or read (a folder, a file of another kind, no permission)."""
    try:
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            if connection.execute(HAS_REVISION).fetchone() is None:
                return None
            row = connection.execute(REVISION).fetchone()
            return None if row is None else str(row[0])
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise DatabaseUnavailable(str(exc)) from exc


def _open_for_reads(path: str) -> sqlite3.Connection:
    # `mode=rw`: a file that is gone is an error here, not a new empty database.
    uri = f"{Path(path).absolute().as_uri()}?mode=rw"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout=0")
    connection.execute("PRAGMA query_only=ON")
    return connection


def _open_for_writes(path: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    on_connect(connection, None)
    return connection


def file_bytes(path: str) -> int:
    """Bytes a SQLite database takes on disk: its file and its write-ahead log (the
    shared-memory index beside them is a few dozen KiB at most). OSError if the file
    cannot be examined."""
    size = os.stat(path).st_size
    with contextlib.suppress(FileNotFoundError):  # no write-ahead log (yet, or any more)
        size += os.stat(f"{path}-wal").st_size
    return size


def take_write_lock(path: str, timeout_s: float) -> None:
    connection = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's begin event, not the sqlite3 module, decide where transactions start.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA cache_size=-256")  # KiB: the OS page cache does the rest
    cursor.close()


def on_begin(conn: Connection) -> None:
    # Pooled connections: a migration takes the write lock up front. Reads that found the
    # database busy run without a transaction: each statement reads a consistent
    # snapshot, and no BEGIN/ROLLBACK round trips through the thread.
    # On aiosqlite's connection itself: one trip to its thread, not a cursor's four.
    if conn.connection.info.pop("immediate", False):
        try:
            await_(conn.connection.driver_connection.execute("BEGIN IMMEDIATE"))
        except sqlite3.OperationalError as exc:  # locked past the busy timeout, I/O
            raise DatabaseUnavailable(str(exc)) from exc
        except BaseException:
            # Cancelled while the BEGIN waited on the lock in the driver's thread, where it
            # may still take it: drop the connection (closing it ends that transaction)
            # rather than pool it with a transaction nobody will end.
            with contextlib.suppress(Exception):  # the cancellation is what goes on
                conn.invalidate()
            raise
