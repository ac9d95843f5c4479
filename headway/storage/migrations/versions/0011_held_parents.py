"""Parents held open by their own reporter: `held` is set on a parent that received a
report of its own, kept so past the expiry of that report's progress; such a parent
finishes only by its own `done`, never with its last step (see `service.families`).
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0011", "0010"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("held", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("held")
