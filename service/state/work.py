"""Eval work beside runs, in the state store: results of their own kind (a synthesis, a sweep, an answer-grading
run) and the questions a synthesis drafted, each with its review status.

A result's row is written when its job starts (with what was asked, so that a synthesis can be resumed from it) and
completed when it ends; while it runs, its progress is its job's (`service.state.jobs`, same id). A synthesis writes
each passage's drafts in one transaction as soon as they are made, so a job that dies keeps what it made, and a
resumed one skips the passages that already have drafts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update

from eval.cases import Case, case_from_json, dump_jsonl, parse_jsonl
from service.state import schema as t
from service.state.audit import write_pending
from service.state.schema import now_iso
from service.state.tx import upsert, writing

RESULT_KINDS = ("synthesis", "sweep", "answers")
DRAFT_STATUSES = ("proposed", "accepted", "rejected", "discarded")


@dataclass(frozen=True)
class StoredResult:
    result_id: str
    kind: str
    set_name: str
    tenant: str | None
    created_at: str
    finished_at: str | None
    params: dict[str, Any]
    summary: dict[str, Any] | None
    record: dict[str, Any] | None


@dataclass(frozen=True)
class Draft:
    """A drafted question as stored: `record` holds the case (`eval.cases.Case.to_json`, None for a draft quality
    control discarded before it became one), the reasons it was discarded, its copy overlap and the LLM's check."""

    id: int
    case_id: str
    set_name: str
    job_id: str
    tenant: str | None
    chunk_id: str
    status: str
    question: str
    record: dict[str, Any]
    created_at: str
    reviewer: str | None = None
    reviewed_at: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class NewDraft:
    case_id: str
    status: str  # proposed or discarded
    question: str
    record: dict[str, Any]


class ResultRecords:
    """The `eval_results` table."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start(self, result_id: str, kind: str, set_name: str, tenant: str | None, params: dict[str, Any]) -> None:
        with writing(self.engine) as conn:
            conn.execute(
                insert(t.results).values(
                    result_id=result_id,
                    kind=kind,
                    set_name=set_name,
                    tenant=tenant,
                    created_at=now_iso(),
                    params=json.dumps(params, sort_keys=True),
                )
            )

    def finish(self, result_id: str, summary: dict[str, Any], record: dict[str, Any]) -> None:
        with writing(self.engine) as conn:
            conn.execute(
                update(t.results)
                .where(t.results.c.result_id == result_id)
                .values(finished_at=now_iso(), summary=json.dumps(summary), record=json.dumps(record))
            )
            write_pending(conn, target=result_id)

    def get(self, result_id: str) -> StoredResult | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(t.results).where(t.results.c.result_id == result_id)).first()
        return _result(row) if row is not None else None

    def listing(
        self, kind: str, *, set_name: str | None, tenant: str | None, limit: int, offset: int = 0, full: bool = False
    ) -> list[StoredResult]:
        """Newest first; a tenant-bound caller's listing (`tenant` given) holds its tenant's results only. Without
        `full` the records are left out (None)."""
        columns = [c for c in t.results.c if full or c.name != "record"]
        query = select(*columns).where(t.results.c.kind == kind)
        if set_name is not None:
            query = query.where(t.results.c.set_name == set_name)
        if tenant is not None:
            query = query.where(t.results.c.tenant == tenant)
        query = query.order_by(t.results.c.created_at.desc(), t.results.c.result_id.desc()).limit(limit).offset(offset)
        with self.engine.connect() as conn:
            return [_result(row) for row in conn.execute(query)]


class DraftRecords:
    """The `synthetic_drafts` table."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, set_name: str, job_id: str, tenant: str | None, chunk_id: str, drafts: Sequence[NewDraft]) -> None:
        """One passage's drafts, in one transaction (a passage has all of its drafts or none)."""
        now = now_iso()
        rows = [
            {
                "case_id": d.case_id,
                "set_name": set_name,
                "job_id": job_id,
                "tenant": tenant,
                "chunk_id": chunk_id,
                "status": d.status,
                "question": d.question,
                "record": json.dumps(d.record, ensure_ascii=False),
                "created_at": now,
            }
            for d in drafts
        ]
        if rows:
            with writing(self.engine) as conn:
                conn.execute(insert(t.drafts), rows)

    def chunks_done(self, job_id: str) -> set[str]:
        """The chunks a synthesis has drafted from (a resumed one skips them)."""
        with self.engine.connect() as conn:
            return set(conn.scalars(select(t.drafts.c.chunk_id).where(t.drafts.c.job_id == job_id).distinct()))

    def of_job(self, job_id: str) -> list[Draft]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.drafts).where(t.drafts.c.job_id == job_id).order_by(t.drafts.c.id))
            return [_draft(row) for row in rows]

    def listing(
        self, set_name: str, *, status: str | None, tenant: str | None, limit: int, offset: int = 0
    ) -> list[Draft]:
        query = select(t.drafts).where(t.drafts.c.set_name == set_name)
        if status is not None:
            query = query.where(t.drafts.c.status == status)
        if tenant is not None:
            query = query.where(t.drafts.c.tenant == tenant)
        with self.engine.connect() as conn:
            return [_draft(row) for row in conn.execute(query.order_by(t.drafts.c.id).limit(limit).offset(offset))]

    def counts(self, set_name: str, tenant: str | None) -> dict[str, int]:
        """Drafts of a set by status."""
        query = select(t.drafts.c.status, func.count()).where(t.drafts.c.set_name == set_name)
        if tenant is not None:
            query = query.where(t.drafts.c.tenant == tenant)
        with self.engine.connect() as conn:
            return {row[0]: int(row[1]) for row in conn.execute(query.group_by(t.drafts.c.status))}

    def discard(self, ids: Sequence[int], reason: str) -> None:
        """Quality control's late verdict (near-duplicates): proposed drafts become discarded, `reason` added."""
        if not ids:
            return
        with writing(self.engine) as conn:
            rows = conn.execute(select(t.drafts).where(t.drafts.c.id.in_(list(ids)), t.drafts.c.status == "proposed"))
            for d in [_draft(row) for row in rows]:
                record = {**d.record, "reasons": [*d.record.get("reasons", []), reason]}
                conn.execute(
                    update(t.drafts)
                    .where(t.drafts.c.id == d.id)
                    .values(status="discarded", record=json.dumps(record, ensure_ascii=False))
                )

    def get(self, draft_id: int) -> Draft | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(t.drafts).where(t.drafts.c.id == draft_id)).first()
        return _draft(row) if row is not None else None

    def review(self, ids: Sequence[int], status: str, reviewer: str, reason: str | None) -> list[Draft]:
        """Accept or reject proposed drafts in one transaction; accepting adds their cases to the stored set (made if
        it is not there yet) in the same transaction, so a case is in the set exactly when its draft reads accepted.
        The drafts as they were; a draft that is not proposed is left as it is and not returned."""
        now = now_iso()
        with writing(self.engine) as conn:
            rows = conn.execute(
                select(t.drafts).where(t.drafts.c.id.in_(list(ids)), t.drafts.c.status == "proposed")
            ).all()
            found = [_draft(row) for row in rows]
            if not found:
                return []
            conn.execute(
                update(t.drafts)
                .where(t.drafts.c.id.in_([d.id for d in found]), t.drafts.c.status == "proposed")
                .values(status=status, reviewer=reviewer, reviewed_at=now, reason=reason)
            )
            if status == "accepted":
                _merge(conn, found[0].set_name, [_case_of(d) for d in found])
            write_pending(conn, target=found[0].set_name, detail={"status": status, "drafts": len(found)})
        return found


def _case_of(draft: Draft) -> Case:
    return case_from_json(draft.record["case"])


def _merge(conn: Connection, set_name: str, cases: Sequence[Case]) -> None:
    """Append `cases` to the stored set `set_name` (created if absent), skipping ids it already holds."""
    body = conn.scalar(select(t.sets.c.body).where(t.sets.c.name == set_name))
    held = parse_jsonl(body, set_name) if body else []
    ids = {c.id for c in held}
    merged = dump_jsonl([*held, *(c for c in cases if c.id not in ids)])
    stmt = upsert(conn.dialect.name)(t.sets).values(name=set_name, body=merged, updated_at=now_iso())
    conn.execute(
        stmt.on_conflict_do_update(index_elements=[t.sets.c.name], set_={"body": merged, "updated_at": now_iso()})
    )


def _result(row: Any) -> StoredResult:
    m = row._mapping
    return StoredResult(
        m["result_id"],
        m["kind"],
        m["set_name"],
        m["tenant"],
        m["created_at"],
        m["finished_at"],
        json.loads(m["params"]),
        json.loads(m["summary"]) if m["summary"] else None,
        json.loads(m["record"]) if m.get("record") else None,
    )


def _draft(row: Any) -> Draft:
    return Draft(
        row.id,
        row.case_id,
        row.set_name,
        row.job_id,
        row.tenant,
        row.chunk_id,
        row.status,
        row.question,
        json.loads(row.record),
        row.created_at,
        row.reviewer,
        row.reviewed_at,
        row.reason,
    )
