"""Live messages: a channel may keep one message per task up to date (`live`), and each
message it keeps is a row (`live_messages`): the service's reference to it, what it
last showed, and when it may be edited next, so that a restart or another instance
edits the same message.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0015", "0014"


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(sa.Column("live", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_table(
        "live_messages",
        sa.Column("channel_uuid", sa.String(36), primary_key=True),
        sa.Column("task_uuid", sa.String(36), primary_key=True),
        sa.Column("ref", sa.Text, nullable=True),  # None until the service accepted it
        sa.Column("state", sa.String(16), nullable=False),  # the state last shown
        sa.Column("digest", sa.String(32), nullable=False),  # of the text last shown
        sa.Column("sent_at_us", sa.BigInteger, nullable=False),
        sa.Column("next_at_us", sa.BigInteger, nullable=False),  # not before (a retry)
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("given_up", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("live_messages_task", "live_messages", ["task_uuid"])
    # The live channels, read at each look (every second): an index of those alone.
    live = sa.text("live")
    op.create_index(
        "channels_live", "channels", ["space_uuid"], sqlite_where=live, postgresql_where=live
    )


def downgrade() -> None:
    op.drop_index("channels_live", "channels")
    op.drop_index("live_messages_task", "live_messages")
    op.drop_table("live_messages")
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("live")
