"""Eval records: writable labelled sets, runs, baselines and their history, and a key-value meta table.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plumbline_meta",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "eval_sets",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
    )
    op.create_table(
        "eval_runs",
        sa.Column("run_id", sa.String(100), primary_key=True),
        sa.Column("set_name", sa.String(100), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
    )
    op.create_index("ix_eval_runs_set_created", "eval_runs", ["set_name", "created_at"])
    op.create_table(
        "eval_baselines",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("promoted_at", sa.String(32), nullable=False),
    )
    op.create_table(
        "eval_baseline_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("replaced_at", sa.String(32), nullable=False),
    )
    op.create_index("ix_eval_baseline_history_name", "eval_baseline_history", ["name"])


def downgrade() -> None:
    for table in ("eval_baseline_history", "eval_baselines", "eval_runs", "eval_sets", "plumbline_meta"):
        op.drop_table(table)
