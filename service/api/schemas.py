"""Request and response bodies: the only place HTTP-facing pydantic models live.

Requests forbid unknown fields, so a typo (`filters: {"tennant": ...}`) is a 422 naming the field,
not a silently ignored filter.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from service.domain import DocFormat, DocStatus, FusionMethod, Hit, Mode, StageScore

INT64 = 2**63
# Metadata is stored in every chunk's payload, and the engine cannot read back a payload nested deeper than
# about 127 levels: one such document made its points unreadable and undeletable (see `plumbline doctor`).
# Nothing a filter can match needs more than a few levels, so the limits are far below the engine's.
MAX_METADATA_DEPTH = 8
MAX_METADATA_BYTES = 64 * 1024
DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _valid_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains invalid Unicode (a lone surrogate): send UTF-8 text") from None
    return value


def _utc(value: dt.datetime) -> dt.datetime:
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC (years 1 to 9999)") from None


def _date_only_is_midnight_utc(value: Any) -> Any:
    """`2026-01-01` means 2026-01-01T00:00:00Z, as it does in front matter (`service.index.loaders`)."""
    return f"{value}T00:00:00Z" if isinstance(value, str) and DATE_ONLY.match(value) else value


def _json_value(value: Any, where: str = "metadata", depth: int = 1) -> Any:
    """Metadata values as the engine can store them: finite numbers, 64-bit integers, valid text, and
    objects or lists nested at most `MAX_METADATA_DEPTH` levels (the top-level object is level 1)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and not -INT64 <= value < INT64:
        raise ValueError(f"{where}: an integer of {len(str(abs(value)))} digits does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a finite number")
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, list | dict) and depth > MAX_METADATA_DEPTH:
        raise ValueError(f"{where}: nested too deep; metadata may nest objects and lists {MAX_METADATA_DEPTH} levels")
    if isinstance(value, list):
        return [_json_value(v, where, depth + 1) for v in value]
    if isinstance(value, dict):
        return {_valid_text(str(k)): _json_value(v, f"{where}.{k}", depth + 1) for k, v in value.items()}
    return value


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = _json_value(value)
    size = len(json.dumps(checked, ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}: keep large data in the text")
    return checked


Text = Annotated[str, AfterValidator(_valid_text)]
UtcDatetime = Annotated[AwareDatetime, BeforeValidator(_date_only_is_midnight_utc), AfterValidator(_utc)]
Metadata = Annotated[dict[str, Any], AfterValidator(_metadata)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentIn(_Strict):
    id: Text = Field(min_length=1, max_length=512, description="stable, caller-given id")
    title: Text = Field("", max_length=1000, description="defaults to the first '# heading' or the id")
    text: Text = Field(min_length=1)
    format: DocFormat = DocFormat.MARKDOWN
    metadata: Metadata = Field(default_factory=dict)
    tags: list[Text] = Field(default_factory=list, max_length=100)
    tenant: Text | None = Field(None, max_length=200)
    status: DocStatus = DocStatus.CURRENT
    updated_at: UtcDatetime | None = None
    valid_until: UtcDatetime | None = None
    supersedes: Text | None = Field(None, max_length=512)


class IngestRequest(_Strict):
    documents: list[DocumentIn]


class IngestResponse(BaseModel):
    documents: int
    chunks: int
    unchanged: int = Field(description="documents whose content and settings were already indexed")


class ChunkOut(BaseModel):
    chunk_id: str
    heading_path: str
    start: int
    end: int
    text: str


class DocumentOut(BaseModel):
    id: str
    title: str
    text: str
    format: DocFormat
    metadata: dict[str, Any]
    tags: list[str]
    tenant: str | None
    status: DocStatus
    updated_at: AwareDatetime | None
    valid_until: AwareDatetime | None
    supersedes: str | None
    superseded_by: str | None = Field(description="a current document that supersedes this one: hidden by fresh_only")
    generation: int
    chunks: list[ChunkOut]


class DocumentSummary(BaseModel):
    id: str
    title: str
    tenant: str | None
    tags: list[str]
    status: DocStatus = Field(description="what filters see: superseded while a current document supersedes it")
    declared_status: DocStatus = Field(description="the status the document was ingested with")
    current: bool = Field(description="current now: neither superseded, archived, draft nor expired")
    superseded_by: str | None
    supersedes: str | None
    updated_at: AwareDatetime | None
    valid_until: AwareDatetime | None
    chunks: int
    format: DocFormat
    generation: int = Field(description="the committed generation: its ingest time in microseconds since the epoch")


class DocumentPage(BaseModel):
    documents: list[DocumentSummary]
    total: int = Field(
        description="documents matching the filters, counted by the engine (a write in flight may add one for a moment)"
    )
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last")


class DeleteResponse(BaseModel):
    id: str
    deleted_chunks: int


class FiltersIn(_Strict):
    tenant: Text | None = None
    tags: list[Text] = Field(default_factory=list, description="any of these tags")
    doc_ids: list[Text] = Field(default_factory=list)
    status: list[DocStatus] = Field(default_factory=list)
    updated_after: UtcDatetime | None = None
    updated_before: UtcDatetime | None = None
    metadata: Metadata = Field(
        default_factory=dict, description='{"key": value}, {"key": [v1, v2]} or {"key": {"gte": 1, "lt": 5}}'
    )


class SearchOptions(_Strict):
    """How to search; every field left out takes the service's default (see Settings)."""

    mode: Mode | None = None
    fusion: FusionMethod | None = None
    alpha: float | None = Field(None, description="weight of the dense side in weighted fusion, 0..1")
    rrf_k: int | None = None
    candidates: int | None = Field(None, description="candidate depth per retriever")
    rerank: bool | None = None
    rerank_depth: int | None = None
    filters: FiltersIn = Field(default_factory=FiltersIn)
    fresh_only: bool = Field(True, description="only current documents that have not expired")


class SearchRequest(SearchOptions):
    query: Text
    k: int | None = None
    explain: bool = False
    distinct_docs: bool = Field(False, description="at most one hit per document (its best chunk)")
    highlight: bool = Field(False, description="each hit's `highlights`: where in its text the query's terms match")


class StageOut(BaseModel):
    rank: int | None
    score: float

    @classmethod
    def of(cls, s: StageScore) -> StageOut:
        return cls(rank=s.rank, score=s.score)


class HitOut(BaseModel):
    chunk_id: str
    doc_id: str
    title: str
    heading_path: str
    text: str
    score: float
    span: tuple[int, int]
    status: DocStatus
    current: bool = Field(description="the document is current now: not superseded, archived, draft or expired")
    tags: list[str]
    updated_at: AwareDatetime | None
    metadata: dict[str, Any]
    stages: dict[str, StageOut] | None = None
    highlights: list[tuple[int, int]] | None = Field(
        None,
        description="with highlight: true, the [start, end) character spans of `text` (merged) whose keyword terms "
        "(the BM25 analysis: case-folded, stemmed, CJK characters and pairs) the query shares",
    )

    @classmethod
    def of(cls, hit: Hit, explain: bool, now: dt.datetime, highlights: list[tuple[int, int]] | None = None) -> HitOut:
        """`now` (timezone-aware) is the instant `current` is judged at: the request's."""
        c = hit.chunk
        return cls(
            chunk_id=c.chunk_id,
            doc_id=c.doc_id,
            title=c.title,
            heading_path=c.heading,
            text=c.text,
            score=hit.score,
            span=(c.start, c.end),
            status=hit.status,
            current=hit.current_at(now),
            tags=list(hit.tags),
            updated_at=hit.updated_at,
            metadata=dict(hit.metadata),
            stages={k: StageOut.of(v) for k, v in hit.stages.items()} if explain else None,
            highlights=highlights,
        )


class SearchResponse(BaseModel):
    hits: list[HitOut]
    timings_ms: dict[str, float]
    params: dict[str, Any]
    reranked: bool
    warnings: list[str]


class ErrorOut(BaseModel):
    """Every error: what went wrong and what to do about it."""

    detail: str


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": what}
    for code, what in {
        400: "the body cannot be read (e.g. nested too deep)",
        404: "no such document, set, run or baseline",
        409: "the index was built with other settings, or a baseline exists and replace was not asked for",
        413: "the request or a batch is over a limit",
        422: "the request is invalid: the detail names the field and what to fix",
        429: "too many evaluation runs at once: retry after Retry-After seconds",
        503: "not ready, or the store cannot serve: retry after Retry-After seconds",
        504: "the request ran past its time limit",
        507: "the disk holding the data directory is (nearly) full: nothing was written",
    }.items()
}


class IdentityOut(BaseModel):
    name: str
    key_id: str | None
    roles: list[str] = Field(description="every role the key holds; admin holds them all")
    tenant: str | None = Field(description="the tenant the key is bound to: its requests are confined to it")
    auth: Literal["on", "off"] = Field(description="off: the local demo, where every caller holds every role")


class Health(BaseModel):
    status: str
    detail: str | None = None
    documents: int | None = None
    chunks: int | None = None


class EvalRunRequest(_Strict):
    set: str = Field(description="name of a labelled set (see GET /eval/sets)")
    k: list[int] = Field(default_factory=lambda: [1, 5, 10], min_length=1, max_length=10)
    unit: Literal["chunk", "doc"] = "chunk"
    overrides: SearchOptions = Field(default_factory=SearchOptions)
    baseline: str | None = Field(None, description="baseline name to gate against")
    tolerance: float | None = Field(None, ge=0, le=1, description="allowed absolute drop per metric")
    metrics: list[str] = Field(
        default_factory=list, description="metrics to gate; default hit/recall/mrr/ndcg/stale@max k"
    )
    require_significance: bool = False
    fail_on_regressed_incidents: bool | None = Field(
        None, description="fail the gate when an incident case regressed (default: the service's setting)"
    )
    include_cases: bool = True
    monitoring: bool = Field(
        False,
        strict=True,
        description="a monitoring run of the served configuration (no overrides): it feeds the Prometheus gauges "
        "and alerts, one replica at a time, gated against the baseline named like the set unless `baseline` says",
    )
    run_async: bool = Field(
        False,
        alias="async",
        strict=True,
        description="answer 202 with the run id at once; GET /eval/runs/{id} shows progress, then the report",
    )


class GroupOut(BaseModel):
    name: str
    cases: int
    metrics: dict[str, float]


class FindingOut(BaseModel):
    scope: str = Field(description="'overall' or 'category:<name>'")
    problem: str = Field(description="'none' when nothing is wrong")
    advice: str


class CheckOut(BaseModel):
    metric: str
    scope: str
    baseline: float
    current: float
    tolerance: float
    p_value: float | None
    failed: bool
    delta: float


class CaseChangeOut(BaseModel):
    case_id: str
    metric: str
    baseline: float
    current: float


class BaselineRefOut(BaseModel):
    name: str | None
    run_id: str | None
    sha256: str | None = Field(
        None,
        description="SHA-256 of the baseline run's canonical JSON (eval.storage.run_digest): exactly what was compared",
    )
    source: str | None = Field(None, description='"packaged", "stored", "stored, shadowing packaged", or "file"')


class GateOut(BaseModel):
    baseline: BaselineRefOut | None = Field(None, description="the baseline this run was compared with")
    verdict: Literal["pass", "fail"]
    reasons: list[str]
    warnings: list[str]
    checks: list[CheckOut]
    worse_cases: list[CaseChangeOut]
    better_cases: int


class TopHitOut(BaseModel):
    chunk_id: str
    doc_id: str
    score: float


class CaseOut(BaseModel):
    id: str
    question: str
    category: str
    source: str
    metrics: dict[str, float]
    first_relevant_rank: int | None
    missed: list[dict[str, Any]]
    top: list[TopHitOut]


class IncidentBucketOut(BaseModel):
    cases: int
    passed: int
    failed: list[str] = Field(description="incident case ids that fail in this run")
    regressed: list[str] = Field(description="of those, the ones that passed in an earlier run")


class EvalReportOut(BaseModel):
    """One evaluation run: its numbers overall, per category and per source (worst first), the diagnosis, the
    gate verdict (null without a baseline) and, unless left out, every case."""

    run_id: str
    status: Literal["done"] = "done"
    kind: Literal["monitoring", "manual", "experiment"]
    set: str
    created_at: str
    unit: str
    k: list[int]
    params: dict[str, Any]
    cases_total: int
    metrics: dict[str, float]
    primary_metric: str
    by_category: list[GroupOut]
    by_source: list[GroupOut]
    diagnosis: list[FindingOut]
    gate: GateOut | None
    incidents: IncidentBucketOut | None = Field(
        None, description="the run's incident cases: how many passed, and which regressed (passed before, fail now)"
    )
    cases: list[CaseOut] | None = None
    warnings: list[str] = Field(default_factory=list)


class BaselineRequest(_Strict):
    run_id: str
    name: str
    replace: bool = Field(False, description="replace an existing baseline of that name (it is kept in history)")
    shadow: bool = Field(
        False, description="take the name of a packaged baseline, hiding it (the admin role; the gate then says so)"
    )


class BaselineResponse(BaseModel):
    name: str
    run_id: str
    replaced: str | None = Field(None, description="run id of the baseline this one replaced")


class SetSummary(BaseModel):
    name: str
    cases: int
    warnings: list[str] = Field(default_factory=list, description="e.g. cases naming documents not in the index")
    source: str | None = Field(
        None,
        description='"packaged" (read-only), "stored", "stored, shadowing packaged", or null for a set of '
        "incidents only",
    )


class ProgressOut(BaseModel):
    done: int = Field(description="cases replayed so far")
    total: int


class EvalJobOut(BaseModel):
    """A run that has not finished (or ended without a report): where it stands."""

    run_id: str
    status: Literal["running", "failed", "cancelled", "lost"] = Field(
        description="lost: the replica running it stopped answering (its heartbeat is older than ten minutes)"
    )
    kind: Literal["monitoring", "manual", "experiment"]
    set: str
    progress: ProgressOut
    cancel_requested: bool
    error: str | None
    started_at: str
    heartbeat_at: str
    finished_at: str | None


class RunSummary(BaseModel):
    run_id: str
    kind: Literal["monitoring", "manual", "experiment"]
    set: str
    created_at: str
    unit: str
    cases: int
    metrics: dict[str, float]
    gate: Literal["pass", "fail"] | None = Field(None, description="the gate's verdict, null when not gated")
    overrides: dict[str, Any] = Field(default_factory=dict, description="an experiment's overrides")
