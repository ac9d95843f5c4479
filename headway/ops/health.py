"""The answer of `GET /up` (see `api.health`), as the OpenAPI document describes it:
each dependency's check, the background loops and the disk."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType


class DatabaseCheck(msgspec.Struct):
    status: Literal["up", "down"]
    backend: Literal["sqlite", "postgresql"]
    latency_ms: Annotated[float, Meta(description="Present when up.")] | UnsetType = UNSET
    error: Annotated[str, Meta(description="Present when down: what failed.")] | UnsetType = UNSET


class ProgressStoreCheck(msgspec.Struct):
    status: Literal["up", "down"]
    backend: Literal["memory", "redis"]
    latency_ms: Annotated[float, Meta(description="Present when up.")] | UnsetType = UNSET
    error: Annotated[str, Meta(description="Present when down: what failed.")] | UnsetType = UNSET


class WorkerCheck(msgspec.Struct):
    status: Annotated[
        Literal["ok", "stale", "absent", "unknown"],
        Meta(
            description="stale: no heartbeat lately; absent: never one; unknown: the "
            "database is down. A worker that is not ok does not fail the check."
        ),
    ]
    heartbeat_age_s: (
        Annotated[float, Meta(description="Seconds since the newest heartbeat.")] | None
    )


class LoopsCheck(msgspec.Struct):
    status: Annotated[
        Literal["up", "down"],
        Meta(
            description="down: a long-lived task of the process ended (each survives any "
            "failure, so none should). Like the worker, it does not fail the check."
        ),
    ]
    running: Annotated[int, Meta(description="Long-lived tasks running.")]
    stopped: Annotated[
        list[str],
        Meta(description="Those that ended: worker, feed_publish, feed_subscribe, ..."),
    ]


class DiskCheck(msgspec.Struct):
    status: Annotated[
        Literal["ok", "low", "full"],
        Meta(
            description="low: a limit is near (free space under twice "
            "HEADWAY_DISK_FREE_MIN, or the database past 90% of HEADWAY_DATABASE_MAX_SIZE); "
            "full: a limit is passed, and new spaces, tasks, webhooks, share links and "
            "channels are refused with 503 (reports go on), or the disk has no byte left. "
            "Either makes the body's status degraded, with 200."
        ),
    ]
    free_bytes: (
        Annotated[
            int,
            Meta(
                description="Free space on the SQLite database's filesystem (null on "
                "PostgreSQL, whose disk this process cannot see)."
            ),
        ]
        | None
    )
    database_bytes: (
        Annotated[
            int,
            Meta(
                description="The database's size on disk: SQLite's file and write-ahead "
                "log, or PostgreSQL's pg_database_size (null if not measured)."
            ),
        ]
        | None
    )
    limit: (
        Annotated[
            Literal["HEADWAY_DATABASE_MAX_SIZE", "HEADWAY_DISK_FREE_MIN"],
            Meta(
                description="The limit that is near or passed (null when ok, or when the "
                "disk is full with no minimum set)."
            ),
        ]
        | None
    )
    limit_bytes: (
        Annotated[
            int,
            Meta(description="That limit in bytes: the maximum size, or the free minimum."),
        ]
        | None
    )


class HealthChecks(msgspec.Struct):
    database: DatabaseCheck
    progress_store: ProgressStoreCheck
    worker: WorkerCheck
    loops: LoopsCheck
    disk: DiskCheck


class HealthOut(msgspec.Struct):
    """`GET /up`: ok when the database and the progress store answer; degraded when they
    do but the database's disk is low or full (see `DiskCheck`); unavailable (503) when
    one of them does not answer."""

    status: Literal["ok", "degraded", "unavailable"]
    checks: HealthChecks
