"""Webhooks, their pending deliveries, and worker heartbeats."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0002", "0001"


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("space_uuid", sa.String(36), sa.ForeignKey("spaces.uuid"), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("webhooks_space", "webhooks", ["space_uuid"])
    op.create_table(
        "deliveries",
        sa.Column("event_id", sa.String(64), primary_key=True),
        sa.Column("webhook_uuid", sa.String(36), primary_key=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at_us", sa.BigInteger, nullable=False),
        sa.Column("last_error", sa.Text),
    )
    op.create_index("deliveries_due", "deliveries", ["next_attempt_at_us"])
    op.create_table(
        "worker_heartbeats",
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("beat_at_us", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("worker_heartbeats")
    op.drop_index("deliveries_due", "deliveries")
    op.drop_table("deliveries")
    op.drop_index("webhooks_space", "webhooks")
    op.drop_table("webhooks")
