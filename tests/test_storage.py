"""Storage behaviour that no route shows directly."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid

import pytest
import sqlalchemy.exc

from headway.storage import queries
from headway.storage.database import Database, DatabaseUnavailable
from headway.storage.sqlite import InLoopReads

from .conftest import pairs


async def test_database_errors_never_show_statement_parameters(app):
    """Parameters hold space uuids, which are credentials: an error message (and so a log
    line) must not carry them."""
    db = app.state.service.db
    space = queries.NewSpace(str(uuid.uuid4()), None, None)
    async with db.write() as st:
        await queries.insert_spaces(st, [space], 0)
    with pytest.raises((sqlalchemy.exc.IntegrityError, sqlite3.IntegrityError)) as failure:
        async with db.write() as st:
            await queries.insert_spaces(st, [space], 0)
    assert space.uuid not in str(failure.value)


def test_in_loop_reads_never_wait_for_a_lock(tmp_path):
    """Reads of a SQLite file run on the event loop's thread, so they must never wait
    there: where SQLite answers busy (a lock that stops readers, as another process's
    exclusive transaction on a database not in WAL mode holds), `fetch` answers None at
    once and `Database.read` reads on a pooled connection's thread instead."""
    path = str(tmp_path / "locked.db")
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("CREATE TABLE t (x INTEGER)")
    setup.execute("INSERT INTO t VALUES (1)")
    setup.close()
    reads = InLoopReads(path)
    # It waits for no lock: SQLite's busy handler, which would, is off on its connection.
    assert reads.fetch("PRAGMA busy_timeout", ()) == [(0,)]
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        assert reads.fetch("SELECT x FROM t", ()) is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert reads.fetch("SELECT x FROM t", ()) == [(1,)]
    reads.close()


def test_in_loop_reads_of_a_file_that_is_gone_are_unavailable(tmp_path):
    """A database file that is missing is an error, never a new empty database."""
    reads = InLoopReads(str(tmp_path / "missing.db"))
    with pytest.raises(DatabaseUnavailable):
        reads.fetch("SELECT 1", ())
    assert not (tmp_path / "missing.db").exists()


async def _migrating(db: Database, title: str) -> None:
    # A migration's transaction, on a pooled connection, within BEGIN IMMEDIATE (here
    # reading the revision: `migrate` itself reads an up-to-date one without it).
    async with db._transaction() as conn:
        await db._revision(conn)


async def _read_then_write(db: Database, title: str) -> None:
    # A read first: BEGIN goes with it, and the transaction is open once it returns.
    async with db.write() as st:
        await st.rows("SELECT count(*) FROM spaces", ())
        await queries.insert_spaces(st, [queries.NewSpace(str(uuid.uuid4()), title, None)], 0)


async def _only_write(db: Database, title: str) -> None:
    # Nothing but an insert: BEGIN, the insert and COMMIT go in one trip.
    async with db.write() as st:
        await queries.insert_spaces(st, [queries.NewSpace(str(uuid.uuid4()), title, None)], 0)


@pytest.mark.parametrize("backend", pairs(database="sqlite"), indirect=True)
@pytest.mark.parametrize("write", [_migrating, _read_then_write, _only_write])
async def test_a_write_cancelled_while_it_waits_for_the_lock_leaves_no_transaction(
    app, settings, write
):
    """A write cancelled while its BEGIN IMMEDIATE waits on SQLite's lock (a request
    whose client left, a worker at shutdown) must not keep the lock once it gets it:
    the next write goes through at once, not after the 30 s busy timeout. So for each
    way of writing: a pooled connection (a migration), and the writer's (`db.write`)."""
    db = app.state.service.db
    path = settings.database_url.split(":///", 1)[1]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        blocked = asyncio.create_task(write(db, "cancelled"))
        await asyncio.sleep(0.3)  # its BEGIN IMMEDIATE now waits in the driver's thread
        blocked.cancel()
        await asyncio.sleep(0.1)
    finally:
        holder.execute("ROLLBACK")  # the lock is free: the cancelled BEGIN takes it
        holder.close()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    # Each would wait out the 30 s busy timeout behind a lock left held; this bound is only
    # the hang guard, far above what a free lock takes however busy the machine.
    async with asyncio.timeout(20):
        for after in (_migrating, _only_write, _read_then_write):
            await after(db, "after")
    # Nobody holds SQLite's write lock now: another connection takes it at once.
    await db.check_writable(timeout_s=1.0)
