"""Access control: API keys (hashed), the audit log, and the tenant an eval run was confined to.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("previous_hash", sa.String(64)),
        sa.Column("previous_expires_at", sa.String(32)),
        sa.Column("roles", sa.Text, nullable=False),
        sa.Column("tenant", sa.String(200)),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("rotated_at", sa.String(32)),
        sa.Column("revoked_at", sa.String(32)),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("tenant", sa.String(200)),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("request_id", sa.String(100)),
    )
    op.create_index("ix_audit_log_action", "audit_log", ["action", "id"])
    with op.batch_alter_table("eval_runs") as batch:
        batch.add_column(sa.Column("tenant", sa.String(200)))
    with op.batch_alter_table("eval_jobs") as batch:
        batch.add_column(sa.Column("tenant", sa.String(200)))


def downgrade() -> None:
    with op.batch_alter_table("eval_jobs") as batch:
        batch.drop_column("tenant")
    with op.batch_alter_table("eval_runs") as batch:
        batch.drop_column("tenant")
    op.drop_index("ix_audit_log_action", "audit_log")
    op.drop_table("audit_log")
    op.drop_table("api_keys")
