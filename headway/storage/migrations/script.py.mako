"""${message}"""

from alembic import op
import sqlalchemy as sa
${imports if imports else ""}

revision, down_revision = ${repr(up_revision)}, ${repr(down_revision)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
