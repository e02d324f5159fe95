"""Request and response bodies of syntheses, sweeps and answer gradings (kept apart from `schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from service.inputs import Strict


class WorkProgressOut(BaseModel):
    done: int = Field(
        description="passages drafted, configurations measured, items graded, or a tune's phases (mine, train, "
        "re-embed, compare) done so far"
    )
    total: int


class WorkOut(BaseModel):
    """A synthesis, a sweep or an answer grading: where it stands, and once done its summary (or whole result)."""

    id: str
    kind: Literal["synthesis", "sweep", "answers", "tune"]
    set: str
    status: Literal["queued", "running", "done", "failed", "cancelled", "lost"] = Field(
        description="lost: the replica doing it stopped answering (a synthesis can then be resumed)"
    )
    progress: WorkProgressOut | None
    error: str | None = None
    created_at: str
    finished_at: str | None = None
    params: dict[str, Any] = Field(description="what was asked")
    summary: dict[str, Any] | None = Field(None, description="once done: what a listing shows")
    result: dict[str, Any] | None = Field(None, description="once done, when asked for one: the whole result")


class SynthesisIn(Strict):
    """Draft questions from the index's own chunks with the configured LLM; they land as proposed cases."""

    passages: int = Field(50, ge=1, le=2000, description="chunks to sample (stratified by tenant, tag and document)")
    per_passage: int = Field(2, ge=1, le=5, description="questions asked for per chunk")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="the sample's seed (the same seed, the same chunks)")
    tags: list[str] = Field(default_factory=list, max_length=50, description="only documents with one of these tags")
    tenant: str | None = Field(None, max_length=200, description="only this tenant's documents")
    check: bool = Field(True, description="ask the LLM a second time whether the chunk answers each question")
    dedup_threshold: float = Field(0.92, ge=0.5, le=1.0, description="cosine at which two questions are duplicates")
    min_words: int = Field(4, ge=1, le=20, description="shorter questions are rejected")
    max_copy_run: int = Field(8, ge=3, le=50, description="a question copying this many words in a row is rejected")
    accept_all: bool = Field(False, description="add the survivors to the set at once, unreviewed")


class ReviewIn(Strict):
    """Accept proposed cases into the set, or reject them."""

    status: Literal["accepted", "rejected"]
    ids: list[int] | None = Field(None, max_length=10_000, description="the drafts' ids; omit with all=true")
    all: bool = Field(False, description="every proposed case of the set (that this key may see)")
    reason: str | None = Field(None, max_length=2000)


class ReviewOut(BaseModel):
    set: str
    status: str
    changed: list[int]


class ProposalsOut(BaseModel):
    set: str
    counts: dict[str, int] = Field(description="drafts by status: proposed, accepted, rejected, discarded")
    proposals: list[dict[str, Any]]


class SweepIn(Strict):
    """A grid (or a bounded random sample of one) of configurations, replayed on the set's tuning split; the winner
    reported on its held-out split against the served configuration."""

    set: str = Field(min_length=1, max_length=100)
    space: dict[str, list[Any]] = Field(
        description="parameter -> values: chunk_size, chunk_overlap, mode, fusion, alpha, rrf_k, candidates, rerank, "
        'rerank_depth, k; e.g. {"alpha": [0.3, 0.5, 0.7], "k": [5, 10]}'
    )
    search: Literal["grid", "random"] = "grid"
    samples: int = Field(20, ge=1, le=5000, description="random search: configurations sampled from the grid")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    metric: str = Field("ndcg@10", max_length=40, description="the quality a winner is chosen by")
    unit: Literal["chunk", "doc"] = "chunk"
    test_share: float = Field(0.5, gt=0, lt=1, description="the held-out share of cases without a split of their own")


class PromoteIn(Strict):
    baseline: str | None = Field(
        None, max_length=100, description="the baseline to gate against; default: the one named like the set"
    )


class PromoteOut(BaseModel):
    sweep: str
    promoted: bool
    served: dict[str, Any] = Field(description="the winner's search defaults, which are served now if promoted")
    run: dict[str, Any] = Field(description="the gated run of the winner's configuration")


class AnswerItemIn(Strict):
    id: str = Field(min_length=1, max_length=200, description="the item's id; with run_id, the run's case id")
    question: str = Field(min_length=1, max_length=4000)
    answer: str = Field(max_length=40_000)
    contexts: list[str] | None = Field(None, max_length=50, description="omit to take them from run_id's retrieval")
    reference: list[str] = Field(default_factory=list, max_length=20, description="what a correct answer says")
    category: str = Field("uncategorized", max_length=200)


class AnswersIn(Strict):
    set: str = Field(min_length=1, max_length=100, description="the set the questions come from")
    items: list[AnswerItemIn] = Field(min_length=1, max_length=2000)
    run_id: str | None = Field(None, max_length=100, description="the run whose retrieved chunks are the contexts")
    k: int = Field(5, ge=1, le=50, description="contexts taken from the run per item")
    samples: int = Field(3, ge=1, le=9, description="judge samples per item (median and spread kept)")


class TuneIn(Strict):
    """Fine-tune the served embedding model on labelled sets, into a new index generation beside the live one."""

    sets: list[str] = Field(min_length=1, max_length=20, description="the sets to learn from and be judged on")
    epochs: int = Field(2, ge=1, le=20)
    learning_rate: float = Field(2e-5, gt=0, le=1e-3)
    batch_size: int = Field(16, ge=2, le=256, description="questions per step (the others in a batch are negatives)")
    negatives: int = Field(3, ge=1, le=20, description="hard negatives mined per question (one used per epoch)")
    depth: int = Field(30, ge=5, le=200, description="how deep the served search is read when mining")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    test_share: float = Field(0.5, gt=0, lt=1, description="the held-out share of cases without a split of their own")
    metric: str = Field("ndcg@10", max_length=40, description="the held-out quality the comparison is made on")
    min_gain: float = Field(0.0, ge=0, le=1, description="the held-out gain a tuned model needs to be promoted")


def _relearned() -> Any:
    return Field(
        None,
        description='the "nothing matches" threshold learned again for the model now served (same sets, k, seed, '
        "beta: threshold, model, test precision and recall; error when it could not be); null when none was learned "
        "or it was this model's already",
    )


class TunePromoteOut(BaseModel):
    tune: str
    generation: str
    promoted: bool
    refusal: str | None = Field(None, description="why it was not promoted")
    copied: dict[str, int] | None = Field(
        None,
        description="documents copied into the generation from the live index: before the gate (before_gate, "
        "deleted_before_gate), then at the switch (copied_before, copied_held: with writes held, deleted)",
    )
    runs: list[dict[str, Any]] = Field(description="each set's gated run on the new generation (null: no baseline)")
    no_answer: dict[str, Any] | None = _relearned()


class GenerationOut(BaseModel):
    name: str = Field(description="base: the index the configured model built; else the tune that made it")
    model: str = Field(description="the embedding model its vectors were made with (tuned:<name>: a tuned one)")
    index_dir: str
    created_at: str
    tune: str | None


class ModelOut(BaseModel):
    serving: GenerationOut
    previous: GenerationOut | None = Field(description="what a rollback returns to")
    history: list[dict[str, Any]]


class RollbackOut(BaseModel):
    generation: str
    model: str
    copied: dict[str, int]
    no_answer: dict[str, Any] | None = _relearned()
