"""Incidents: one row per distinct question (set, tenant, normalised question), its reports and its history.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("set_name", sa.String(100), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("question_key", sa.Text, nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("category", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("labels", sa.Text, nullable=False),
        sa.Column("filters", sa.Text, nullable=False),
        sa.Column("fresh_only", sa.Integer, nullable=False),
        sa.Column("k", sa.Integer),
        sa.Column("reports", sa.Integer, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
        sa.Column("reviewer", sa.String(200)),
        sa.Column("reason", sa.Text),
        sa.Column("reviewed_at", sa.String(32)),
        sa.Column("triage", sa.Text),
        sa.Column("first_passed_run", sa.String(100)),
        sa.Column("last_run", sa.String(100)),
        sa.Column("last_outcome", sa.String(20)),
        sa.UniqueConstraint("set_name", "tenant", "question_key", name="uq_incident_question"),
    )
    op.create_index("ix_incidents_status_created", "incidents", ["status", "created_at"])
    for table, columns in (
        (
            "incident_reports",
            [
                sa.Column("reporter", sa.String(200), nullable=False),
                sa.Column("question", sa.Text, nullable=False),
                sa.Column("label", sa.Text, nullable=False),
                sa.Column("answer", sa.Text),
                sa.Column("note", sa.Text),
                sa.Column("reported_at", sa.String(32), nullable=False),
            ],
        ),
        (
            "incident_events",
            [
                sa.Column("at", sa.String(32), nullable=False),
                sa.Column("actor", sa.String(200), nullable=False),
                sa.Column("action", sa.String(40), nullable=False),
                sa.Column("detail", sa.Text, nullable=False),
            ],
        ),
    ):
        op.create_table(
            table,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("incident_id", sa.Integer, sa.ForeignKey("incidents.id", ondelete="CASCADE"), nullable=False),
            *columns,
        )
        op.create_index(f"ix_{table}_incident_id", table, ["incident_id"])


def downgrade() -> None:
    for table in ("incident_events", "incident_reports", "incidents"):
        op.drop_table(table)
