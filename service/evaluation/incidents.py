"""Incidents: validate a report, store it (deduplicated, committed), triage it; review; the cases they become.

POST /eval/incidents ─► validate (the document exists for the tenant, the evidence occurs in it, the
filters are ones /search accepts) ─► one upsert on (set, tenant, normalised question), committed
─► triage through the live pipeline (`service.evaluation.triage`) ─► stored with the incident ─► 201
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.incidents import incident_case, question_key
from eval.matching import normalize
from eval.storage import PACKAGE_DIR, SetStore, check_name
from service.errors import InvalidRequest, NotFound, PlumblineError, StoreUnavailable
from service.evaluation.triage import Triage, triage
from service.filters import FilterSpec, parse_filters
from service.index.index import Index, StoredDocument
from service.infra.faults import crash_point
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.state import StateStore
from service.state.incidents import Incident, IncidentRecords, NewReport
from service.state.schema import now_iso

log = logging.getLogger("plumbline")


@dataclass(frozen=True)
class IncidentReport:
    """One report as the API or CLI received it (field names as in the request body)."""

    question: str
    reporter: str
    doc_id: str | None = None
    chunk_id: str | None = None
    evidence: str | None = None
    category: str = "uncategorized"
    answer: str | None = None
    note: str | None = None
    tenant: str | None = None
    filters: Mapping[str, Any] | None = None
    fresh_only: bool = True
    set: str | None = None
    k: int | None = None  # how many results the assistant used; triage's "top k"


@dataclass(frozen=True)
class Reported:
    incident: Incident
    merged: bool
    triage: Triage | None
    triage_error: str | None = None


class IncidentService:
    """Incidents over the state store; `default_set` takes reports that name no set, and `count_new` makes
    incidents not yet reviewed count in eval runs (accepted ones always do, rejected ones never). A tenant may have
    `tenant_max_reports` reports stored (0: no cap; past it 507).

    Example:
        >>> service = IncidentService(state.incidents, default_set="handbook")  # doctest: +SKIP
        >>> report = IncidentReport("refund window?", "ann", doc_id="billing/refunds")
        >>> service.report(report, index, pipeline, SearchParams(), k=10).triage.verdict  # doctest: +SKIP
        'ranked_low'
    """

    def __init__(
        self,
        records: IncidentRecords,
        *,
        default_set: str = "incidents",
        count_new: bool = False,
        tenant_max_reports: int = 0,
    ) -> None:
        self.records = records
        self.default_set = default_set
        self.count_new = count_new
        self.tenant_max_reports = tenant_max_reports  # per tenant, duplicates included; 0: no cap

    def report(
        self,
        r: IncidentReport,
        index: Index,
        pipeline: SearchPipeline,
        base: SearchParams,
        k: int,
        *,
        precise: bool = True,
    ) -> Reported:
        """Validate, store (committed before this returns), then triage with `base` as the search parameters, in the
        top `k` unless the report says how many results the assistant used. `precise`: a refused source says why
        (no such document, no such chunk, the words are not in it or only in a heading); without it, one answer for
        all (`not_reportable`), for a caller that may not read the tenant's documents."""
        new, stored = self._validated(r, index, precise)
        incident, merged = self.records.report(new, self.tenant_max_reports)
        crash_point("incident:committed")
        try:
            params = replace(base, filters=self._spec(new), fresh_only=new.fresh_only)
            label = _most_specific(incident.labels, new.label)
            result = triage(pipeline, new.question, label, stored, params, incident.k or k)
        except PlumblineError as exc:  # the report is stored: say why triage failed rather than fail the call
            log.warning("triage of incident %d failed: %s", incident.id, exc)
            return Reported(incident, merged, None, str(exc))
        self.records.set_triage(incident.id, result.to_json())
        return Reported(replace(incident, triage=result.to_json()), merged, result)

    def _check_filters(self, raw: Mapping[str, Any]) -> None:
        try:
            parse_filters(raw)
        except InvalidRequest as exc:
            raise InvalidRequest(f"filters: {exc}") from None

    def _spec(self, new: NewReport) -> FilterSpec:
        spec = parse_filters(new.filters)
        return replace(spec, tenant=new.tenant) if new.tenant else spec

    def _validated(self, r: IncidentReport, index: Index, precise: bool) -> tuple[NewReport, StoredDocument]:
        question, key = _question(r.question)
        set_name = check_name(r.set or self.default_set, "set")
        filters = dict(r.filters or {})
        if "tenant" in filters:
            if r.tenant is not None and filters["tenant"] != r.tenant:
                raise InvalidRequest("filters.tenant differs from tenant: give the user's tenant once, in tenant")
            tenant = filters.pop("tenant")
        else:
            tenant = r.tenant
        self._check_filters(filters)
        label, stored = _source(r, tenant, index, precise)
        new = NewReport(
            set_name=set_name,
            tenant=tenant,
            question=question,
            question_key=key,
            category=r.category.strip() or "uncategorized",
            label=label,
            filters=filters,
            fresh_only=r.fresh_only,
            reporter=r.reporter.strip(),
            answer=r.answer,
            note=r.note,
            k=r.k,
        )
        return new, stored

    def review(
        self,
        incident_id: int,
        reviewer: str,
        changes: Mapping[str, Any],
        index: Index | None,
        *,
        precise: bool = True,
    ) -> Incident:
        """Edit fields (question, category, labels, filters) and/or move the status (accepted, rejected,
        new) with a reason, and/or set a tenant's incident's `scope` (`all`: promoted, runs over every tenant count
        it too; `tenant`: its tenant's runs only), with a reason; the reviewer and every change go to the
        incident's history. Who may set the scope is the caller's business (`application.incidents`). `precise` as
        in `report`, for the labels' sources."""
        current = self.records.get(incident_id)
        values: dict[str, Any] = {}
        if "question" in changes:
            question, key = _question(str(changes["question"]))
            values.update(question=question, question_key=key)
        if "category" in changes:
            values["category"] = str(changes["category"]).strip() or "uncategorized"
        if "filters" in changes:
            self._check_filters(changes["filters"])
            values["filters"] = dict(changes["filters"])
        if "labels" in changes:
            labels: Sequence[Label] = changes["labels"]
            if not labels:
                raise InvalidRequest("labels: an incident needs at least one source")
            if index is not None:
                for label in labels:
                    _source_label(label, current.tenant, index, "labels", precise)
            values["labels"] = [label.to_json() for label in labels]
        also = self._scope(current, changes)
        if also:
            values["promoted"] = int(changes["scope"] == "all")
        action = "edited"
        status = changes.get("status")
        if status is not None and status != current.status:
            if status in ("accepted", "rejected") and not (changes.get("reason") or "").strip():
                raise InvalidRequest(f"reason: say why the incident is {status}")
            action = {"accepted": "accepted", "rejected": "rejected"}.get(status, "reopened")
            values.update(status=status, reviewer=reviewer, reviewed_at=now_iso(), reason=changes.get("reason"))
        elif changes.get("reason") and not also:  # a promotion's reason is the promotion event's
            values["reason"] = changes["reason"]
        if not values:
            raise InvalidRequest("nothing to change: send status (with reason), scope (with reason) or fields to edit")
        return self.records.update(incident_id, reviewer, action, values, also=also)

    @staticmethod
    def _scope(current: Incident, changes: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The promotion event a review's `scope` asks for: none if it names none or the incident's current one."""
        scope = changes.get("scope")
        if scope is None:
            return []
        if current.tenant is None:
            raise InvalidRequest("scope: the incident has no tenant: its case counts in every run already")
        if (scope == "all") == current.promoted:
            return []
        if not (changes.get("reason") or "").strip():
            raise InvalidRequest(f"reason: say why the incident's scope becomes {scope!r}")
        action = "promoted" if scope == "all" else "demoted"
        return [(action, {"scope": scope, "reason": changes["reason"]})]

    def counted_statuses(self) -> tuple[str, ...]:
        return ("accepted", "new") if self.count_new else ("accepted",)

    def cases(self, set_name: str, *, tenant: str | None = None) -> list[Case]:
        """The cases the set's incidents stand for (accepted ones; new ones too with `count_new`) in a run confined
        to `tenant`, or over every tenant (None): there, a tenant's incident counts only once promoted (an unbound
        reviewer's `scope: all`), so that one tenant's incidents decide its own gate, not everyone's. A tenant's run
        is given every incident here; `retriever.tenant_cases` keeps its tenant's."""
        return [
            incident_case(i.id, i.question, i.labels, i.category, i.filters, i.tenant, i.created_at)
            for i in self.records.for_set(set_name, self.counted_statuses())
            if tenant is not None or i.tenant is None or i.promoted
        ]


def _question(text: str) -> tuple[str, str]:
    """The question with its whitespace collapsed, and its key; a 422 if it has nothing to key on."""
    question = " ".join(text.split())
    key = question_key(question)
    if not key:
        raise InvalidRequest("question: it has no letters or digits; give the question the user asked")
    return question, key


def _most_specific(labels: Sequence[Label], reported: Label) -> Label:
    """What triage looks for: of the incident's labels on the reported document, the first that names evidence or a
    chunk (a later report naming only the document does not blur an earlier, precise one); else the report's."""
    return next((x for x in labels if x.document == reported.document and x.kind != "doc"), reported)


def _source(r: IncidentReport, tenant: str | None, index: Index, precise: bool) -> tuple[Label, StoredDocument]:
    if r.chunk_id and (r.doc_id or r.evidence):
        raise InvalidRequest("chunk_id: give either chunk_id, or doc_id (with evidence), not both")
    if r.chunk_id:
        label = Label(chunk_id=r.chunk_id)
        field = "chunk_id"
    elif r.doc_id:
        label = Label(doc_id=r.doc_id, evidence=r.evidence if r.evidence and r.evidence.strip() else None)
        field = "doc_id"
    else:
        raise InvalidRequest("doc_id: name the document that answers the question (or a chunk_id)")
    return label, _source_label(label, tenant, index, field, precise)


def not_reportable(label: Label, tenant: str | None, field: str) -> InvalidRequest:
    """The one answer, built from the request alone, for a source that does not exist, that the caller may not see
    (another tenant's), or whose chunk or evidence is not in it: it tells an honest reporter what to check and a
    prober nothing about the index."""
    of = f" of tenant {tenant!r}" if tenant else ""
    if label.chunk_id is not None:
        return InvalidRequest(
            f"{field}: that chunk is not among those this key may report on: check the chunk id (a chunk of a "
            f"document{of})"
        )
    if label.evidence is None:
        return InvalidRequest(
            f"{field}: that document is not among those this key may report on: check the id (a document{of})"
        )
    return InvalidRequest(
        f"{field}: no document with that id and evidence is among those this key may report on: check the id (a "
        f"document{of}) and copy the evidence from one passage of its body (not a heading)"
    )


def _source_label(label: Label, tenant: str | None, index: Index, field: str, precise: bool) -> StoredDocument:
    """The label's document, which must exist for `tenant`; its chunk or evidence must be in it. Unless `precise`,
    every refusal is `not_reportable`."""
    where = f" in tenant {tenant!r}" if tenant else ""
    try:
        stored = index.get(label.document)
    except NotFound:
        stored = None
    if stored is None or (tenant is not None and stored.document.tenant != tenant):
        if not precise:
            raise not_reportable(label, tenant, field)
        raise InvalidRequest(f"{field}: there is no document {label.document!r}{where}")
    if label.chunk_id is not None and label.chunk_id not in {c.chunk_id for c in stored.chunks}:
        if not precise:
            raise not_reportable(label, tenant, field)
        raise InvalidRequest(f"chunk_id: document {label.document!r} has no chunk {label.chunk_id!r}")
    if label.evidence is not None:
        words = normalize(label.evidence)
        if not any(words in normalize(c.text) for c in stored.chunks):
            if not precise:
                raise not_reportable(label, tenant, field)
            if words in normalize(stored.document.text):
                raise InvalidRequest(
                    f"evidence: the words are in document {label.document!r} but in no single passage of its body "
                    "(they are in a heading, or span two chunks): give words from the passage that answers"
                )
            raise InvalidRequest(
                f"evidence: the words were not found in document {label.document!r} (compared ignoring case, "
                "spacing and full-width forms); copy them from the document"
            )
    return stored


OTHER_CATEGORY = "other"  # the gauge's label for a category no labelled set has


class IncidentGaugeCollector(Collector):
    """`plumbline_incidents{status,category}`, counted in the state store at scrape time (so every replica
    sharing a PostgreSQL store reports the same numbers).

    A reporter types the category: as a label value it would make a series per spelling, readable by whoever
    can scrape. So `category` is one of the categories the labelled sets' cases have (stored and packaged, and
    `uncategorized`), any other counted as `other`. Those categories are read again only when a stored set
    changed (its update time is the cache key), so a scrape costs one small query besides the counts."""

    def __init__(self, state: Callable[[], StateStore | None], seeds: Path | None = PACKAGE_DIR / "sets") -> None:
        self._state = state  # None until the store is open
        self._seeds = seeds  # the packaged sets, as the service's SetStore reads them
        self._lock = threading.Lock()
        self._known: tuple[tuple[tuple[str, str], ...], frozenset[str]] | None = None  # (stored sets' versions, ...)

    def categories(self, state: StateStore) -> frozenset[str]:
        """The categories the label may show: those of every labelled set's cases, and `uncategorized`."""
        versions = state.set_versions()
        with self._lock:
            if self._known is not None and self._known[0] == versions:
                return self._known[1]
            sets = SetStore(state, self._seeds)
            found = {"uncategorized"}
            for name in sets.names():
                try:
                    found.update(case.category for case in sets.get(name))
                except EvalError as exc:  # a packaged seed edited by hand: its categories count as `other`
                    log.warning("incident gauges: set %r cannot be read: %s", name, exc)
            self._known = (versions, frozenset(found))
            return self._known[1]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "plumbline_incidents", "Incidents by review status and category.", labels=["status", "category"]
        )
        state = self._state()
        try:
            counts = state.incidents.counts() if state is not None else []
            known = self.categories(state) if state is not None and counts else frozenset()
        except StoreUnavailable as exc:  # /metrics still answers, with the serving metrics
            log.warning("incident gauges left out of this scrape: %s", exc)
            return
        folded: dict[tuple[str, str], int] = {}
        for status, category, n in counts:
            key = (status, category if category in known else OTHER_CATEGORY)
            folded[key] = folded.get(key, 0) + n
        for (status, category), n in folded.items():
            gauge.add_metric([status, category], n)
        yield gauge
