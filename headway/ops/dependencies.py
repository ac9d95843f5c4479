"""Which failures mean that a dependency (the database or the progress store) is
unavailable, rather than a fault of the request or of the code: the one classification
every route, `/mcp`, the live streams and the background loops answer by.

Unavailable, answered 503 with `Retry-After` (and retried by the loops):
- PostgreSQL: SQLSTATE class 08 (connection exceptions), 57P01-57P03 (the server is
  shutting down, crashed, or not yet accepting connections), 53100 (its disk is full),
  53300 (too many connections); a connection that closed or was invalidated; a pool
  that timed out;
- SQLite: busy or locked past the wait, I/O errors, a full disk (`SQLITE_FULL`: "database
  or disk is full"), a file that cannot be opened or written;
- Redis: connection errors and time-outs, a server still loading, and a full
  `maxmemory` under `noeviction` (a full budget, not a bug): `redis_link.UNAVAILABLE`;
- the network and the disk: `ConnectionError`, `TimeoutError`, and other `OSError`s
  (`ENOSPC` among them).

A full disk is a dependency's failure like the others: the write it interrupted rolled
back whole, and the next one succeeds once there is room (see also `headway.ops.disk`, which
refuses creates before the disk fills).

Everything else is a fault: answered 500 and logged once with its traceback.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator

import sqlalchemy.exc

from ..domain.errors import DatabaseUnavailable

_ALWAYS: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    OSError,  # ConnectionError and TimeoutError among them
    sqlalchemy.exc.TimeoutError,  # no pooled connection within the pool's wait
)
_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53100", "53300"})
_SQLITE_CODES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_NOLFS,
    }
)


def unavailable(exc: BaseException) -> bool:
    """Whether `exc`, or an error it wraps, says a dependency is unavailable."""
    return any(_says_unavailable(error) for error in _wrapped(exc))


def lost_connection(exc: BaseException) -> bool:
    """Whether `exc`, or an error it wraps, says a database connection is gone: the
    server closed it, is shutting down or restarting (SQLSTATE class 08, 57P01-57P03)."""
    for error in _wrapped(exc):
        sqlstate = getattr(error, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")
        ):
            return True
        if isinstance(error, ConnectionError) or "connection is closed" in str(error):
            return True
    return False


def _wrapped(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then each error it wraps: SQLAlchemy's `orig`, else the cause."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        wrapped = getattr(current, "orig", None)
        current = wrapped if isinstance(wrapped, BaseException) else current.__cause__


def _says_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, _ALWAYS):
        return True
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sqlalchemy.exc.OperationalError) and not isinstance(exc.orig, sqlite3.Error):
        return True  # PostgreSQL's (SQLite's say more: see below)
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_CODES
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and (sqlstate.startswith("08") or sqlstate in _SQLSTATES):
        return True
    asyncpg = sys.modules.get("asyncpg.exceptions")
    if asyncpg is not None and isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc)  # "connection is closed": the server went away
    if "redis" not in sys.modules:  # imported only where Redis is used
        return False
    from .redis_link import UNAVAILABLE

    return isinstance(exc, UNAVAILABLE)
