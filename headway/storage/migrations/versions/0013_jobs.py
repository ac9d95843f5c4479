"""Jobs: the runs Headway keeps, by title. Each task with a title names its job (`job`: a
digest of its space, title, source and parent's title, see `headway.domain.jobs`), and a finished
one whether it failed (`failed`: NULL while it runs). `jobs` holds each job's counts and
when it was last active, so that reading a space's jobs never scans its history; the
index on tasks finds a job's newest runs, succeeded or failed, and its active tasks, and
holds what a run's answer needs (no lookup of the task's row).

Tasks created before this revision are in no job: their failures were never stored.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0013", "0012"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("job", sa.String(32)))
        batch.add_column(sa.Column("failed", sa.Boolean))
    op.create_index("tasks_job_runs", "tasks", ["job", "failed", "finished_at_us", "created_at_us"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("space_uuid", sa.String(36), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("source", sa.String(200)),
        sa.Column("parent_title", sa.String(200)),
        sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("jobs_space_last", "jobs", ["space_uuid", "last_at_us", "id"])


def downgrade() -> None:
    op.drop_index("jobs_space_last", "jobs")
    op.drop_table("jobs")
    op.drop_index("tasks_job_runs", "tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("failed")
        batch.drop_column("job")
