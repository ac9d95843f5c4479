"""Notification channels: a space's Apprise URLs, what each still has to send, its last
deliveries, and the stall episodes it was told of.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0006", "0005"


def upgrade() -> None:
    op.create_table(
        "channels",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("space_uuid", sa.String(36), sa.ForeignKey("spaces.uuid"), nullable=False),
        sa.Column("url", sa.Text, nullable=False),  # holds the user's tokens: never shown
        sa.Column("redacted", sa.Text, nullable=False),
        sa.Column("on_completed", sa.Boolean, nullable=False),
        sa.Column("on_failed", sa.Boolean, nullable=False),
        sa.Column("on_stalled", sa.Boolean, nullable=False),
        sa.Column("steps", sa.Boolean, nullable=False),
        sa.Column("stalled_after_s", sa.Integer, nullable=False),
        sa.Column("share_uuid", sa.String(36)),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        # Nothing is sent before this (µs): the digest window after a message, or the
        # hour's cap reached (see `storage.channels`).
        sa.Column("hold_until_us", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("window_start_us", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("window_sent", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("channels_space", "channels", ["space_uuid", "created_at_us"])
    op.create_table(
        "channel_deliveries",
        # The event's id and the channel's uuid, or a stall message's own id.
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("channel_uuid", sa.String(36), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),  # completed, failed, stalled, recovered
        sa.Column("payload", sa.Text, nullable=False),  # what the message tells (JSON)
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at_us", sa.BigInteger, nullable=False),
        sa.Column("last_error", sa.Text),
    )
    op.create_index(
        "channel_deliveries_due", "channel_deliveries", ["next_attempt_at_us", "channel_uuid"]
    )
    op.create_index(
        "channel_deliveries_channel", "channel_deliveries", ["channel_uuid", "next_attempt_at_us"]
    )
    op.create_table(
        "channel_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("channel_uuid", sa.String(36), nullable=False),
        sa.Column("at_us", sa.BigInteger, nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text),
    )
    op.create_index("channel_log_channel", "channel_log", ["channel_uuid", "id"])
    op.create_table(
        "stalls",
        sa.Column("channel_uuid", sa.String(36), primary_key=True),
        sa.Column("task_uuid", sa.String(36), primary_key=True),
        sa.Column("reason", sa.String(8), nullable=False),  # silent or flat
        sa.Column("current", sa.Text),  # `current` as the episode began (JSON)
        sa.Column("since_us", sa.BigInteger, nullable=False),
    )
    op.create_index("stalls_task", "stalls", ["task_uuid"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("until_us", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_index("stalls_task", "stalls")
    op.drop_table("stalls")
    op.drop_index("channel_log_channel", "channel_log")
    op.drop_table("channel_log")
    op.drop_index("channel_deliveries_channel", "channel_deliveries")
    op.drop_index("channel_deliveries_due", "channel_deliveries")
    op.drop_table("channel_deliveries")
    op.drop_index("channels_space", "channels")
    op.drop_table("channels")
