"""Headway: progress reporting for processes without a screen, over plain HTTP.

`from headway import Client` gives the client (see `headway.client`). The names below are
imported on first use, so that the server, which imports this package too, never loads
the client, and the client never loads the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "APIError",
    "AsyncClient",
    "Client",
    "Estimate",
    "HeadwayError",
    "NetworkError",
    "NoSpaceError",
    "Progress",
    "Reporter",
    "Space",
    "Task",
    "__version__",
    "current_task",
]

if TYPE_CHECKING:
    from .client import (
        APIError,
        AsyncClient,
        Client,
        Estimate,
        HeadwayError,
        NetworkError,
        NoSpaceError,
        Progress,
        Reporter,
        Space,
        Task,
        current_task,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'headway' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
