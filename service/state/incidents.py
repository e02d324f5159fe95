"""Incident rows: one per distinct question (set, tenant, normalised question), with every report and event.

A report is one upsert on the unique key (set_name, tenant, question_key): a new question inserts a row, a
known one raises its count in the same statement, so concurrent reports never lose or duplicate an incident.
The report row, the merged labels and the event are written in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, Engine, and_, exists, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from eval.cases import Label
from eval.errors import AlreadyExists, UnknownName
from service.errors import InsufficientStorage
from service.state import schema as t
from service.state.audit import write_pending
from service.state.schema import now_iso
from service.state.tx import upsert, writing


@dataclass(frozen=True)
class Report:
    reporter: str
    question: str
    label: Label
    answer: str | None
    note: str | None
    reported_at: str


@dataclass(frozen=True)
class Event:
    at: str
    actor: str
    action: str
    detail: Mapping[str, Any]


@dataclass(frozen=True)
class Incident:
    """One incident as stored. `reporters` is filled in listings; `reports_detail` and `events` by `get`."""

    id: int
    set_name: str
    tenant: str | None
    question: str
    category: str
    status: str
    labels: tuple[Label, ...]
    filters: Mapping[str, Any]
    fresh_only: bool
    reports: int
    created_at: str
    updated_at: str
    k: int | None = None
    reviewer: str | None = None
    reason: str | None = None
    reviewed_at: str | None = None
    triage: Mapping[str, Any] | None = None
    first_passed_run: str | None = None
    last_run: str | None = None
    last_outcome: str | None = None
    promoted: bool = False  # a tenant's incident that runs over every tenant count too (an unbound reviewer's call)
    reporters: tuple[str, ...] = ()
    reports_detail: tuple[Report, ...] = ()
    events: tuple[Event, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class NewReport:
    """What one POST /eval/incidents carries, validated."""

    set_name: str
    tenant: str | None
    question: str
    question_key: str
    category: str
    label: Label
    filters: Mapping[str, Any]
    fresh_only: bool
    reporter: str
    answer: str | None = None
    note: str | None = None
    k: int | None = None  # how many results the assistant used


def _incident(row: Any) -> Incident:
    return Incident(
        id=row.id,
        set_name=row.set_name,
        tenant=row.tenant or None,
        question=row.question,
        category=row.category,
        status=row.status,
        labels=tuple(Label(**label) for label in json.loads(row.labels)),
        filters=json.loads(row.filters),
        fresh_only=bool(row.fresh_only),
        reports=row.reports,
        k=row.k,
        created_at=row.created_at,
        updated_at=row.updated_at,
        reviewer=row.reviewer,
        reason=row.reason,
        reviewed_at=row.reviewed_at,
        triage=json.loads(row.triage) if row.triage else None,
        first_passed_run=row.first_passed_run,
        last_run=row.last_run,
        last_outcome=row.last_outcome,
        promoted=bool(row.promoted),
    )


class IncidentRecords:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def report(self, r: NewReport, tenant_cap: int = 0) -> tuple[Incident, bool]:
        """Store one report, committed on return: (the incident, True if it merged into an existing one). A tenant's
        report past `tenant_cap` reports stored for it (0: no cap) is refused (`InsufficientStorage`), counted in
        the same transaction."""
        now = now_iso()
        i = t.incidents
        stmt = (
            upsert(self.engine.dialect.name)(i)
            .values(
                set_name=r.set_name,
                tenant=r.tenant or "",
                question_key=r.question_key,
                question=r.question,
                category=r.category,
                status="new",
                labels=json.dumps([r.label.to_json()], ensure_ascii=False),
                filters=json.dumps(dict(r.filters), ensure_ascii=False),
                fresh_only=int(r.fresh_only),
                k=r.k,
                reports=1,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_update(
                index_elements=[i.c.set_name, i.c.tenant, i.c.question_key],
                set_={"reports": i.c.reports + 1, "updated_at": now, "k": func.coalesce(i.c.k, r.k)},
            )
            .returning(i.c.id, i.c.reports, i.c.labels)
        )
        with writing(self.engine) as conn:
            if tenant_cap and r.tenant:
                _check_cap(conn, r.tenant, tenant_cap)
            row = conn.execute(stmt).one()
            merged = row.reports > 1
            label = r.label.to_json()
            labels = json.loads(row.labels)
            if merged and label not in labels and not _covered(r.label, labels):
                conn.execute(
                    update(i).where(i.c.id == row.id).values(labels=json.dumps([*labels, label], ensure_ascii=False))
                )
            conn.execute(
                insert(t.incident_reports).values(
                    incident_id=row.id,
                    reporter=r.reporter,
                    question=r.question,
                    label=json.dumps(label, ensure_ascii=False),
                    answer=r.answer,
                    note=r.note,
                    reported_at=now,
                )
            )
            _event(conn, row.id, r.reporter, "merged" if merged else "reported", {"label": label})
            write_pending(
                conn, target=str(row.id), target_tenant=r.tenant or None, detail={"merged": merged, "set": r.set_name}
            )
        return self.get(row.id), merged

    def get(self, incident_id: int) -> Incident:
        """The incident with its reports and its history, oldest first."""
        with self.engine.connect() as conn:
            row = conn.execute(select(t.incidents).where(t.incidents.c.id == incident_id)).first()
            if row is None:
                raise UnknownName(f"no incident {incident_id}")
            reports = conn.execute(
                select(t.incident_reports)
                .where(t.incident_reports.c.incident_id == incident_id)
                .order_by(t.incident_reports.c.id)
            ).all()
            events = conn.execute(
                select(t.incident_events)
                .where(t.incident_events.c.incident_id == incident_id)
                .order_by(t.incident_events.c.id)
            ).all()
        detail = tuple(
            Report(r.reporter, r.question, Label(**json.loads(r.label)), r.answer, r.note, r.reported_at)
            for r in reports
        )
        history = tuple(Event(e.at, e.actor, e.action, json.loads(e.detail)) for e in events)
        base = _incident(row)
        return replace(base, reporters=_unique(r.reporter for r in detail), reports_detail=detail, events=history)

    def search(
        self,
        *,
        status: str | None = None,
        category: str | None = None,
        reporter: str | None = None,
        since: str | None = None,
        set_name: str | None = None,
        tenant: str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> list[Incident]:
        """Newest first; `before` (an incident id) pages on from the previous page's last id."""
        i = t.incidents
        conditions = []
        for column, value in ((i.c.status, status), (i.c.category, category), (i.c.set_name, set_name)):
            if value is not None:
                conditions.append(column == value)
        if tenant is not None:
            conditions.append(i.c.tenant == tenant)
        if since is not None:
            conditions.append(i.c.updated_at >= since)
        if before is not None:
            conditions.append(i.c.id < before)
        if reporter is not None:
            r = t.incident_reports
            conditions.append(exists().where(and_(r.c.incident_id == i.c.id, r.c.reporter == reporter)))
        query = select(i).where(*conditions).order_by(i.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
            ids = [row.id for row in rows]
            who: dict[int, list[str]] = {}
            if ids:
                r = t.incident_reports
                for incident_id, name in conn.execute(
                    select(r.c.incident_id, r.c.reporter).where(r.c.incident_id.in_(ids)).order_by(r.c.id)
                ):
                    who.setdefault(incident_id, []).append(name)
        return [replace(_incident(row), reporters=_unique(who.get(row.id, ()))) for row in rows]

    def update(
        self,
        incident_id: int,
        actor: str,
        action: str,
        values: Mapping[str, Any],
        *,
        also: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> Incident:
        """Change fields of an incident (edit, accept, reject, reopen, promote) and record the event, and the
        events `also` names (action, detail), in the same transaction. A question edited into one that another
        incident of the set and tenant already has raises `AlreadyExists`."""
        row = {k: (json.dumps(v, ensure_ascii=False) if k in ("labels", "filters") else v) for k, v in values.items()}
        try:
            with writing(self.engine) as conn:
                found = conn.execute(
                    update(t.incidents)
                    .where(t.incidents.c.id == incident_id)
                    .values(**row, updated_at=now_iso())
                    .returning(t.incidents.c.id, t.incidents.c.tenant)
                ).first()
                if found is None:
                    raise UnknownName(f"no incident {incident_id}")
                detail = {k: v for k, v in values.items() if k not in ("question_key", "reviewed_at", "promoted")}
                if detail or not also:  # a promotion alone is its own event
                    _event(conn, incident_id, actor, action, detail)
                for extra, extra_detail in also:
                    _event(conn, incident_id, actor, extra, extra_detail)
                write_pending(conn, target=str(incident_id), target_tenant=found.tenant or None)
        except IntegrityError:
            raise AlreadyExists(
                "another incident of this set and tenant already has that question: merge by reporting it there"
            ) from None
        return self.get(incident_id)

    def set_triage(self, incident_id: int, triage: Mapping[str, Any]) -> None:
        with writing(self.engine) as conn:
            conn.execute(
                update(t.incidents)
                .where(t.incidents.c.id == incident_id)
                .values(triage=json.dumps(dict(triage), ensure_ascii=False))
            )

    def for_set(self, set_name: str, statuses: Sequence[str]) -> list[Incident]:
        """The incidents of a set in the given statuses, oldest first (their cases' order)."""
        query = (
            select(t.incidents)
            .where(t.incidents.c.set_name == set_name, t.incidents.c.status.in_(list(statuses)))
            .order_by(t.incidents.c.id)
        )
        with self.engine.connect() as conn:
            return [_incident(row) for row in conn.execute(query)]

    def set_names(self, statuses: Sequence[str]) -> list[str]:
        query = select(t.incidents.c.set_name).where(t.incidents.c.status.in_(list(statuses))).distinct()
        with self.engine.connect() as conn:
            return sorted(conn.scalars(query))

    def tenant_scoped(self, ids: Sequence[int], tenant: str) -> set[int]:
        """Of `ids`, the incidents of `tenant` that are not promoted: the ones whose outcome its runs decide."""
        i = t.incidents
        query = select(i.c.id).where(i.c.id.in_(list(ids)), i.c.tenant == tenant, i.c.promoted == 0)
        with self.engine.connect() as conn:
            return set(conn.scalars(query))

    def outcome_inputs(self, ids: Sequence[int]) -> dict[int, tuple[bool, int | None]]:
        """For each of `ids`: whether its case passed in some earlier eval run, and its k."""
        i = t.incidents
        query = select(i.c.id, i.c.first_passed_run, i.c.k).where(i.c.id.in_(list(ids)))
        with self.engine.connect() as conn:
            return {row.id: (row.first_passed_run is not None, row.k) for row in conn.execute(query)}

    def record_outcomes(self, run_id: str, outcomes: Mapping[int, str]) -> None:
        """After an eval run: each incident's outcome there (passed, failed, regressed); the first passing run
        is kept, which is what makes a later failure a regression."""
        if not outcomes:
            return
        i = t.incidents
        with writing(self.engine) as conn:
            for incident_id, outcome in sorted(outcomes.items()):
                values: dict[str, Any] = {"last_run": run_id, "last_outcome": outcome}
                if outcome == "passed":
                    values["first_passed_run"] = func.coalesce(i.c.first_passed_run, run_id)
                conn.execute(update(i).where(i.c.id == incident_id).values(**values))

    def counts(self) -> list[tuple[str, str, int]]:
        """(status, category, incidents) for the `plumbline_incidents` gauge."""
        i = t.incidents
        query = select(i.c.status, i.c.category, func.count()).group_by(i.c.status, i.c.category)
        with self.engine.connect() as conn:
            return [(str(s), str(c), int(n)) for s, c, n in conn.execute(query).tuples()]


def _check_cap(conn: Connection, tenant: str, cap: int) -> None:
    i, reports = t.incidents, t.incident_reports
    held = conn.scalar(
        select(func.count()).select_from(reports.join(i, reports.c.incident_id == i.c.id)).where(i.c.tenant == tenant)
    )
    if held is not None and held >= cap:
        raise InsufficientStorage(
            f"tenant {tenant!r} has {held:,} incident reports stored, its cap (PLUMBLINE_TENANT_MAX_INCIDENT_REPORTS): "
            "review and export the incidents it has (plumbline incidents export), or ask the operator to raise the cap"
        )


def _event(conn: Connection, incident_id: int, actor: str, action: str, detail: Mapping[str, Any]) -> None:
    conn.execute(
        insert(t.incident_events).values(
            incident_id=incident_id,
            at=now_iso(),
            actor=actor,
            action=action,
            detail=json.dumps(dict(detail), ensure_ascii=False, default=str),
        )
    )


def _covered(label: Label, labels: list[dict[str, Any]]) -> bool:
    """A label naming only a document adds nothing to an incident that already names a place in that document."""
    return label.kind == "doc" and any(Label(**x).document == label.document for x in labels)


def _unique(names: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
