"""The schema, as Alembic's migrations know it (the service itself speaks SQL text: see
`storage.queries`). Instants are stored as whole microseconds since the epoch (UTC), which
round-trips exactly through cursors and compares the same on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
    text,
)

metadata = MetaData()

spaces = Table(
    "spaces",
    metadata,
    Column("uuid", String(36), primary_key=True),
    Column("title", String(200)),
    Column("icon", String(64)),
    Column("created_at_us", BigInteger, nullable=False),
    # The created_at of the space's newest task: each new task takes a later instant.
    Column("last_task_at_us", BigInteger, nullable=False, server_default="0"),
    # When the space was deleted: gone for every reader, its rows removed a batch at a
    # time afterwards (see `storage.deletes`). None: a space in use.
    Column("deleted_at_us", BigInteger),
    Index(
        "spaces_deleted",
        "deleted_at_us",
        sqlite_where=text("deleted_at_us IS NOT NULL"),
        postgresql_where=text("deleted_at_us IS NOT NULL"),
    ),
)

tasks = Table(
    "tasks",
    metadata,
    Column("uuid", String(36), primary_key=True),
    Column("space_uuid", String(36), ForeignKey("spaces.uuid"), nullable=False),
    Column("parent_uuid", String(36), ForeignKey("tasks.uuid")),
    Column("title", String(200)),
    Column("source", String(200)),
    Column("created_at_us", BigInteger, nullable=False),
    Column("finished_at_us", BigInteger),
    Column("duration", BigInteger),
    # A parent that reported itself: it finishes only by its own `done` (0011).
    Column("held", Boolean, nullable=False, server_default=false()),
    # Its job (see `headway.domain.jobs`; NULL: untitled), whether it failed (NULL: active) (0013).
    Column("job", String(32)),
    Column("failed", Boolean),
    # The error a failed task reported itself at its finish (NULL: none), kept so that it
    # reads failed whatever its progress does afterwards (0016).
    Column("error", Text),
    Index("tasks_space_created", "space_uuid", "created_at_us", unique=True),
    Index("tasks_parent", "parent_uuid"),
    Index("tasks_space_parent_created", "space_uuid", "parent_uuid", "created_at_us"),
    Index("tasks_job_runs", "job", "failed", "finished_at_us", "created_at_us"),
)

# Each job's counts and last activity (a create or a finish), kept up by every write that
# changes them, so that a read of a space's jobs does not grow with its history (0013).
jobs = Table(
    "jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("space_uuid", String(36), nullable=False),
    Column("title", String(200), nullable=False),
    Column("source", String(200)),
    Column("parent_title", String(200)),
    Column("runs", Integer, nullable=False, server_default="0"),
    Column("failed", Integer, nullable=False, server_default="0"),
    Column("last_at_us", BigInteger, nullable=False),
    Index("jobs_space_last", "space_uuid", "last_at_us", "id"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("space_uuid", String(36), nullable=False),
    Column("task_uuid", String(36), nullable=False),
    Column("type", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    # How many webhooks the event was queued for: those queued for none are swept by index.
    Column("webhooks", Integer, nullable=False, server_default="0"),
    Index("outbox_space", "space_uuid"),
    Index("outbox_task", "task_uuid"),
    Index("outbox_unwatched", "webhooks", "created_at_us"),
)

webhooks = Table(
    "webhooks",
    metadata,
    Column("uuid", String(36), primary_key=True),
    Column("space_uuid", String(36), ForeignKey("spaces.uuid"), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("secret", String(128), nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    # `scheme://host:port` of the URL: the worker limits attempts in flight per receiver.
    Column("receiver", Text, nullable=False, server_default=""),
    # Its deliveries not yet made or given up (the cap counts them), and a time no later
    # than when the earliest of them is due (None: none; claims read webhooks by it).
    Column("undelivered", Integer, nullable=False, server_default="0"),
    Column("next_due_at_us", BigInteger),
    Index("webhooks_space", "space_uuid"),
    Index("webhooks_due", "next_due_at_us"),
)

# Each webhook's last deliveries, as `GET /spaces/{s}/webhooks` shows them.
webhook_log = Table(
    "webhook_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("webhook_uuid", String(36), nullable=False),
    Column("at_us", BigInteger, nullable=False),
    Column("event", String(64), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text),
    Index("webhook_log_webhook", "webhook_uuid", "id"),
)

# Read-only links to a space; revoking one deletes its row.
shares = Table(
    "shares",
    metadata,
    Column("uuid", String(36), primary_key=True),
    Column("space_uuid", String(36), ForeignKey("spaces.uuid"), nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Index("shares_space", "space_uuid", "created_at_us"),
)

# One row per (event, webhook) still to be delivered; deleted once delivered or given up.
deliveries = Table(
    "deliveries",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("webhook_uuid", String(36), primary_key=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # When the next attempt is due; while an attempt runs, when its claim lapses.
    Column("next_attempt_at_us", BigInteger, nullable=False),
    Column("last_error", Text),
    # The event's creation: an event undelivered too long after it is given up.
    Column("created_at_us", BigInteger, nullable=False, server_default="0"),
    Index("deliveries_webhook_due", "webhook_uuid", "next_attempt_at_us"),
    Index("deliveries_webhook_age", "webhook_uuid", "created_at_us"),
    Index("deliveries_age", "created_at_us"),
)

worker_heartbeats = Table(
    "worker_heartbeats",
    metadata,
    Column("worker_id", String(64), primary_key=True),
    Column("beat_at_us", BigInteger, nullable=False),
)

# The first answer of each create made with an `Idempotency-Key`, kept a day (see
# `storage.idempotency`).
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(80), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("space_uuid", String(36), nullable=False),
    Column("status", Integer, nullable=False),
    Column("answer", Text, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Index("idempotency_keys_created", "created_at_us"),
    Index("idempotency_keys_space", "space_uuid"),
)

# Secrets made at the first start and shared by every instance (see `storage.shares`).
secrets = Table(
    "secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(128), nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
)
