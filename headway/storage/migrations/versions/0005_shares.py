"""Share links: read-only links to a space."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0005", "0004"


def upgrade() -> None:
    op.create_table(
        "shares",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("space_uuid", sa.String(36), sa.ForeignKey("spaces.uuid"), nullable=False),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("shares_space", "shares", ["space_uuid", "created_at_us"])


def downgrade() -> None:
    op.drop_index("shares_space", "shares")
    op.drop_table("shares")
