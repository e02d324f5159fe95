"""One evaluation, two presentations: the JSON body of `/eval/run` (and `--json`) and a text table."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from eval.report import Group, Report
from eval.runner import Run
from eval.verdict import GateResult


def _group(g: Group) -> dict[str, Any]:
    return {"name": g.name, "cases": g.cases, "metrics": {k: round(v, 6) for k, v in g.metrics.items()}}


def report_json(run: Run, report: Report, gate: GateResult | None, *, cases: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "run_id": run.run_id,
        "kind": run.kind,
        "set": run.set_name,
        "created_at": run.created_at,
        "unit": run.unit,
        "k": list(run.ks),
        "params": dict(run.params),
        "cases_total": report.overall.cases,
        "metrics": {k: round(v, 6) for k, v in report.overall.metrics.items()},
        "primary_metric": report.primary_metric,
        "by_category": [_group(g) for g in report.by_category],
        "by_source": [_group(g) for g in report.by_source],
        "diagnosis": [asdict(f) for f in report.diagnosis],
        # the verdict stored with the run names the baseline it was compared with
        "gate": run.gate.to_json() if run.gate is not None else (gate.to_json() if gate else None),
        "incidents": incident_bucket(run),
    }
    if cases:
        out["cases"] = [
            {
                "id": c.case_id,
                "question": c.question,
                "category": c.category,
                "source": c.source,
                "metrics": dict(c.metrics),
                "first_relevant_rank": c.first_relevant_rank,
                "missed": [label.to_json() for label in c.missed],
                "top": [{"chunk_id": r.chunk_id, "doc_id": r.doc_id, "score": r.score} for r in c.retrieved[:5]],
            }
            for c in run.cases
        ]
    return out


def incident_bucket(run: Run) -> dict[str, Any] | None:
    """The run's incident cases (`eval.incidents`): how many, how many passed (the source within the incident's own
    k), which failed and which of those regressed; None when the run has none."""
    outcomes = run.incident_outcomes
    if not outcomes:
        return None
    failed = [case_id for case_id, outcome in sorted(outcomes.items()) if outcome != "passed"]
    return {
        "cases": len(outcomes),
        "passed": len(outcomes) - len(failed),
        "failed": failed,
        "regressed": list(run.regressed),
    }


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
    for title, groups in (("by category (worst first)", report.by_category), ("by source", report.by_source)):
        lines.append(f"-- {title}")
        lines.extend(row(g) for g in groups)
    lines.append("-- diagnosis")
    lines.extend(
        f"{f.scope}: {f.problem}: {f.advice}" if f.problem != "none" else f"{f.scope}: {f.advice}"
        for f in report.diagnosis
    )
    incidents = incident_bucket(run)
    if incidents is not None:
        lines.append(f"-- incidents: {incidents['passed']} of {incidents['cases']} pass")
        if incidents["regressed"]:
            lines.append(f"  regressed (passed before, fail now): {', '.join(incidents['regressed'])}")
    if gate is not None:
        lines.append(f"-- gate: {gate.verdict.upper()}")
        lines.extend(f"  {r}" for r in gate.reasons)
        lines.extend(f"  warning: {w}" for w in gate.warnings)
        worse = sorted({w.case_id for w in gate.worse_cases})
        if worse:
            lines.append(
                f"  {len(worse)} case(s) got worse: {', '.join(worse[:15])}{' ...' if len(worse) > 15 else ''}"
            )
        lines.append(f"  {gate.better_cases} case(s) got better")
    return "\n".join(lines)
