"""Channel URLs masked anew: forms stored before every userinfo, path segment and query
value was masked (a username-only token, a short path token, Apprise's own defaults
added) are made again from each channel's URL (see `notify.urls.redact`). A channel whose
stored form hid its host keeps it hidden.
"""

import sqlalchemy as sa
from alembic import op

from headway.notify.urls import redact

revision, down_revision = "0012", "0011"


def _host(url: str) -> str:
    netloc = url.partition("://")[2].partition("?")[0].partition("/")[0]
    return netloc.rpartition("@")[2]


def upgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.text("SELECT uuid, url, redacted FROM channels")).all()
    for uuid, url, redacted in rows:
        masked = redact(url, host=_host(url) != _host(redacted))
        if masked != redacted:
            connection.execute(
                sa.text("UPDATE channels SET redacted = :masked WHERE uuid = :uuid"),
                {"masked": masked, "uuid": uuid},
            )


def downgrade() -> None:
    """The earlier forms cannot be made again; the new ones stay."""
