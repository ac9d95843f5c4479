"""The database's one surface: reads and write transactions of `?` SQL text on SQLite
and PostgreSQL alike, migrations and health. No SQLAlchemy connection leaves it."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence, Sized
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, ExceptionContext
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from ..config import sqlite_file
from ..domain.errors import DatabaseUnavailable
from ..ops.dependencies import lost_connection
from . import sqlite

__all__ = ["Database", "DatabaseUnavailable", "Fetch", "Statements"]

# Runs one statement with `?` placeholders and answers its rows as tuples: what
# `Database.read` yields, `Database.fetch` is, and `Statements.rows` is within a write.
Fetch = Callable[[str, Sequence[Any]], Awaitable[Sequence[Any]]]
MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration. Starting on a database already there needs no Alembic at all
# (a test checks this matches the migrations directory).
HEAD_REVISION = "0016"
# Seconds after a lost connection during which pooled connections are pinged at checkout.
SUSPECT_S = 30.0
T = TypeVar("T")


class Statements(Protocol):
    """Statements with `?` placeholders run within one write transaction (see
    `Database.write`).

    A statement's errors may come only with a later statement or with the commit (see
    `sqlite.WriterStatements`): what needs to know what a statement changed asks for it
    with RETURNING, or reads it.
    """

    # Which SQL the transaction speaks: SQLite's (True) or PostgreSQL's.
    is_sqlite: bool

    async def rows(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        """Run one statement now; its rows, if it returns any (a `Fetch`)."""
        ...

    async def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each parameter list (executemany), for its effect: it
        may wait to go with the next statement or the commit."""
        ...


def marks(values: Sized) -> str:
    """One `?` for each value, for an IN list."""
    return ", ".join("?" * len(values))


def chunks(values: Sequence[T], size: int) -> list[Sequence[T]]:
    """`values` in runs of at most `size`, each named in one statement (bounding its
    parameters)."""
    return [values[start : start + size] for start in range(0, len(values), size)]


def async_url(url: str) -> str:
    """The SQLAlchemy URL with Headway's async driver for the configured database."""
    scheme, _sep, rest = url.partition(":")
    base = scheme.split("+", 1)[0]
    if base == "sqlite":
        return f"sqlite+aiosqlite:{rest}"
    if base in ("postgresql", "postgres"):
        return f"postgresql+asyncpg:{rest}"
    return url


@asynccontextmanager
async def _unavailable_when_disconnected() -> AsyncIterator[None]:
    try:
        yield
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise DatabaseUnavailable(str(exc.orig or exc)) from exc
        raise


class Database:
    """One engine and the way Headway uses it: `read` and `fetch` for reads, `write` for
    transactions, `migrate`, `ping` and `check_writable` for the service's start and
    health, `close` at its end.

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
            # Pooled connections serve migrations and reads that found the database busy
            # (writes have a thread of their own). Each is a thread and a page cache.
            # Transactions end explicitly (see `_transaction`): no rollback on return.
            options.update(pool_size=4, max_overflow=4, pool_reset_on_return=None)
        else:
            options.update(pool_size=10, max_overflow=10, pool_pre_ping=False, pool_timeout=5)
            options["connect_args"] = {"timeout": 5, "command_timeout": 10}
        self._engine: AsyncEngine = create_async_engine(self.url, **options)
        if self.is_sqlite:
            event.listen(self._engine.sync_engine, "connect", sqlite.on_connect)
            event.listen(self._engine.sync_engine, "begin", sqlite.on_begin)
        else:
            event.listen(self._engine.sync_engine, "handle_error", self._on_error)
            event.listen(self._engine.sync_engine.pool, "checkout", self._on_checkout)
        # Until when (monotonic seconds) pooled connections are pinged as they are
        # checked out: for a while after a connection was lost (see `_on_error`).
        self._suspect_until = 0.0
        self._write_lock = asyncio.Lock() if self.is_sqlite else None
        self._in_loop = None if self._path is None else sqlite.InLoopReads(self._path)
        self._writer = (
            None if self._path is None else sqlite.SqliteWriter(self._path, self._committed)
        )
        # Transactions committed so far, whichever way they were written.
        self.commits = 0
        event.listen(self._engine.sync_engine, "commit", self._committed)
        # PostgreSQL's reads run without a transaction (SQLite's: see `sqlite.InLoopReads`).
        self._reads = self._engine.execution_options(isolation_level="AUTOCOMMIT")

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Fetch]:
        """A `fetch(sql, params)` for reads, outside any transaction: each call is one
        statement and one round trip, sees its own consistent snapshot, and answers its
        rows as tuples; no BEGIN or ROLLBACK costs a round trip.

        On SQLite it runs on the event loop's thread (see `sqlite.InLoopReads`). PostgreSQL
        has no thread: SQLAlchemy runs it, on one pooled connection for the whole block.
        """
        if self._in_loop is not None:
            yield self._in_loop_fetch
            return
        async with _unavailable_when_disconnected(), self._reads.connect() as conn:

            async def fetch_pg(sql: str, params: Sequence[Any]) -> Sequence[Any]:
                return (await conn.exec_driver_sql(_numbered(sql), tuple(params))).all()

            yield fetch_pg

    async def fetch(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        """One read as `read` makes it, tried once more if its pooled connection turned
        out dead.

        Pooled connections are not pinged before use (a round trip that doubled the cost
        of a report on PostgreSQL). After a database restart, the first use of an old
        connection fails and SQLAlchemy discards the whole pool; the second try gets a
        new connection.
        """
        if self._in_loop is not None:
            return await self._in_loop_fetch(sql, params)
        try:
            async with self.read() as fetch:
                return await fetch(sql, params)
        except DatabaseUnavailable:
            pass
        async with self.read() as fetch:
            return await fetch(sql, params)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Statements]:
        """A transaction of `Statements` that commits when the block ends and rolls back
        if it raises.

        On SQLite it takes the write lock up front (BEGIN IMMEDIATE: a transaction that
        reads before it writes could otherwise fail against another process's write), and
        runs on a connection and thread of its own (`sqlite.SqliteWriter`), in as few trips
        to that thread as the statements allow: under load, what a batch of creates waits
        for is those trips, each behind a busy event loop.
        """
        if self._writer is None:
            async with _unavailable_when_disconnected(), self._engine.begin() as conn:
                yield _AlchemyStatements(conn)
            return
        assert self._write_lock is not None
        async with self._write_lock:
            statements = sqlite.WriterStatements(self._writer)
            try:
                yield statements
            except BaseException:
                statements.roll_back()
                raise
            await statements.commit()

    def _on_error(self, context: ExceptionContext) -> None:
        """A connection lost to a restart of PostgreSQL (SQLSTATE 08..., 57P01-57P03, a
        closed connection) counts as a disconnect, so SQLAlchemy discards every pooled
        connection made before it; and for a while each checkout pings its connection
        first, replacing a dead one, so no request after the restart fails on one."""
        if lost_connection(context.original_exception):
            context.is_disconnect = True
            self._suspect_until = time.monotonic() + SUSPECT_S

    def _on_checkout(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if time.monotonic() < self._suspect_until:
            try:
                self._engine.dialect.do_ping(dbapi_connection)
            except Exception as exc:
                raise DisconnectionError(str(exc)) from exc  # the pool tries a new one

    def _committed(self, *_args: Any) -> None:
        self.commits += 1

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
            pooled = await self._engine.raw_connection()
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

    async def migrate(self) -> None:
        """Create or upgrade the schema to the newest migration, in one transaction.

        A SQLite file is read first on a connection of its own: one that is up to date
        (every start but the first) needs no pooled connection (a driver thread), and one
        that cannot be opened is said so before any thread is started (the driver's
        thread, told of a failed open, could otherwise outlive the event loop)."""
        if self._path is not None and sqlite.revision(self._path) == HEAD_REVISION:
            return
        async with self._transaction() as conn:
            if not self.is_sqlite:
                # Instances starting together migrate one at a time.
                await conn.execute(text("SELECT pg_advisory_xact_lock(72657)"))
            if await self._revision(conn) != HEAD_REVISION:
                await conn.run_sync(_upgrade)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        """A transaction on a pooled SQLAlchemy connection, for Alembic: commits on
        success, rolls back on any exception; on SQLite, behind the same lock as `write`
        and with the write lock taken up front (see `sqlite.on_begin`)."""
        if self._write_lock is None:
            async with _unavailable_when_disconnected(), self._engine.begin() as conn:
                yield conn
            return
        async with self._write_lock, self._engine.connect() as conn:
            (await conn.get_raw_connection()).info["immediate"] = True
            async with conn.begin():
                yield conn

    async def _revision(self, conn: AsyncConnection) -> str | None:
        """The schema's migration revision (None: a database Headway has not set up)."""
        if self.is_sqlite:
            exists = sqlite.HAS_REVISION
        else:
            exists = "SELECT 1 WHERE to_regclass('alembic_version') IS NOT NULL"
        if (await conn.execute(text(exists))).first() is None:
            return None
        return (await conn.execute(text(sqlite.REVISION))).scalar()

    @property
    def file(self) -> str | None:
        """The SQLite database's file; None on PostgreSQL."""
        return self._path

    async def size_bytes(self) -> int:
        """The database's size on disk: SQLite's file with its write-ahead log (pages
        freed inside them are reused before they grow), or PostgreSQL's
        `pg_database_size` (a query: `headway.ops.disk` says how seldom it is asked)."""
        if self._path is not None:
            return sqlite.file_bytes(self._path)
        rows = await self.fetch("SELECT pg_database_size(current_database())", ())
        return int(rows[0][0])

    async def ping(self) -> None:
        """Raise if the database does not answer."""
        await self.fetch("SELECT 1", ())

    async def check_writable(self, timeout_s: float = 1.0) -> None:
        """Raise if the database cannot take a write within `timeout_s`.

        On SQLite, another process (a backup, a stuck writer) can hold the write lock
        while reads still work; writes would then wait and fail. A fresh connection
        takes the write lock (BEGIN IMMEDIATE) and gives it straight back. PostgreSQL
        takes writes concurrently: its read check stands for both.
        """
        if self._path is not None:
            await asyncio.to_thread(sqlite.take_write_lock, self._path, timeout_s)

    async def close(self) -> None:
        if self._in_loop is not None:
            self._in_loop.close()
        if self._writer is not None:
            await self._writer.close()
        await self._engine.dispose()


@functools.lru_cache(maxsize=64)
def _numbered(sql: str) -> str:
    """`sql` with PostgreSQL's placeholders: `$1`, `$2`... for each `?`."""
    parts = sql.split("?")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))


class _AlchemyStatements:
    """`Statements` through SQLAlchemy (PostgreSQL: asyncpg has no thread to hop to)."""

    __slots__ = ("_conn",)
    is_sqlite = False

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def rows(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        result = await self._conn.exec_driver_sql(_numbered(sql), tuple(params))
        return result.all() if result.returns_rows else []

    async def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        if params:  # no parameter lists: nothing to run (SQLAlchemy would run it once)
            await self._conn.exec_driver_sql(_numbered(sql), [tuple(p) for p in params])


def _upgrade(connection: Connection) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
