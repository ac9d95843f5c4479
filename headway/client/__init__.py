"""The Python client: typed API calls (`Client`, `AsyncClient`) and reporters that never
hurt the job they report on (`Client.task`, `Client.reporter`)."""

from .client import AsyncClient, BaseClient, Client
from .errors import APIError, HeadwayError, NetworkError, NoSpaceError
from .models import Estimate, Progress, Space, Task
from .reporter import Reporter
from .task import TaskScope, current_task

__all__ = [
    "APIError",
    "AsyncClient",
    "BaseClient",
    "Client",
    "Estimate",
    "HeadwayError",
    "NetworkError",
    "NoSpaceError",
    "Progress",
    "Reporter",
    "Space",
    "Task",
    "TaskScope",
    "current_task",
]
