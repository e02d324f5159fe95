"""Request and response bodies of /eval/incidents (kept apart from `schemas`, which holds the rest)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from service.api.schemas import FiltersIn, Text, _Strict

Name = Field(min_length=1, max_length=200)


class IncidentIn(_Strict):
    """A question the assistant answered wrongly, and the source that answers it."""

    question: Text = Field(min_length=1, max_length=2000, description="the question as the user asked it")
    doc_id: str | None = Field(None, max_length=1000, description="the document that answers it")
    evidence: str | None = Field(
        None, max_length=2000, description="the words in that document that answer it (survive re-chunking)"
    )
    chunk_id: str | None = Field(None, max_length=1100, description="instead of doc_id: the chunk that answers it")
    category: str = Field("uncategorized", max_length=200)
    reporter: str = Name
    answer: str | None = Field(None, max_length=20_000, description="the wrong answer the user got")
    note: str | None = Field(None, max_length=20_000)
    tenant: str | None = Field(None, max_length=200, description="the tenant the user searched in")
    filters: FiltersIn = Field(default_factory=FiltersIn, description="the /search filters the user had")
    fresh_only: bool = Field(True, description="whether the user's search had fresh_only on")
    k: int | None = Field(
        None, ge=1, le=100, description="how many results the assistant gave its model (default: the service's k)"
    )
    set: str | None = Field(None, description="the labelled set it joins (default: the service's incident set)")


class LabelIn(_Strict):
    doc_id: str | None = None
    chunk_id: str | None = None
    evidence: str | None = None
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
    history: list[EventOut] | None = None
    report_details: list[ReportOut] | None = None


class IncidentCreated(IncidentOut):
    duplicate_of: int | None = Field(description="the incident this report was merged into, if it was known")
    triage_error: str | None = Field(None, description="why triage could not run (the report is stored)")


class IncidentPage(BaseModel):
    incidents: list[IncidentOut]
    next_before: int | None = Field(description="pass as `before` for the next page; null on the last")


class IncidentPatch(_Strict):
    """Accept or reject (with a reason), reopen (status new), or edit fields."""

    status: Literal["new", "accepted", "rejected"] | None = None
    reason: str | None = Field(None, max_length=20_000)
    reviewer: str = Name
    question: str | None = Field(None, min_length=1, max_length=2000)
    category: str | None = Field(None, max_length=200)
    labels: list[LabelIn] | None = Field(None, min_length=1, max_length=50)
    filters: FiltersIn | None = None
