"""Request and response bodies: the only place HTTP-facing pydantic models live.

Requests forbid unknown fields, so a typo (`filters: {"tennant": ...}`) is a 422 naming the field,
not a silently ignored filter. A document, search filters and search options are validated as every way into the
service validates them (`service.inputs`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, Field

from eval.present import MAX_GATED_METRICS, MAX_KS, GatePolicyBody
from service.domain import DocFormat, DocStatus, Hit, StageScore
from service.inputs import DocumentIn, SearchOptions, Strict, Text
from service.settings import MAX_BATCH_DOCUMENTS


class IngestRequest(Strict):
    documents: list[DocumentIn] = Field(
        max_length=MAX_BATCH_DOCUMENTS,
        description=f"at most max_batch_documents (413 beyond); over {MAX_BATCH_DOCUMENTS:,}, a 422 from the schema",
    )


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


class StatusChange(BaseModel):
    id: str
    status: str = Field(description="the document's status now")


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


class NoAnswerOut(BaseModel):
    """Whether the top k probably holds no answer: the best shown hit's dense score against a threshold learned on
    the labelled sets (POST /eval/no-answer/calibrate)."""

    signal: str = Field(description="what `score` is: dense_top, the best dense (cosine) score among the hits")
    score: float | None = Field(description="the signal's value; null when no hit has a dense score")
    threshold: float | None = Field(description="the learned threshold; null when none applies (see `why`)")
    k: int | None = Field(description="the top k the threshold was learned for")
    nothing_matches: bool | None = Field(
        description="true: below the threshold (or no hits), the hits probably do not answer; false: above it; "
        "null: cannot tell, `why` says why"
    )
    why: str | None


class SearchResponse(BaseModel):
    hits: list[HitOut]
    timings_ms: dict[str, float]
    params: dict[str, Any]
    reranked: bool
    warnings: list[str]
    no_answer: NoAnswerOut


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
        429: "over the caller's rate limit, or too many evaluation runs at once: retry after Retry-After seconds",
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


class ExcludeIn(Strict):
    doc_ids: list[Text] = Field(default_factory=list, max_length=1000, description="documents to leave out")
    tags: list[Text] = Field(default_factory=list, max_length=1000, description="leave out documents with these tags")


class EvalRunRequest(Strict):
    set: str = Field(description="name of a labelled set (see GET /eval/sets)")
    k: list[int] = Field(default_factory=lambda: [1, 5, 10], min_length=1, max_length=MAX_KS)
    unit: Literal["chunk", "doc"] = "chunk"
    overrides: SearchOptions = Field(default_factory=SearchOptions)
    baseline: str | None = Field(
        None,
        description="baseline name to gate against, by the policy stored with it (GET /eval/baselines/{name}); the "
        "gate fields below may only make it stricter: anything looser is a 403 naming it",
    )
    tolerance: float | None = Field(
        None, ge=0, le=1, description="allowed absolute drop per metric: at most the policy's for every gated metric"
    )
    metrics: list[str] = Field(
        default_factory=list,
        max_length=MAX_GATED_METRICS,
        description="metrics to gate besides the baseline policy's",
    )
    require_significance: bool | None = Field(
        None, description="false: a drop fails even if not significant, where the policy requires significance"
    )
    fail_on_regressed_incidents: bool | None = Field(
        None, description="true: a regressed incident case fails the gate, where the policy only warns"
    )
    include_cases: bool = True
    exclude: ExcludeIn | None = Field(
        None,
        description="what-if pruning: run the set as asked and again without these documents, as experiments no gate "
        "judges, and report the change per metric and category with the paired test (`what_if`)",
    )
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


class BaselineRequest(Strict):
    run_id: str
    name: str
    replace: bool = Field(False, description="replace an existing baseline of that name (it is kept in history)")
    shadow: bool = Field(
        False, description="take the name of a packaged baseline, hiding it (the admin role; the gate then says so)"
    )
    policy: GatePolicyBody | None = Field(
        None,
        description="the gate policy every run gated against this baseline is judged by (a run may only make it "
        "stricter); left out: the defaults, failing on regressed incidents as the service's setting says",
    )


class BaselineResponse(BaseModel):
    name: str
    run_id: str
    replaced: str | None = Field(None, description="run id of the baseline this one replaced")
    sha256: str = Field(description="SHA-256 of the baseline's canonical JSON, its run and its policy")
    source: str = Field(description='"packaged", "stored" or "stored, shadowing packaged"')
    policy: GatePolicyBody = Field(description="the policy runs gated against it are judged by, its metrics named")
    policy_origin: Literal["baseline", "default"] = Field(
        description='"baseline": stored with it; "default": the service\'s, for a baseline stored before policies were'
    )


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
    status: Literal["queued", "running", "failed", "cancelled", "lost"] = Field(
        description="queued: waiting for an evaluation slot, its caller group's turn (it may be cancelled); lost: the "
        "replica running or queueing it stopped answering (its heartbeat is older than ten minutes)"
    )
    position: int | None = Field(
        None,
        description="while queued: 1 + the background runs of its caller group (its tenant; the keys bound to none) "
        "queued before it on its replica; the groups take turns",
    )
    kind: Literal["monitoring", "manual", "experiment"]
    set: str
    progress: ProgressOut
    cancel_requested: bool
    error: str | None
    started_at: str
    heartbeat_at: str
    finished_at: str | None


class RunDeleted(BaseModel):
    run_id: str
    set: str
    kind: Literal["monitoring", "manual", "experiment"]


class RunSummary(BaseModel):
    run_id: str
    kind: Literal["monitoring", "manual", "experiment"]
    set: str
    created_at: str
    unit: str
    cases: int
    metrics: dict[str, float]
    gate: Literal["pass", "fail"] | None = Field(None, description="the gate's verdict, null when not gated")
    gate_policy: GatePolicyBody | None = Field(
        None, description="the policy the verdict was judged by (null when not gated, or filed before policies were)"
    )
    overrides: dict[str, Any] = Field(default_factory=dict, description="an experiment's overrides")
    corpus: dict[str, int] | None = Field(
        None,
        description="the corpus it ran over: documents, chunks (a tenant's documents for a run confined to one), and "
        "last_change, the audit id of the newest ingest or delete it covers; null for runs stored before",
    )
    trigger: str | None = Field(None, description='a monitoring run\'s: "schedule" or "corpus change"')


class NoAnswerCalibrateIn(Strict):
    sets: list[str] = Field(
        min_length=1, max_length=20, description="labelled sets (GET /eval/sets) whose cases teach the threshold"
    )
    k: int = Field(5, ge=1, le=50, description='"an answer in the top k": the k a caller reads')
    seed: int = Field(0, ge=0, le=2**31 - 1, description="splits cases that carry no split (tune / test)")
    beta: float = Field(
        0.5,
        ge=0.1,
        le=10,
        description="the threshold maximises F-beta of flagging searches without an answer: below 1 precision weighs "
        "more (a search wrongly flagged tells a caller to drop a good answer), above 1 recall",
    )


class DetectionOut(BaseModel):
    threshold: float
    precision: float | None = Field(description="of the searches flagged, the share whose top k held no answer")
    recall: float | None = Field(description="of the searches whose top k held no answer, the share flagged")
    beta: float
    f: float = Field(description="F-beta of the flag")
    flagged: int
    unanswered: int
    searches: int


class NoAnswerCalibrationOut(BaseModel):
    """A learned "nothing matches" threshold: fit on the tune split, reported on both."""

    signal: str
    threshold: float
    model: str = Field(description="the embedding model it was learned with: under another it is not applied")
    k: int
    sets: list[str]
    seed: int
    beta: float
    split: str = Field(description='"case" (the cases\' own splits), "hash" (seeded) or "mixed"')
    cases: dict[str, int]
    tune: DetectionOut
    test: DetectionOut
    at: str
