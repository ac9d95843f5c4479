"""Parents held open by their own reporter: `held` is set on a parent that received a
report of its own, kept so past the expiry of that report's progress; such a parent
finishes only by its own `done`, never with its last step (see `service.families`).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("held", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("held")
