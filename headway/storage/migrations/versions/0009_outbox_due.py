"""Bounded delivery: each webhook's count of undelivered events and when its earliest
is due (claims read webhooks by due time, a bounded batch), each delivery's creation (it
is given up by age, by index), each channel's count of queued messages, the events no
webhook was waiting for (swept by index), and each webhook's last deliveries.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0009", "0008"


def upgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(
            sa.Column("created_at_us", sa.BigInteger, nullable=False, server_default="0")
        )
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(sa.Column("undelivered", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("next_due_at_us", sa.BigInteger))
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("webhooks", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("channels") as batch:
        batch.add_column(sa.Column("queued", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE deliveries SET created_at_us = coalesce((SELECT outbox.created_at_us FROM "
        "outbox WHERE outbox.id = deliveries.event_id), next_attempt_at_us)"
    )
    op.execute(
        "UPDATE webhooks SET undelivered = (SELECT count(*) FROM deliveries WHERE "
        "deliveries.webhook_uuid = webhooks.uuid), next_due_at_us = (SELECT "
        "min(next_attempt_at_us) FROM deliveries WHERE deliveries.webhook_uuid = webhooks.uuid)"
    )
    op.execute(
        "UPDATE outbox SET webhooks = (SELECT count(*) FROM deliveries WHERE "
        "deliveries.event_id = outbox.id)"
    )
    op.execute(
        "UPDATE channels SET queued = (SELECT count(*) FROM channel_deliveries WHERE "
        "channel_deliveries.channel_uuid = channels.uuid)"
    )
    op.drop_index("deliveries_due", "deliveries")
    op.create_index("deliveries_webhook_due", "deliveries", ["webhook_uuid", "next_attempt_at_us"])
    op.create_index("deliveries_webhook_age", "deliveries", ["webhook_uuid", "created_at_us"])
    op.create_index("deliveries_age", "deliveries", ["created_at_us"])
    op.create_index("webhooks_due", "webhooks", ["next_due_at_us"])
    op.create_index("outbox_unwatched", "outbox", ["webhooks", "created_at_us"])
    op.create_index(
        "channel_deliveries_age", "channel_deliveries", ["channel_uuid", "created_at_us"]
    )
    op.create_table(
        "webhook_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("webhook_uuid", sa.String(36), nullable=False),
        sa.Column("at_us", sa.BigInteger, nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text),
    )
    op.create_index("webhook_log_webhook", "webhook_log", ["webhook_uuid", "id"])


def downgrade() -> None:
    op.drop_index("webhook_log_webhook", "webhook_log")
    op.drop_table("webhook_log")
    op.drop_index("channel_deliveries_age", "channel_deliveries")
    op.drop_index("outbox_unwatched", "outbox")
    op.drop_index("webhooks_due", "webhooks")
    op.drop_index("deliveries_age", "deliveries")
    op.drop_index("deliveries_webhook_age", "deliveries")
    op.drop_index("deliveries_webhook_due", "deliveries")
    op.create_index("deliveries_due", "deliveries", ["next_attempt_at_us"])
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("queued")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("webhooks")
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("next_due_at_us")
        batch.drop_column("undelivered")
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("created_at_us")
