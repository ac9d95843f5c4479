"""What the client raises.

HeadwayError         anything the client raises
├── APIError         the server answered with an error: `.status`, `.message` (its
│                    `{"error": ...}`), `.retry_after` (seconds from Retry-After, 0-60)
├── NetworkError     the server could not be reached, or did not answer in time
└── NoSpaceError     an operation needs a space and none was given nor in HEADWAY_SPACE
"""

from __future__ import annotations

# Answers worth trying again later: the request changed nothing (408, 425, 429, 503) or
# the server or a proxy in front of it failed on its way (every 5xx).
RETRYABLE_STATUSES = frozenset({408, 425, 429})


class HeadwayError(Exception):
    """Base of every error the client raises."""


class APIError(HeadwayError):
    """The server refused or failed a request."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """True when the same request may succeed later (rate, budget, server trouble)."""
        return self.status in RETRYABLE_STATUSES or 500 <= self.status <= 599


class NetworkError(HeadwayError):
    """No answer: the connection was refused, dropped or timed out."""


class NoSpaceError(HeadwayError):
    """No space was given and HEADWAY_SPACE is not set."""

    def __init__(self) -> None:
        super().__init__("no space given: pass one or set HEADWAY_SPACE")
