"""Bounded storage: each space's last activity (retention), counts for the caps (a
parent's children, a space's top-level tasks), and the task of each channel message (so
that deleting a task drops them).
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0007", "0006"


def upgrade() -> None:
    with op.batch_alter_table("spaces") as batch:
        batch.add_column(
            sa.Column("active_at_us", sa.BigInteger, nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("top_tasks", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("children", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("channel_deliveries") as batch:
        batch.add_column(sa.Column("task_uuid", sa.String(36)))
    op.execute(
        "UPDATE spaces SET active_at_us = CASE WHEN last_task_at_us > created_at_us "
        "THEN last_task_at_us ELSE created_at_us END"
    )
    op.execute(
        "UPDATE spaces SET top_tasks = (SELECT count(*) FROM tasks WHERE tasks.space_uuid = "
        "spaces.uuid AND tasks.parent_uuid IS NULL)"
    )
    op.execute(
        "UPDATE tasks SET children = (SELECT count(*) FROM tasks AS c WHERE c.parent_uuid = "
        "tasks.uuid) WHERE uuid IN (SELECT parent_uuid FROM tasks WHERE parent_uuid IS NOT NULL)"
    )
    op.create_index("spaces_active", "spaces", ["active_at_us"])
    op.create_index("channel_deliveries_task", "channel_deliveries", ["task_uuid"])
    op.create_index("outbox_task", "outbox", ["task_uuid"])


def downgrade() -> None:
    op.drop_index("outbox_task", "outbox")
    op.drop_index("channel_deliveries_task", "channel_deliveries")
    op.drop_index("spaces_active", "spaces")
    with op.batch_alter_table("channel_deliveries") as batch:
        batch.drop_column("task_uuid")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("children")
    with op.batch_alter_table("spaces") as batch:
        batch.drop_column("top_tasks")
        batch.drop_column("active_at_us")
