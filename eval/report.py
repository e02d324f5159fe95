"""Aggregates (overall, per category, per source, each with its case count) and a diagnosis.

Averages hide a category that has collapsed, so every breakdown is listed worst first. The diagnosis
follows the evidence, in this order (thresholds in `Thresholds`):

1. recall@K low: the right passage never reaches the model. Look at chunking (is the evidence split
   across chunks, or buried in a long one?) and at keyword search (codes, abbreviations, names).
2. recall fine but MRR low: the passage is retrieved but ranked too low. Rerank, or reweight fusion.
3. recall fine but precision low against what the labels allow: the top k is crowded with chunks
   that answer nothing. Rerank, or prune stale and duplicate documents from the corpus.
4. all fine: retrieval is not the problem; look at generation (prompt, context assembly, model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eval.runner import CaseResult, Run


@dataclass(frozen=True)
class Group:
    name: str
    cases: int
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class Thresholds:
    recall: float = 0.8
    mrr: float = 0.6
    precision_share: float = 0.5  # precision@K as a share of the best precision the labels allow


@dataclass(frozen=True)
class Finding:
    scope: str  # "overall" or "category:<name>"
    problem: str
    advice: str


SYNTHETIC = "synthetic"  # the source of a case an LLM drafted (eval.synthetic)


@dataclass(frozen=True)
class Report:
    """Aggregates (overall, per category and per source, worst first) and the diagnosis of one run.

    Example:
        >>> build_report(run).by_category[0].name  # the worst category  # doctest: +SKIP
        'it'
    """

    overall: Group
    by_category: tuple[Group, ...]
    by_source: tuple[Group, ...]
    diagnosis: tuple[Finding, ...]
    primary_metric: str
    # synthetic (LLM-written) cases and human ones (every other source) apart: a synthetic set can flatter or
    # mislead, so its numbers are never read as if people had asked those questions
    by_origin: tuple[Group, ...] = ()


def mean_metrics(cases: Sequence[CaseResult]) -> dict[str, float]:
    if not cases:
        return {}
    names = cases[0].metrics.keys()
    return {name: math.fsum(c.metrics[name] for c in cases) / len(cases) for name in names}


def _groups(cases: Sequence[CaseResult], key: Callable[[CaseResult], str], primary: str) -> tuple[Group, ...]:
    buckets: dict[str, list[CaseResult]] = {}
    for c in cases:
        buckets.setdefault(key(c), []).append(c)
    groups = [Group(name, len(cs), mean_metrics(cs)) for name, cs in buckets.items()]
    return tuple(sorted(groups, key=lambda g: (g.metrics[primary], g.name)))


def build_report(run: Run, thresholds: Thresholds | None = None) -> Report:
    """Aggregate a run; the primary metric (for worst-first ordering) is recall at the largest k."""
    k = max(run.ks)
    primary = f"recall@{k}"
    overall = Group("all", len(run.cases), mean_metrics(run.cases))
    by_category = _groups(run.cases, lambda c: c.category, primary)
    findings = list(_diagnose("overall", overall, run.cases, k, thresholds or Thresholds()))
    if run.gate is not None and not run.gate.passed and findings[0].problem == "none":
        findings[0] = Finding(
            "overall",
            "regression against the baseline",
            "the gate failed though the absolute levels pass the thresholds: read its reasons and the cases "
            "that got worse, and compare what changed (configuration, corpus, model)",
        )
    for group in by_category:
        members = [c for c in run.cases if c.category == group.name]
        findings.extend(
            f
            for f in _diagnose(f"category:{group.name}", group, members, k, thresholds or Thresholds())
            if f.problem != "none"
        )
    by_source = _groups(run.cases, lambda c: c.source, primary)
    by_origin = _groups(run.cases, lambda c: origin(c.source), primary)
    return Report(overall, by_category, by_source, tuple(findings), primary, by_origin)


def origin(source: str) -> str:
    """`synthetic` for a case an LLM wrote (`source: synthetic`), `human` for every other.

    Example:
        >>> origin("synthetic"), origin("incident"), origin("unknown")
        ('synthetic', 'human', 'human')
    """
    return SYNTHETIC if source == SYNTHETIC else "human"


def _diagnose(scope: str, group: Group, cases: Sequence[CaseResult], k: int, t: Thresholds) -> list[Finding]:
    m = group.metrics
    recall, mrr = m[f"recall@{k}"], m[f"mrr@{k}"]
    ceiling = math.fsum(min(c.labels, k) / k for c in cases) / max(1, len(cases))
    precision_share = min(1.0, m[f"precision@{k}"] / ceiling) if ceiling > 0 else 1.0
    if recall < t.recall:
        return [
            Finding(
                scope,
                f"low recall: recall@{k} = {recall:.3f} (< {t.recall})",
                "the right passage is often not retrieved at all: check chunking (evidence split "
                "across chunks or buried in long ones) and keyword search (codes, abbreviations)",
            )
        ]
    if mrr < t.mrr:
        return [
            Finding(
                scope,
                f"low MRR with good recall: mrr@{k} = {mrr:.3f} (< {t.mrr}), recall@{k} = {recall:.3f}",
                "the passage is retrieved but ranked low: enable or deepen rerank, or tune fusion",
            )
        ]
    if precision_share < t.precision_share:
        return [
            Finding(
                scope,
                f"low precision with good recall: precision@{k} = {m[f'precision@{k}']:.3f}, "
                f"{precision_share:.0%} of what the labels allow",
                "the top results are crowded with chunks that answer nothing: rerank, or prune "
                "stale and duplicate documents",
            )
        ]
    return [Finding(scope, "none", "retrieval looks healthy here: look at generation (prompt, context, model)")]
