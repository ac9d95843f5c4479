"""Late runs: channels may ask to hear of a run that is late (`on_late`), and each run
told late to a channel is noted once (`late_runs`), so that every instance tells it once.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0014", "0013"


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(
            sa.Column("on_late", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.create_table(
        "late_runs",
        sa.Column("channel_uuid", sa.String(36), primary_key=True),
        sa.Column("task_uuid", sa.String(36), primary_key=True),
        sa.Column("at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("late_runs_task", "late_runs", ["task_uuid"])


def downgrade() -> None:
    op.drop_index("late_runs_task", "late_runs")
    op.drop_table("late_runs")
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("on_late")
