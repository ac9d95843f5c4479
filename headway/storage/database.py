"""The database connection: engine, transactions, migrations and health."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util import await_, greenlet_spawn

from ..config import sqlite_file

T = TypeVar("T")
# Runs a read with `?` placeholders and answers its rows (see `Database.rows`).
Fetch = Callable[[str, Sequence[Any]], Awaitable[Sequence[Any]]]
MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration. Starting on a database already there needs no Alembic at all
# (a test checks this matches the migrations directory).
HEAD_REVISION = "0005"


class Statements(Protocol):
    """Statements with `?` placeholders run within a transaction (see
    `Database.written`). A statement's errors may come only with a later statement or
    with the commit (see `_WriterStatements`)."""

    async def rows(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        """Run one statement; its rows, if it returns any."""
        ...

    async def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each parameter list (executemany)."""
        ...


def async_url(url: str) -> str:
    """The SQLAlchemy URL with Headway's async driver for the configured database."""
    scheme, _sep, rest = url.partition(":")
    base = scheme.split("+", 1)[0]
    if base == "sqlite":
        return f"sqlite+aiosqlite:{rest}"
    if base in ("postgresql", "postgres"):
        return f"postgresql+asyncpg:{rest}"
    return url


class DatabaseUnavailable(Exception):
    """The connection to the database broke in use (e.g. the server restarted)."""


@asynccontextmanager
async def _unavailable_when_disconnected() -> AsyncIterator[None]:
    try:
        yield
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise DatabaseUnavailable(str(exc.orig or exc)) from exc
        raise


class Database:
    """One engine and the way Headway uses it.

    SQLite allows one writer at a time; within this process, writes queue on an asyncio
    lock rather than on SQLite's busy timeout, which would block the event loop's thread.
    """

    def __init__(self, url: str) -> None:
        self.url = async_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        # Statement parameters hold space uuids, which are credentials: keep them out of
        # error messages and so out of logs.
        options: dict[str, Any] = {"hide_parameters": True}
        self._path = sqlite_file(self.url) if self.is_sqlite else None
        if self._path is not None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            options["connect_args"] = {"timeout": 30}
            # Each connection is a thread and a page cache; SQLite serves one writer anyway.
            # Transactions end explicitly (see `write`): no rollback round trip on return.
            options.update(pool_size=4, max_overflow=4, pool_reset_on_return=None)
        else:
            options.update(pool_size=10, max_overflow=10, pool_pre_ping=False, pool_timeout=5)
            options["connect_args"] = {"timeout": 5, "command_timeout": 10}
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_connect)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin)
        self._write_lock = asyncio.Lock() if self.is_sqlite else None
        self._in_loop = None if self._path is None else _InLoopReads(self._path)
        self._writer = None if self._path is None else _SqliteWriter(self._path, self._committed)
        # Transactions committed so far, whichever way they were written.
        self.commits = 0
        event.listen(self.engine.sync_engine, "commit", self._committed)
        # SQLite reads already run without a transaction (see `_sqlite_begin`).
        self._reads = (
            self.engine
            if self.is_sqlite
            else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that commits on success and rolls back on any exception."""
        if self._write_lock is None:
            async with _unavailable_when_disconnected(), self.engine.begin() as conn:
                yield conn
            return
        async with self._write_lock, self.engine.connect() as conn:
            # Take SQLite's write lock up front (BEGIN IMMEDIATE): a transaction that
            # reads before it writes could otherwise fail against another process's write.
            (await conn.get_raw_connection()).info["immediate"] = True
            async with conn.begin():
                yield conn

    def _committed(self, *_args: Any) -> None:
        self.commits += 1

    @asynccontextmanager
    async def written(self) -> AsyncIterator[Statements]:
        """A transaction as `write` makes it, for statements in SQL text.

        On SQLite, on a connection and thread of its own (`_SqliteWriter`), in as few
        trips to that thread as the statements allow: under load, what a batch of creates
        waits for is those trips, each behind a busy event loop.
        """
        if self._writer is not None:
            assert self._write_lock is not None
            async with self._write_lock:
                statements = _WriterStatements(self._writer)
                try:
                    yield statements
                except BaseException:
                    statements.roll_back()
                    raise
                await statements.commit()
            return
        async with self.write() as conn:
            yield _AlchemyStatements(conn)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads, outside any transaction: each statement sees its own
        consistent snapshot, and no BEGIN or ROLLBACK costs a round trip."""
        async with _unavailable_when_disconnected(), self._reads.connect() as conn:
            yield conn

    @asynccontextmanager
    async def rows(self) -> AsyncIterator[Fetch]:
        """A `fetch(sql, params)` for reads of many rows, outside any transaction like
        `read`: each call is one round trip and answers plain tuples; `sql` uses `?`
        placeholders.

        On SQLite it runs on the event loop's thread (see `_InLoopReads`). PostgreSQL has
        no thread: SQLAlchemy runs it.
        """
        if self._in_loop is not None:
            yield self._in_loop_fetch
            return
        async with self.read() as conn:

            async def fetch_pg(sql: str, params: Sequence[Any]) -> Sequence[Any]:
                return (await conn.exec_driver_sql(_numbered(sql), tuple(params))).all()

            yield fetch_pg

    async def _in_loop_fetch(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        assert self._in_loop is not None
        found = self._in_loop.fetch(sql, params)
        if found is not None:
            return found
        async with self._threaded_rows() as fetch:  # busy: wait on a thread instead
            return await fetch(sql, params)

    @asynccontextmanager
    async def _threaded_rows(self) -> AsyncIterator[Fetch]:
        """SQLite reads on a pooled connection's thread, for when the event loop's reader
        found the database busy."""
        try:
            pooled = await self.engine.raw_connection()
        except sqlite3.OperationalError as exc:  # the file is gone, unreadable...
            raise DatabaseUnavailable(str(exc)) from exc
        try:
            driver = pooled.driver_connection
            assert driver is not None

            async def fetch_sqlite(sql: str, params: Sequence[Any]) -> Sequence[Any]:
                try:
                    return list(await driver.execute_fetchall(sql, params))
                except sqlite3.OperationalError as exc:  # locked, I/O: the database's
                    raise DatabaseUnavailable(str(exc)) from exc

            yield fetch_sqlite
        finally:
            # Back to the pool; closing a connection beyond the pool's size awaits.
            await greenlet_spawn(pooled.close)

    async def fetch(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        """One read of rows as `rows` makes it, tried once more if its pooled connection
        turned out dead (see `read_once_more`)."""
        if self._in_loop is not None:
            return await self._in_loop_fetch(sql, params)
        try:
            async with self.rows() as fetch:
                return await fetch(sql, params)
        except DatabaseUnavailable:
            pass
        async with self.rows() as fetch:
            return await fetch(sql, params)

    async def read_once_more(self, query: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run a read, and once more if its pooled connection turned out dead.

        Pooled connections are not pinged before use (a round trip that doubled the cost
        of a report on PostgreSQL). After a database restart, the first use of an old
        connection fails and SQLAlchemy discards the whole pool; the second try gets a
        new connection.
        """
        try:
            async with self.read() as conn:
                return await query(conn)
        except DatabaseUnavailable:
            pass
        async with self.read() as conn:
            return await query(conn)

    async def migrate(self) -> None:
        """Create or upgrade the schema to the newest migration, in one transaction."""
        async with self.write() as conn:
            if not self.is_sqlite:
                # Instances starting together migrate one at a time.
                await conn.execute(text("SELECT pg_advisory_xact_lock(72657)"))
            if await self._revision(conn) != HEAD_REVISION:
                await conn.run_sync(_upgrade)

    async def _revision(self, conn: AsyncConnection) -> str | None:
        """The schema's migration revision (None: a database Headway has not set up)."""
        if self.is_sqlite:
            exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
        else:
            exists = "SELECT 1 WHERE to_regclass('alembic_version') IS NOT NULL"
        if (await conn.execute(text(exists))).first() is None:
            return None
        return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()

    async def ping(self) -> None:
        """Raise if the database does not answer."""
        await self.read_once_more(lambda conn: conn.execute(text("SELECT 1")))

    async def check_writable(self, timeout_s: float = 1.0) -> None:
        """Raise if the database cannot take a write within `timeout_s`.

        On SQLite, another process (a backup, a stuck writer) can hold the write lock
        while reads still work; writes would then wait and fail. A fresh connection
        takes the write lock (BEGIN IMMEDIATE) and gives it straight back. PostgreSQL
        takes writes concurrently: its read check stands for both.
        """
        if self._path is not None:
            await asyncio.to_thread(_take_write_lock, self._path, timeout_s)

    async def close(self) -> None:
        if self._in_loop is not None:
            self._in_loop.close()
        if self._writer is not None:
            await self._writer.close()
        await self.engine.dispose()


@functools.lru_cache(maxsize=64)
def _numbered(sql: str) -> str:
    """`sql` with PostgreSQL's placeholders: `$1`, `$2`... for each `?`."""
    parts = sql.split("?")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))


class _SqliteWriter:
    """A SQLite connection for `Database.written`, used only on a thread of its own.

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


class _WriterStatements:
    """`Statements` on the `_SqliteWriter`. BEGIN IMMEDIATE goes with the first statement
    whose rows are wanted; statements run for their effect (`many`) wait and go with the
    next one, or with the COMMIT: their errors come there."""

    __slots__ = ("_begun", "_waiting", "_writer")

    def __init__(self, writer: _SqliteWriter) -> None:
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


class _AlchemyStatements:
    """`Statements` through SQLAlchemy (PostgreSQL: asyncpg has no thread to hop to)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def rows(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        result = await self._conn.exec_driver_sql(_numbered(sql), tuple(params))
        return result.all() if result.returns_rows else []

    async def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        await self._conn.exec_driver_sql(_numbered(sql), [tuple(p) for p in params])


class _InLoopReads:
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


def _open_for_reads(path: str) -> sqlite3.Connection:
    # `mode=rw`: a file that is gone is an error here, not a new empty database.
    uri = f"{Path(path).absolute().as_uri()}?mode=rw"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout=0")
    connection.execute("PRAGMA query_only=ON")
    return connection


def _open_for_writes(path: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    _sqlite_connect(connection, None)
    return connection


def _take_write_lock(path: str, timeout_s: float) -> None:
    connection = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def _upgrade(connection: Connection) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's begin event, not the sqlite3 module, decide where transactions start.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA cache_size=-256")  # KiB: the OS page cache does the rest
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # Writes take the write lock up front. Reads run without a transaction: each statement
    # reads a consistent snapshot, and no BEGIN/ROLLBACK round trips through the thread.
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
