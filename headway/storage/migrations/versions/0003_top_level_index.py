"""Index top-level tasks by space and creation, so that a page of a large space costs the
same as a page of a small one.
"""

from alembic import op

revision, down_revision = "0003", "0002"


def upgrade() -> None:
    op.create_index(
        "tasks_space_parent_created", "tasks", ["space_uuid", "parent_uuid", "created_at_us"]
    )


def downgrade() -> None:
    op.drop_index("tasks_space_parent_created", "tasks")
