"""Request and response bodies of /eval/incidents (kept apart from `schemas`, which holds the rest)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from service.inputs import FiltersIn, Strict, valid_text

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _plain(value: str) -> str:
    """Valid text without control characters (tab and line breaks allowed): PostgreSQL cannot store NUL at all."""
    if CONTROL.search(valid_text(value)):
        raise ValueError("contains a control character (such as NUL): send plain text")
    return value


Plain = Annotated[str, AfterValidator(_plain)]
Name = Field(min_length=1, max_length=200)


class IncidentIn(Strict):
    """A question the assistant answered wrongly, and the source that answers it."""

    question: Plain = Field(min_length=1, max_length=2000, description="the question as the user asked it")
    doc_id: Plain | None = Field(None, max_length=1000, description="the document that answers it")
    evidence: Plain | None = Field(
        None, max_length=2000, description="the words in that document that answer it (survive re-chunking)"
    )
    chunk_id: Plain | None = Field(None, max_length=1100, description="instead of doc_id: the chunk that answers it")
    category: Plain = Field("uncategorized", max_length=200)
    reporter: Plain = Name
    answer: Plain | None = Field(None, max_length=20_000, description="the wrong answer the user got")
    note: Plain | None = Field(None, max_length=20_000)
    tenant: Plain | None = Field(None, max_length=200, description="the tenant the user searched in")
    filters: FiltersIn = Field(default_factory=FiltersIn, description="the /search filters the user had")
    fresh_only: bool = Field(True, description="whether the user's search had fresh_only on")
    k: int | None = Field(
        None, ge=1, le=100, description="how many results the assistant gave its model (default: the service's k)"
    )
    set: Plain | None = Field(None, description="the labelled set it joins (default: the service's incident set)")


class LabelIn(Strict):
    doc_id: Plain | None = None
    chunk_id: Plain | None = None
    evidence: Plain | None = None
    grade: int = Field(1, ge=0, le=100)


class TriageOut(BaseModel):
    verdict: Literal["retrieved", "ranked_low", "not_retrieved", "filtered_out", "stale_source"]
    k: int
    rank: int | None = Field(description="the source's rank in the results (after rerank when reranked)")
    stages: dict[str, int | None] = Field(description="its rank in each stage: dense, keyword, fused, rerank")
    filtered_by: list[str]
    top: list[dict[str, Any]] = Field(description="the first hits that came instead")
    source: dict[str, Any] = Field(description="the reported document's status")
    explanation: str


class ReportOut(BaseModel):
    reporter: str
    question: str
    label: dict[str, Any]
    answer: str | None
    note: str | None
    reported_at: str


class EventOut(BaseModel):
    at: str
    actor: str
    action: str
    detail: dict[str, Any]


class IncidentOut(BaseModel):
    incident_id: int
    set: str
    tenant: str | None
    question: str
    category: str
    status: Literal["new", "accepted", "rejected"]
    labels: list[dict[str, Any]] = Field(description="the sources, as labels of the case format (doc_id, evidence)")
    filters: dict[str, Any]
    fresh_only: bool
    k: int | None = Field(description="how many results the assistant used (its case passes within them)")
    reports: int
    reporters: list[str]
    created_at: str
    updated_at: str
    reviewer: str | None
    reason: str | None
    reviewed_at: str | None
    triage: TriageOut | None
    case_id: str = Field(description="the labelled case it becomes once accepted")
    last_outcome: str | None = Field(description="in the latest eval run of its set: passed, failed or regressed")
    last_run: str | None
    scope: Literal["tenant", "all"] = Field(
        description="which runs count its case once accepted: `all`, every run of its set (an incident without a "
        "tenant, or one an unbound reviewer promoted); `tenant`, only runs confined to its tenant"
    )
    history: list[EventOut] | None = None
    report_details: list[ReportOut] | None = None


class IncidentCreated(IncidentOut):
    duplicate_of: int | None = Field(description="the incident this report was merged into, if it was known")
    triage_error: str | None = Field(None, description="why triage could not run (the report is stored)")


class IncidentPage(BaseModel):
    incidents: list[IncidentOut]
    next_before: int | None = Field(description="pass as `before` for the next page; null on the last")


class IncidentPatch(Strict):
    """Accept or reject (with a reason), reopen (status new), promote or demote (scope, with a reason), or edit
    fields."""

    status: Literal["new", "accepted", "rejected"] | None = None
    reason: Plain | None = Field(None, max_length=20_000)
    reviewer: Plain = Name
    question: Plain | None = Field(None, min_length=1, max_length=2000)
    category: Plain | None = Field(None, max_length=200)
    labels: list[LabelIn] | None = Field(None, min_length=1, max_length=50)
    filters: FiltersIn | None = None
    scope: Literal["tenant", "all"] | None = Field(
        None,
        description="a tenant's incident: `all` promotes it into runs over every tenant (their gates and alerts), "
        "`tenant` keeps it to its tenant's runs; an unbound key only (403 for a tenant-bound one), with a reason",
    )
