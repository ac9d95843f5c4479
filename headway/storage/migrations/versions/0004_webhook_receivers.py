"""Each webhook's receiver (`scheme://host:port` of its URL), by which the worker spreads
its attempts fairly.
"""

from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0004", "0003"


def upgrade() -> None:
    op.add_column("webhooks", sa.Column("receiver", sa.Text, nullable=False, server_default=""))
    webhooks = sa.table(
        "webhooks",
        sa.column("uuid", sa.String),
        sa.column("url", sa.String),
        sa.column("receiver", sa.Text),
    )
    connection = op.get_bind()
    for uuid, url in connection.execute(sa.select(webhooks.c.uuid, webhooks.c.url)).all():
        connection.execute(
            sa.update(webhooks).where(webhooks.c.uuid == uuid).values(receiver=_receiver(url))
        )


def _receiver(url: str) -> str:
    # Frozen here; `storage.outbox.receiver_of` computes the same for new webhooks.
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"


def downgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("receiver")
