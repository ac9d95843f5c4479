"""A failure is kept with its finish: `error` holds the error a failed task reported
itself (`values.error` at its finish), beside `failed`, so that it reads failed after its
progress expired or was lost with a restart, and after later reports to it. NULL: active,
succeeded, or failed only through its steps.

Tasks that finished before this revision keep `failed` (their jobs count them) but not
their error's words: they read as their progress says, as before.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0016", "0015"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("error", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("error")
