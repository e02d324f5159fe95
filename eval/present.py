"""One evaluation, two presentations: the JSON report (the body of `/eval/run` and `GET /eval/runs/{id}`, and
`plumbline eval run --json`), whose one definition is `EvalReportOut` below (the API's response model too), and a text
table."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from eval.report import SYNTHETIC, Group, Report
from eval.runner import Run
from eval.verdict import GatePolicy, GateResult

# An eval run's k values at most (the API's bound), and so the metrics a gate may name: one per name a run reports
# (hit, recall, precision, mrr, ndcg and stale at each k, and mrr; `eval.metrics.metric_names`).
MAX_KS = 10
MAX_GATED_METRICS = 6 * MAX_KS + 1


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
        description="SHA-256 of the baseline's canonical JSON, its run and its policy (eval.storage.Baseline.sha256): "
        "exactly what was compared with and by",
    )
    source: str | None = Field(None, description='"packaged", "stored", "stored, shadowing packaged", or "file"')


class GatePolicyBody(BaseModel):
    """A gate policy (`eval.verdict.GatePolicy`) as the API reads and writes it; a field left out takes the default."""

    model_config = ConfigDict(extra="forbid")

    metrics: list[str] = Field(
        default_factory=list,
        max_length=MAX_GATED_METRICS,
        description="the metrics gated; empty: hit, recall, mrr, ndcg and stale at the baseline's largest k",
    )
    tolerance: float = Field(GatePolicy.tolerance, ge=0, le=1, description="allowed absolute worsening per metric")
    per_metric: dict[str, float] = Field(
        default_factory=dict, max_length=MAX_GATED_METRICS, description="a tolerance for some metrics (0..1)"
    )
    category_tolerance: float | None = Field(
        GatePolicy.category_tolerance, ge=0, le=1, description="per category; null: no per-category checks"
    )
    min_category_cases: int = Field(
        GatePolicy.min_category_cases, ge=1, description="a category is checked when it has this many cases"
    )
    alpha: float = Field(GatePolicy.alpha, gt=0, lt=1, description="significance level of the paired test")
    require_significance: bool = Field(
        GatePolicy.require_significance, description="a drop fails only when also significant (p < alpha)"
    )
    fail_on_regressed_incidents: bool | None = Field(
        None, description="an incident that passed before and fails now fails the gate (default: the service's)"
    )
    permutations: int = Field(GatePolicy.permutations, ge=100, le=1_000_000, description="of the paired test")
    seed: int = Field(GatePolicy.seed, ge=0, le=2**31 - 1, description="of the paired test")


class GateOut(BaseModel):
    baseline: BaselineRefOut | None = Field(None, description="the baseline this run was compared with")
    policy: GatePolicyBody | None = Field(
        None, description="the policy the verdict was judged by (null on verdicts filed before policies were kept)"
    )
    policy_origin: Literal["baseline", "default"] | None = Field(
        None,
        description='"baseline": the policy stored with the baseline; "default": the service\'s, for a baseline '
        "stored before policies were",
    )
    tightened: list[str] = Field(default_factory=list, description="what the run's request made stricter")
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
    by_origin: list[GroupOut] = Field(
        default_factory=list, description="synthetic (LLM-written) and human cases apart, each with its count"
    )
    diagnosis: list[FindingOut]
    gate: GateOut | None
    incidents: IncidentBucketOut | None = Field(
        None, description="the run's incident cases: how many passed, and which regressed (passed before, fail now)"
    )
    cases: list[CaseOut] | None = None
    warnings: list[str] = Field(default_factory=list)
    what_if: dict[str, Any] | None = Field(
        None,
        description="with `exclude`: this run (without those documents) against `base_run_id` (with them), per metric "
        "and category, with the paired test",
    )


def _group(g: Group) -> GroupOut:
    return GroupOut(name=g.name, cases=g.cases, metrics={k: round(v, 6) for k, v in g.metrics.items()})


def report_out(run: Run, report: Report, gate: GateResult | None, *, cases: bool = True) -> EvalReportOut:
    """The report of `run`; its gate is the verdict stored with the run (which names the baseline it was compared
    with), else `gate`. Without `cases`, the cases are left out."""
    verdict = run.gate if run.gate is not None else gate
    out = EvalReportOut(
        run_id=run.run_id,
        kind=run.kind,
        set=run.set_name,
        created_at=run.created_at,
        unit=run.unit,
        k=list(run.ks),
        params=dict(run.params),
        cases_total=report.overall.cases,
        metrics={k: round(v, 6) for k, v in report.overall.metrics.items()},
        primary_metric=report.primary_metric,
        by_category=[_group(g) for g in report.by_category],
        by_source=[_group(g) for g in report.by_source],
        by_origin=[_group(g) for g in report.by_origin],
        diagnosis=[FindingOut(**asdict(f)) for f in report.diagnosis],
        gate=GateOut.model_validate(verdict.to_json()) if verdict is not None else None,
        incidents=incident_bucket(run),
    )
    if cases:
        out.cases = [
            CaseOut(
                id=c.case_id,
                question=c.question,
                category=c.category,
                source=c.source,
                metrics=dict(c.metrics),
                first_relevant_rank=c.first_relevant_rank,
                missed=[label.to_json() for label in c.missed],
                top=[TopHitOut(chunk_id=r.chunk_id, doc_id=r.doc_id, score=r.score) for r in c.retrieved[:5]],
            )
            for c in run.cases
        ]
    return out


def report_json(run: Run, report: Report, gate: GateResult | None, *, cases: bool = True) -> dict[str, Any]:
    """`report_out` as JSON, with only the fields it sets (no `status` or `warnings`: the API adds those)."""
    return report_out(run, report, gate, cases=cases).model_dump(mode="json", exclude_unset=True)


def incident_bucket(run: Run) -> IncidentBucketOut | None:
    """The run's incident cases (`eval.incidents`): how many, how many passed (the source within the incident's own
    k), which failed and which of those regressed; None when the run has none."""
    outcomes = run.incident_outcomes
    if not outcomes:
        return None
    failed = [case_id for case_id, outcome in sorted(outcomes.items()) if outcome != "passed"]
    return IncidentBucketOut(
        cases=len(outcomes), passed=len(outcomes) - len(failed), failed=failed, regressed=list(run.regressed)
    )


def format_table(run: Run, report: Report, gate: GateResult | None) -> str:
    """A plain-text report: overall, categories and sources worst first, diagnosis, verdict."""
    k = max(run.ks)
    cols = [f"hit@{k}", f"recall@{k}", f"precision@{k}", f"mrr@{k}", f"ndcg@{k}"]
    if f"stale@{k}" in report.overall.metrics:  # runs stored before stale@k lack it
        cols.append(f"stale@{k}")
    width = max([len(g.name) for g in (report.overall, *report.by_category, *report.by_source)] + [8])
    header = f"{'':<{width}} {'cases':>5} " + " ".join(f"{c:>12}" for c in cols)
    lines = [f"run {run.run_id}  set {run.set_name}  unit {run.unit}  k {list(run.ks)}", header]

    def row(g: Group) -> str:
        return f"{g.name:<{width}} {g.cases:>5} " + " ".join(f"{g.metrics[c]:>12.3f}" for c in cols)

    lines.append(row(report.overall))
    sections = [("by category (worst first)", report.by_category), ("by source", report.by_source)]
    if any(g.name == SYNTHETIC for g in report.by_origin):
        sections.append(("synthetic and human cases apart (synthetic: written by an LLM)", report.by_origin))
    for title, groups in sections:
        lines.append(f"-- {title}")
        lines.extend(row(g) for g in groups)
    lines.append("-- diagnosis")
    lines.extend(
        f"{f.scope}: {f.problem}: {f.advice}" if f.problem != "none" else f"{f.scope}: {f.advice}"
        for f in report.diagnosis
    )
    incidents = incident_bucket(run)
    if incidents is not None:
        lines.append(f"-- incidents: {incidents.passed} of {incidents.cases} pass")
        if incidents.regressed:
            lines.append(f"  regressed (passed before, fail now): {', '.join(incidents.regressed)}")
    if gate is not None:
        lines.append(f"-- gate: {gate.verdict.upper()}")
        if gate.policy is not None:
            lines.append(f"  judged by {describe_policy(gate)}")
        lines.extend(f"  {r}" for r in gate.reasons)
        lines.extend(f"  warning: {w}" for w in gate.warnings)
        worse = sorted({w.case_id for w in gate.worse_cases})
        if worse:
            lines.append(
                f"  {len(worse)} case(s) got worse: {', '.join(worse[:15])}{' ...' if len(worse) > 15 else ''}"
            )
        lines.append(f"  {gate.better_cases} case(s) got better")
    return "\n".join(lines)


def describe_policy(gate: GateResult) -> str:
    """One line on the policy a verdict was judged by: where it came from, what it gates, the slack, what the run's
    request made stricter."""
    p = gate.policy
    if p is None:
        return "a policy not recorded (a verdict filed before policies were)"
    origin = {"baseline": "the baseline's policy", "default": "the service's default policy"}
    tolerances = ", ".join(f"{m} {p.tolerance_for(m):g}" for m in p.metrics if m in p.per_metric)
    parts = [
        f"{origin.get(gate.policy_origin or '', 'a policy')}: {', '.join(p.metrics)}",
        f"tolerance {p.tolerance:g}" + (f" ({tolerances})" if tolerances else ""),
        f"per category {p.category_tolerance:g} (>= {p.min_category_cases} cases)"
        if p.category_tolerance is not None
        else "no per-category checks",
        f"drops must be significant (alpha {p.alpha:g})" if p.require_significance else "significance not required",
        "regressed incidents fail" if p.fail_on_regressed else "regressed incidents only warn",
    ]
    if gate.tightened:
        parts.append(f"made stricter by the request: {', '.join(gate.tightened)}")
    return "; ".join(parts)
