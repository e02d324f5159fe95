"""Results of their own kind beside eval runs (synthetic-set jobs, sweeps, answer grades), and the questions a
synthesis drafted, with their review status.

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_results",
        sa.Column("result_id", sa.String(100), primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("set_name", sa.String(100), nullable=False),
        sa.Column("tenant", sa.String(200)),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("finished_at", sa.String(32)),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("summary", sa.Text),
        sa.Column("record", sa.Text),
    )
    op.create_index("ix_eval_results_kind_set", "eval_results", ["kind", "set_name", "created_at"])
    op.create_table(
        "synthetic_drafts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("case_id", sa.String(40), nullable=False),
        sa.Column("set_name", sa.String(100), nullable=False),
        sa.Column("job_id", sa.String(100), nullable=False),
        sa.Column("tenant", sa.String(200)),
        sa.Column("chunk_id", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("reviewer", sa.String(200)),
        sa.Column("reviewed_at", sa.String(32)),
        sa.Column("reason", sa.Text),
    )
    op.create_index("ix_synthetic_drafts_set_status", "synthetic_drafts", ["set_name", "status", "id"])
    op.create_index("ix_synthetic_drafts_job_chunk", "synthetic_drafts", ["job_id", "chunk_id"])


def downgrade() -> None:
    op.drop_index("ix_synthetic_drafts_job_chunk", "synthetic_drafts")
    op.drop_index("ix_synthetic_drafts_set_status", "synthetic_drafts")
    op.drop_table("synthetic_drafts")
    op.drop_index("ix_eval_results_kind_set", "eval_results")
    op.drop_table("eval_results")
