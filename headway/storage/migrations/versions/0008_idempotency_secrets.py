"""Safe retries and server secrets: the answers of creates made with an
`Idempotency-Key` (kept a day), and the secrets every instance shares (the key of share
links' task ids).
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0008", "0007"


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        # The space of a space's create, or "client <address>" for POST /spaces.
        sa.Column("scope", sa.String(80), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        # SHA-256 of the operation and its body: the same key with another request is 422.
        sa.Column("fingerprint", sa.String(64), nullable=False),
        # The space the answer is about (deleted with it).
        sa.Column("space_uuid", sa.String(36), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),  # the first answer's JSON
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
    )
    op.create_index("idempotency_keys_created", "idempotency_keys", ["created_at_us"])
    op.create_index("idempotency_keys_space", "idempotency_keys", ["space_uuid"])
    op.create_table(
        "secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("secrets")
    op.drop_index("idempotency_keys_space", "idempotency_keys")
    op.drop_index("idempotency_keys_created", "idempotency_keys")
    op.drop_table("idempotency_keys")
