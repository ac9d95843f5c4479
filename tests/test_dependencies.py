"""One classification of "a dependency is unavailable": what it says yes to (answered
503 with Retry-After everywhere), and what it does not (a fault: 500, logged)."""

from __future__ import annotations

import errno
import sqlite3

import asyncpg.exceptions
import pytest
import redis.exceptions
import sqlalchemy.exc

from headway.domain.errors import DatabaseUnavailable
from headway.ops.dependencies import lost_connection, unavailable


def wrapped(orig: BaseException) -> sqlalchemy.exc.DBAPIError:
    """`orig` as SQLAlchemy hands it over: a DBAPIError whose `orig` is the driver's
    adapted error, caused by the driver's own."""
    adapted = Exception(str(orig))
    adapted.__cause__ = orig
    return sqlalchemy.exc.DBAPIError("SELECT 1", {}, adapted)


def sqlite_error(make_it_fail) -> sqlite3.Error:
    try:
        make_it_fail()
    except sqlite3.Error as exc:
        return exc
    raise AssertionError("it did not fail")


def test_postgres_restarting_or_shutting_down_is_unavailable_however_wrapped():
    for error in (
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator"),
        asyncpg.exceptions.CrashShutdownError("crash shutdown"),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients already"),
        asyncpg.exceptions.InterfaceError("connection is closed"),
    ):
        assert unavailable(error), error
        assert unavailable(wrapped(error)), error


def test_the_driver_misused_is_a_fault_and_a_closed_connection_is_not_as_sqlalchemy_wraps_them():
    """asyncpg's InterfaceError, as SQLAlchemy hands it over (an InterfaceError whose
    `orig` is the adapted error, caused by asyncpg's): unavailable only when it says the
    connection is closed; a statement given the wrong parameters is a fault of the code."""

    def as_sqlalchemy_wraps(orig: BaseException) -> sqlalchemy.exc.InterfaceError:
        adapted = Exception(f"{type(orig)}: {orig}")
        adapted.__cause__ = orig
        return sqlalchemy.exc.InterfaceError("SELECT $1", {}, adapted)

    closed = asyncpg.exceptions.InterfaceError(
        "cannot call Connection.fetch(): connection is closed"
    )
    assert unavailable(as_sqlalchemy_wraps(closed))
    for fault in (
        asyncpg.exceptions.InterfaceError(
            "the server expects 2 arguments for this query, 1 was passed"
        ),
        asyncpg.exceptions.InterfaceError(
            "cannot perform operation: another operation is in progress"
        ),
    ):
        assert not unavailable(as_sqlalchemy_wraps(fault)), fault


def test_a_lost_postgres_connection_counts_as_a_disconnect_but_a_busy_server_not():
    assert lost_connection(wrapped(asyncpg.exceptions.AdminShutdownError("terminating")))
    assert lost_connection(wrapped(asyncpg.exceptions.CannotConnectNowError("starting up")))
    assert lost_connection(wrapped(asyncpg.exceptions.InterfaceError("connection is closed")))
    assert not lost_connection(wrapped(asyncpg.exceptions.TooManyConnectionsError("full")))
    assert not lost_connection(wrapped(asyncpg.exceptions.UniqueViolationError("dup")))


def test_sqlite_busy_and_unopenable_files_are_unavailable(tmp_path):
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    busy = sqlite_error(lambda: other.execute("BEGIN IMMEDIATE"))
    assert unavailable(busy)
    assert unavailable(wrapped(busy))
    gone = sqlite_error(lambda: sqlite3.connect(f"file:{tmp_path}/no/such.db?mode=rw", uri=True))
    assert unavailable(gone)
    holder.close()
    other.close()


def test_redis_and_the_network_down_are_unavailable():
    for error in (
        redis.exceptions.ConnectionError("Error 111 connecting"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        DatabaseUnavailable("server closed the connection unexpectedly"),
    ):
        assert unavailable(error), error


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a bug"),
        KeyError("a bug"),
        asyncpg.exceptions.UniqueViolationError("duplicate key"),
        asyncpg.exceptions.InterfaceError("another operation is in progress"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key"),
    ],
    ids=repr,
)
def test_faults_of_the_code_or_the_request_are_not_unavailability(error):
    assert not unavailable(error)
    assert not unavailable(wrapped(error))


def test_sqlite_errors_of_the_code_are_not_unavailability(tmp_path):
    connection = sqlite3.connect(tmp_path / "db.sqlite")
    for error in (
        sqlite_error(lambda: connection.execute("SELECT * FROM nowhere")),
        sqlite_error(lambda: connection.execute("NOT SQL")),
    ):
        assert not unavailable(error)
        assert not unavailable(sqlalchemy.exc.OperationalError("SELECT", {}, error))


def test_a_full_disk_is_unavailable_on_every_backend(tmp_path):
    # PostgreSQL's disk_full (SQLSTATE 53100), as asyncpg raises it and SQLAlchemy wraps it.
    disk_full = asyncpg.exceptions.DiskFullError("could not extend file: No space left")
    assert disk_full.sqlstate == "53100"
    assert unavailable(disk_full)
    assert unavailable(wrapped(disk_full))
    assert not lost_connection(wrapped(disk_full)), "the connection itself is fine"
    # SQLite's SQLITE_FULL, for real: a database capped at a few pages fills up.
    connection = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    connection.execute("CREATE TABLE t (x BLOB)")
    connection.execute("PRAGMA max_page_count = 4")
    full = sqlite_error(lambda: connection.execute("INSERT INTO t VALUES (zeroblob(65536))"))
    assert full.sqlite_errorcode == sqlite3.SQLITE_FULL
    assert "full" in str(full)
    assert unavailable(full)
    assert unavailable(sqlalchemy.exc.OperationalError("INSERT", {}, full))
    connection.close()
    # The operating system's ENOSPC.
    assert unavailable(OSError(errno.ENOSPC, "No space left on device"))
