"""Replaying a labelled set through a retriever, case by case, into a run record.

A retriever is anything with `retrieve(queries) -> ranked results per query`: the service's own
pipeline in-process (`service.evaluation.runs.PipelineRetriever`), a remote Plumbline over HTTP
(`service.cli.remote.HttpRetriever`), or a plain function wrapped in `FunctionRetriever`. Queries go in
batches, so an in-process pipeline embeds them together.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from eval import metrics
from eval.cases import Case, Label, fingerprint
from eval.errors import EvalError
from eval.matching import Retrieved, Unit, collapse_to_documents, judge
from eval.verdict import GateResult

MAX_K = 1000


@dataclass(frozen=True)
class Query:
    """What a retriever is asked: the question, how many results, the case's own filters, and the
    unit (with "doc", a retriever that can should return at most one result per document)."""

    text: str
    k: int
    filters: Mapping[str, Any] = field(default_factory=dict)
    unit: Unit = "chunk"


class Retriever(Protocol):
    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]: ...


class FunctionRetriever:
    """Adapts `fn(query) -> ranked results` to `Retriever`.

    Example:
        >>> r = FunctionRetriever(lambda q: [Retrieved("a#0", "a")])
        >>> r.retrieve([Query("anything", k=5)])[0][0].doc_id
        'a'
    """

    def __init__(self, fn: Callable[[Query], Sequence[Retrieved]]) -> None:
        self._fn = fn

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
        return [_cut(list(self._fn(q)), q.k, q.unit) for q in queries]


@dataclass(frozen=True)
class CaseResult:
    """One case's outcome: metrics, where the first relevant result was, what was missed, and what
    came back instead (the top results, for reading a failure without re-running it)."""

    case_id: str
    question: str
    category: str
    source: str
    metrics: Mapping[str, float]
    labels: int
    first_relevant_rank: int | None
    missed: tuple[Label, ...]
    retrieved: tuple[Retrieved, ...]
    # per retrieved result, whether it satisfies a label (what a distractor report needs: the results that took a
    # top-k slot without answering); None in a run stored before it was kept
    relevant: tuple[bool, ...] | None = None


# What a run was for. monitoring: the served configuration, scheduled or marked so; only these feed the gauges
# and alerts. manual: the served configuration, run on demand. experiment: a run with overrides.
KINDS = ("monitoring", "manual", "experiment")


@dataclass(frozen=True)
class Run:
    """A stored evaluation: the settings it ran with, every case's result, and the gate verdict if gated.

    Example:
        >>> run = run_set([Case("c", "q", (Label(doc_id="a"),))], FunctionRetriever(lambda q: []), set_name="s")
        >>> run.cases[0].metrics["hit@10"], run.gate
        (0.0, None)
    """

    run_id: str
    set_name: str
    set_fingerprint: str
    created_at: str
    unit: Unit
    ks: tuple[int, ...]
    params: Mapping[str, Any]
    cases: tuple[CaseResult, ...]
    gate: GateResult | None = None  # the verdict against a baseline, when the run was gated
    kind: str = "manual"  # one of KINDS
    tenant: str | None = None  # the tenant a tenant-bound caller confined the run to; None: every tenant
    # incident cases (eval.incidents): case id -> "passed", "failed" or "regressed" (failed, having passed before)
    incident_outcomes: Mapping[str, str] = field(default_factory=dict)

    @property
    def regressed(self) -> tuple[str, ...]:
        """Incident cases that passed in an earlier run of the set and fail in this one."""
        return tuple(c for c, outcome in sorted(self.incident_outcomes.items()) if outcome == "regressed")


def run_set(
    cases: Sequence[Case],
    retriever: Retriever,
    *,
    set_name: str,
    ks: Sequence[int] = (1, 5, 10),
    unit: Unit = "chunk",
    depth: int | None = None,
    params: Mapping[str, Any] | None = None,
    batch_size: int = 64,
    before_batch: Callable[[int, int], None] | None = None,
    run_id: str | None = None,
) -> Run:
    """Evaluate every case. `depth` (default max k) is how many results to ask for; MRR uses them all.
    `before_batch(done, total)` is called before each batch of questions: it may report progress, or raise
    to stop the run (a deadline, a cancel). `run_id` (default: a new one) lets a caller name the run before it
    ends."""
    if not cases:
        raise EvalError("the set has no cases")
    if not ks or any(k < 1 or k > MAX_K for k in ks):
        raise EvalError(f"k values must be between 1 and {MAX_K}, got {list(ks)}")
    depth = depth or max(ks)
    if depth < max(ks):
        raise EvalError(f"depth {depth} is below the largest k {max(ks)}")
    results: list[CaseResult] = []
    for start in range(0, len(cases), batch_size):
        if before_batch is not None:
            before_batch(start, len(cases))
        batch = cases[start : start + batch_size]
        ranked = retriever.retrieve([Query(c.question, depth, c.filters, unit) for c in batch])
        if len(ranked) != len(batch):
            raise EvalError(f"the retriever answered {len(ranked)} of {len(batch)} queries")
        results.extend(score_case(c, _cut(r, depth, unit), ks, unit) for c, r in zip(batch, ranked, strict=True))
    return Run(
        run_id=run_id or new_run_id(),
        set_name=set_name,
        set_fingerprint=fingerprint(cases),
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        unit=unit,
        ks=tuple(sorted(set(ks))),
        params=dict(params or {}),
        cases=tuple(results),
    )


def score_case(case: Case, ranked: Sequence[Retrieved], ks: Sequence[int], unit: Unit) -> CaseResult:
    j = judge(case.relevant, ranked, unit)
    missed = tuple(label for label, f in zip(case.positive, j.first_ranks, strict=True) if f is None)
    first = next((i + 1 for i, ok in enumerate(j.relevant) if ok), None)
    return CaseResult(
        case_id=case.id,
        question=case.question,
        category=case.category,
        source=case.source,
        metrics=metrics.compute(j, ks),
        labels=len(case.positive),
        first_relevant_rank=first,
        missed=missed,
        retrieved=tuple(ranked),
        relevant=tuple(j.relevant),
    )


def _cut(ranked: Sequence[Retrieved], depth: int, unit: Unit) -> list[Retrieved]:
    """The first `depth` results; with unit "doc", the first `depth` documents (collapsed first)."""
    return (collapse_to_documents(ranked) if unit == "doc" else list(ranked))[:depth]


def new_run_id() -> str:
    """Sortable by time to the microsecond (the newest run of a set is the one the gauges show)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
    return f"{now}-{uuid.uuid4().hex[:6]}"
