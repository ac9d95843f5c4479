"""Spaces, tasks and the completion outbox."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0001", None


def upgrade() -> None:
    op.create_table(
        "spaces",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("title", sa.String(200)),
        sa.Column("icon", sa.String(64)),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        sa.Column("last_task_at_us", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_table(
        "tasks",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("space_uuid", sa.String(36), sa.ForeignKey("spaces.uuid"), nullable=False),
        sa.Column("parent_uuid", sa.String(36), sa.ForeignKey("tasks.uuid")),
        sa.Column("title", sa.String(200)),
        sa.Column("source", sa.String(200)),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        sa.Column("finished_at_us", sa.BigInteger),
        sa.Column("duration", sa.BigInteger),
    )
    op.create_index("tasks_space_created", "tasks", ["space_uuid", "created_at_us"], unique=True)
    op.create_index("tasks_parent", "tasks", ["parent_uuid"])
    op.create_table(
        "outbox",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("space_uuid", sa.String(36), nullable=False),
        sa.Column("task_uuid", sa.String(36), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("outbox_space", "outbox", ["space_uuid"])


def downgrade() -> None:
    op.drop_table("outbox")
    op.drop_index("tasks_parent", "tasks")
    op.drop_index("tasks_space_created", "tasks")
    op.drop_table("tasks")
    op.drop_table("spaces")
