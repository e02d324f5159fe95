"""Monitoring: each run's kind, asynchronous eval jobs with their progress, and leases (one replica at a time).

Runs stored before this revision become `manual` runs: none was marked as monitoring, and a record does not
say whether its parameters were the served ones, so none of them feeds the gauges.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("eval_runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(20), nullable=False, server_default="manual"))
    op.create_index("ix_eval_runs_kind_set", "eval_runs", ["kind", "set_name", "run_id"])
    op.create_table(
        "eval_jobs",
        sa.Column("run_id", sa.String(100), primary_key=True),
        sa.Column("set_name", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("done", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("cancel", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("started_at", sa.String(32), nullable=False),
        sa.Column("heartbeat_at", sa.String(32), nullable=False),
        sa.Column("finished_at", sa.String(32)),
    )
    op.create_index("ix_eval_jobs_status", "eval_jobs", ["status", "started_at"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("expires_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_index("ix_eval_jobs_status", "eval_jobs")
    op.drop_table("eval_jobs")
    op.drop_index("ix_eval_runs_kind_set", "eval_runs")
    with op.batch_alter_table("eval_runs") as batch:
        batch.drop_column("kind")
