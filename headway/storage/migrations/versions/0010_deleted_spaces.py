"""Spaces deleted at once, removed a batch at a time: a space's `deleted_at_us` marks it
gone for every reader in the delete's one short transaction, and the sweeper removes its
rows afterwards (see `storage.deletes`). Spaces an older sweeper had begun deleting for
their idleness (`active_at_us` -1) are marked so too, and finished the same way.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0010", "0009"


def upgrade() -> None:
    with op.batch_alter_table("spaces") as batch:
        batch.add_column(sa.Column("deleted_at_us", sa.BigInteger))
    op.execute("UPDATE spaces SET deleted_at_us = 1 WHERE active_at_us < 0")
    # Only the few spaces still being removed are in it.
    op.create_index(
        "spaces_deleted",
        "spaces",
        ["deleted_at_us"],
        sqlite_where=sa.text("deleted_at_us IS NOT NULL"),
        postgresql_where=sa.text("deleted_at_us IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("spaces_deleted", "spaces")
    with op.batch_alter_table("spaces") as batch:
        batch.drop_column("deleted_at_us")
