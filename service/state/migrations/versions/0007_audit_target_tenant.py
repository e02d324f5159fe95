"""The tenant of what an audited change changed (a document's, an incident's, a run's, a key's binding), beside the
caller's. Entries written before this revision have none.

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("target_tenant", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_column("target_tenant")
