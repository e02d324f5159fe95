"""The state store's tables (SQLAlchemy Core). Migrations in `migrations/versions` create them; this module is
the one place queries take table and column names from. Times are ISO 8601 UTC strings with microseconds
(`2026-12-01T10:00:00.000000Z`), which sort and compare as text on both SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Column, ForeignKey, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

metadata = MetaData()

meta = Table(
    "plumbline_meta",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=False),
)

sets = Table(
    "eval_sets",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("body", Text, nullable=False),  # JSON Lines, as validated
    Column("updated_at", String(32), nullable=False),
)

runs = Table(
    "eval_runs",
    metadata,
    Column("run_id", String(100), primary_key=True),
    Column("set_name", String(100), nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("summary", Text, nullable=False),  # JSON: unit, cases, mean metrics (listing without the record)
    Column("record", Text, nullable=False),  # JSON: the whole run (eval.storage.run_to_json)
    Column("kind", String(20), nullable=False),  # monitoring, manual, experiment (eval.runner.KINDS)
    Column("tenant", String(200)),  # the tenant a tenant-bound key confined the run to; None: every tenant
    Index("ix_eval_runs_set_created", "set_name", "created_at"),
    Index("ix_eval_runs_kind_set", "kind", "set_name", "run_id"),
)

jobs = Table(
    "eval_jobs",
    metadata,
    Column("run_id", String(100), primary_key=True),  # the id its run will be stored under
    Column("set_name", String(100), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("status", String(20), nullable=False),  # queued, running, done, failed, cancelled
    Column("done", Integer, nullable=False),  # cases replayed so far
    Column("total", Integer, nullable=False),
    Column("cancel", Integer, nullable=False),  # 1 once a cancel was asked: the runner stops at its next batch
    Column("error", Text),
    Column("owner", String(100), nullable=False),  # the process running it
    Column("started_at", String(32), nullable=False),
    Column("heartbeat_at", String(32), nullable=False),  # a running job whose heartbeat stops was lost
    Column("finished_at", String(32)),
    Column("tenant", String(200)),  # as eval_runs.tenant
    Column("started_by", String(32)),  # the id of the API key that started it; None: auth off, the CLI, older jobs
    Index("ix_eval_jobs_status", "status", "started_at"),
)

leases = Table(
    "leases",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("owner", String(100), nullable=False),
    Column("expires_at", String(32), nullable=False),
)

baselines = Table(
    "eval_baselines",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("run_id", String(100), nullable=False),
    Column("record", Text, nullable=False),
    Column("promoted_at", String(32), nullable=False),
)

baseline_history = Table(
    "eval_baseline_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False, index=True),
    Column("run_id", String(100), nullable=False),
    Column("record", Text, nullable=False),
    Column("replaced_at", String(32), nullable=False),
)

incidents = Table(
    "incidents",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("set_name", String(100), nullable=False),
    Column("tenant", String(200), nullable=False),  # "" for none: NULLs would not collide in the unique key
    Column("question_key", Text, nullable=False),
    Column("question", Text, nullable=False),
    Column("category", String(200), nullable=False),
    Column("status", String(20), nullable=False),  # new, accepted, rejected
    Column("labels", Text, nullable=False),  # JSON list of eval.cases.Label.to_json()
    Column("filters", Text, nullable=False),  # JSON: the /search filters the user had
    Column("fresh_only", Integer, nullable=False),
    Column("k", Integer),  # how many results the assistant gave its model; None: the run's largest k
    Column("reports", Integer, nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
    Column("reviewer", String(200)),
    Column("reason", Text),
    Column("reviewed_at", String(32)),
    Column("triage", Text),  # JSON: the latest triage
    Column("first_passed_run", String(100)),  # the first eval run in which its case passed
    Column("last_run", String(100)),
    Column("last_outcome", String(20)),  # passed, failed, regressed
    # 1: an unbound reviewer promoted a tenant's incident, so runs over every tenant count its case too
    Column("promoted", Integer, nullable=False, server_default="0"),
    UniqueConstraint("set_name", "tenant", "question_key", name="uq_incident_question"),
    Index("ix_incidents_status_created", "status", "created_at"),
)

incident_reports = Table(
    "incident_reports",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("incident_id", Integer, ForeignKey("incidents.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("reporter", String(200), nullable=False),
    Column("question", Text, nullable=False),  # as this reporter wrote it
    Column("label", Text, nullable=False),  # JSON: the source this reporter named
    Column("answer", Text),
    Column("note", Text),
    Column("reported_at", String(32), nullable=False),
)

incident_events = Table(
    "incident_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("incident_id", Integer, ForeignKey("incidents.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("at", String(32), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("action", String(40), nullable=False),  # reported, merged, edited, accepted, rejected, reopened
    Column("detail", Text, nullable=False),  # JSON
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(32), primary_key=True),  # the public part of a key (`pl_<key_id>_<secret>`)
    Column("name", String(200), nullable=False),
    Column("secret_hash", String(64), nullable=False),  # SHA-256 of the secret, hex; the secret is never stored
    Column("previous_hash", String(64)),  # the secret before the last rotation, valid until previous_expires_at
    Column("previous_expires_at", String(32)),
    Column("roles", Text, nullable=False),  # JSON list (service.access.keys.ROLES)
    Column("tenant", String(200)),  # the tenant the key is confined to; None: unbound
    Column("created_at", String(32), nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("rotated_at", String(32)),
    Column("revoked_at", String(32)),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", String(32), nullable=False),
    Column("actor", String(200), nullable=False),  # the key's name and id, or "anonymous (auth off)"
    Column("tenant", String(200)),  # the actor's tenant binding
    Column("action", String(40), nullable=False),  # e.g. documents.ingest, baseline.promote, key.revoke
    Column("target", Text, nullable=False),
    Column("detail", Text, nullable=False),  # JSON
    Column("request_id", String(100)),
    # the tenant of what changed (a document, an incident, a run, a key's binding); None: what every tenant shares
    Column("target_tenant", String(200)),
    Index("ix_audit_log_action", "action", "id"),
)


results = Table(
    "eval_results",
    metadata,
    Column("result_id", String(100), primary_key=True),  # its job's id in eval_jobs while it runs
    Column("kind", String(20), nullable=False),  # synthesis, sweep, answers (service.state.work.RESULT_KINDS)
    Column("set_name", String(100), nullable=False),
    Column("tenant", String(200)),  # the tenant a tenant-bound key confined it to; None: every tenant
    Column("created_at", String(32), nullable=False),
    Column("finished_at", String(32)),
    Column("params", Text, nullable=False),  # JSON: what was asked (a resumed synthesis reads it back)
    Column("summary", Text),  # JSON: what a listing shows; None until it ends
    Column("record", Text),  # JSON: the whole result (a sweep's rows, an answer run's items); None until it ends
    Index("ix_eval_results_kind_set", "kind", "set_name", "created_at"),
)

drafts = Table(
    "synthetic_drafts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("case_id", String(40), nullable=False),  # eval.synthetic.case_id_for: stable per chunk and question
    Column("set_name", String(100), nullable=False),
    Column("job_id", String(100), nullable=False),  # the synthesis (eval_results.result_id) that made it
    Column("tenant", String(200)),  # the chunk's tenant
    Column("chunk_id", Text, nullable=False),
    # proposed (passed quality control, awaiting review), accepted (in the set), rejected (by a reviewer),
    # discarded (by quality control: `record` says why)
    Column("status", String(20), nullable=False),
    Column("question", Text, nullable=False),
    Column(
        "record", Text, nullable=False
    ),  # JSON: {"case": Case.to_json() | None, "reasons": [...], "overlap": x, ...}
    Column("created_at", String(32), nullable=False),
    Column("reviewer", String(200)),
    Column("reviewed_at", String(32)),
    Column("reason", Text),
    Index("ix_synthetic_drafts_set_status", "set_name", "status", "id"),
    Index("ix_synthetic_drafts_job_chunk", "job_id", "chunk_id"),
)


def iso(moment: dt.datetime) -> str:
    """The stored form of a time: UTC, microseconds, `Z` (comparable as text)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_iso() -> str:
    return iso(dt.datetime.now(dt.UTC))
