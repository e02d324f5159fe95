"""Whether an unbound reviewer promoted a tenant's incident: a tenant's incidents decide that tenant's gate only (its
runs count their cases), unless promoted, when runs over every tenant count them too. Incidents stored before this
revision are not promoted.

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("promoted", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("promoted")
