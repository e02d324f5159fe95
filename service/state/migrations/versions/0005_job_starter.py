"""Who started a background eval run: the id of the API key that asked for it, so that only that key (or an
`eval:admin` key) may cancel it. Jobs started before this revision, with auth off, or from the CLI have none.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("eval_jobs") as batch:
        batch.add_column(sa.Column("started_by", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("eval_jobs") as batch:
        batch.drop_column("started_by")
