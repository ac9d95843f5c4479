"""Index top-level tasks by space and creation, so that a page of a large space costs the
same as a page of a small one.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "tasks_space_parent_created", "tasks", ["space_uuid", "parent_uuid", "created_at_us"]
    )


def downgrade() -> None:
    op.drop_index("tasks_space_parent_created", "tasks")
