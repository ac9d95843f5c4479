"""The error family, and the one place that renders `{"error": ...}`.

Every failure a client can provoke is a `HeadwayError` carrying its HTTP status and a
sentence the client can act on. Routes raise them; `api.rest` renders them.

    HeadwayError
    ├── BadRequest          400  malformed report, bad query parameter
    ├── NotFound            404  no such space, task, webhook or path
    ├── MethodNotAllowed    405  PATCH on a task, wrong method on a path
    ├── Conflict            409  a create with the same Idempotency-Key still under way
    ├── PayloadTooLarge     413  body over the limit
    ├── Unprocessable       422  bad create body, icon, parent, webhook URL
    ├── TooManyRequests     429  one client address over its rate (with Retry-After)
    └── Unavailable         503  a dependency is down, or a budget is full (Retry-After)

`DatabaseUnavailable` is no client's doing: the connection to the database broke in use.
The app answers it, like the database driver's and Redis' connection errors, with 503.
"""

from __future__ import annotations


class HeadwayError(Exception):
    """A failure with an HTTP status and a message meant for the client."""

    status = 500

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class BadRequest(HeadwayError):
    status = 400


class NotFound(HeadwayError):
    status = 404


class Forbidden(HeadwayError):
    status = 403


class MethodNotAllowed(HeadwayError):
    status = 405


class Conflict(HeadwayError):
    status = 409


class PayloadTooLarge(HeadwayError):
    status = 413


class Misdirected(HeadwayError):
    """421: the request names a host this server does not answer for."""

    status = 421


class Unprocessable(HeadwayError):
    status = 422


class TooManyRequests(HeadwayError):
    status = 429


class Unavailable(HeadwayError):
    status = 503


UNAVAILABLE_MESSAGE = "A backing service is unavailable; retry shortly."


def error_body(message: str) -> dict[str, str]:
    """The JSON body of every error response."""
    return {"error": message}


class DatabaseUnavailable(Exception):
    """The connection to the database broke in use (e.g. the server restarted)."""
