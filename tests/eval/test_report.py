"""Aggregates per category and source (with counts, worst first) and the diagnosis branches."""

from __future__ import annotations

import dataclasses

import pytest

from eval.cases import Case, Label
from eval.report import Thresholds, build_report, mean_metrics
from eval.runner import Run
from eval.verdict import GateResult

from .helpers import case, doc_case, docs, filler, res, run_with


def hit_or_miss(hits: dict[str, bool], **groups: list[str]) -> Run:
    """Cases named by `hits`: each labelled with document `doc-<id>`, found at rank 1 when hits[id]."""
    cases: list[Case] = []
    for cat_and_source, ids in groups.items():
        category, _, source = cat_and_source.partition("__")
        cases.extend(doc_case(i, f"doc-{i}", category=category, source=source or "log") for i in ids)
    rankings = {c.id: (docs(f"doc-{c.id}") if hits[c.id] else []) + filler(c.id, 4) for c in cases}
    return run_with(cases, rankings, ks=(1, 5))


def test_groups_carry_counts_and_are_worst_first() -> None:
    hits = {"b1": True, "b2": True, "h1": True, "h2": False, "h3": False, "i1": False}
    run = hit_or_miss(hits, billing__log=["b1", "b2"], hr__handwritten=["h1", "h2"], hr__log=["h3"], it__log=["i1"])
    report = build_report(run)
    assert report.primary_metric == "recall@5"
    assert report.overall.name == "all"
    assert report.overall.cases == 6
    assert report.overall.metrics["recall@5"] == pytest.approx(3 / 6)
    assert [(g.name, g.cases) for g in report.by_category] == [("it", 1), ("hr", 3), ("billing", 2)]
    assert [g.metrics["recall@5"] for g in report.by_category] == pytest.approx([0.0, 1 / 3, 1.0])
    assert [(g.name, g.cases) for g in report.by_source] == [("handwritten", 2), ("log", 4)]
    assert [g.metrics["hit@1"] for g in report.by_source] == pytest.approx([0.5, 0.5])
    assert sum(g.cases for g in report.by_category) == sum(g.cases for g in report.by_source) == 6


def test_equal_groups_are_ordered_by_name() -> None:
    hits = {"z": True, "a": True, "m": True}
    run = hit_or_miss(hits, zeta=["z"], alpha=["a"], mu=["m"])
    assert [g.name for g in build_report(run).by_category] == ["alpha", "mu", "zeta"]


def test_mean_metrics() -> None:
    run = hit_or_miss({"a": True, "b": False, "c": False, "d": True}, x=["a", "b", "c", "d"])
    means = mean_metrics(run.cases)
    assert means["hit@1"] == 0.5
    assert means["precision@5"] == pytest.approx((0.2 + 0 + 0 + 0.2) / 4)
    assert list(means) == list(run.cases[0].metrics)
    assert mean_metrics([]) == {}


# -- diagnosis -----------------------------------------------------------------------------------


def diagnose(run: Run, thresholds: Thresholds | None = None) -> dict[str, str]:
    return {f.scope: f.problem for f in build_report(run, thresholds).diagnosis}


def test_low_recall() -> None:
    run = hit_or_miss({"a": False, "b": False, "c": True}, x=["a", "b", "c"])
    finding = build_report(run).diagnosis[0]
    assert finding.scope == "overall"
    assert finding.problem.startswith("low recall: recall@5 = 0.333")
    assert "chunking" in finding.advice


def test_low_mrr_with_good_recall() -> None:
    cases = [doc_case(f"c{i}", f"doc-{i}") for i in range(4)]
    # the right document always comes back, but at rank 4
    run = run_with(cases, lambda c: [*filler(c.id, 3), *docs(f"doc-{c.id[1:]}")], ks=(1, 5))
    finding, in_category = build_report(run).diagnosis
    assert (finding.scope, in_category.scope) == ("overall", "category:general")
    assert in_category.problem == finding.problem
    assert finding.problem.startswith("low MRR with good recall: mrr@5 = 0.250")
    assert "recall@5 = 1.000" in finding.problem
    assert "rerank" in finding.advice


def test_low_precision_with_good_recall() -> None:
    # four evidence labels, all answered by the first chunk: recall and MRR are perfect, but the
    # labels would allow four relevant results in the top 5 and only one is
    words = ["refund", "window", "annual", "prorated"]
    cases = [case(f"c{i}", *(Label(doc_id="billing", evidence=w) for w in words)) for i in range(3)]
    run = run_with(cases, lambda c: [res("billing#0", " ".join(words)), *filler(c.id, 4)], ks=(1, 5))
    m = build_report(run).overall.metrics
    assert (m["recall@5"], m["mrr@5"]) == (1.0, 1.0)
    assert m["precision@5"] == pytest.approx(0.2)
    finding, in_category = build_report(run).diagnosis
    assert (finding.scope, in_category.scope) == ("overall", "category:general")
    assert finding.problem.startswith("low precision with good recall: precision@5 = 0.200, 25% of what")
    assert "prune" in finding.advice


def test_healthy() -> None:
    # one label found at rank 1: precision@5 is 0.2, which is all a single label allows
    run = hit_or_miss({"a": True, "b": True}, x=["a", "b"])
    (finding,) = build_report(run).diagnosis
    assert (finding.scope, finding.problem) == ("overall", "none")
    assert "generation" in finding.advice


def verdict(*, passed: bool) -> GateResult:
    return GateResult(passed, (), (), (), 0, ())


def test_a_failed_gate_is_never_called_healthy() -> None:
    run = dataclasses.replace(hit_or_miss({"a": True, "b": True}, x=["a", "b"]), gate=verdict(passed=False))
    (finding,) = build_report(run).diagnosis
    assert (finding.scope, finding.problem) == ("overall", "regression against the baseline")
    assert "healthy" not in finding.advice
    passed = dataclasses.replace(run, gate=verdict(passed=True))
    assert build_report(passed).diagnosis[0].problem == "none"


def test_recall_is_checked_before_mrr() -> None:
    # both recall and MRR are low: the finding is about recall, the first cause to fix
    run = hit_or_miss({"a": False, "b": False}, x=["a", "b"])
    assert diagnose(run)["overall"].startswith("low recall")


def test_thresholds_are_configurable() -> None:
    cases = [doc_case("c0", "doc-0")]
    run = run_with(cases, lambda c: [*filler(c.id, 3), *docs("doc-0")], ks=(1, 5))
    assert diagnose(run)["overall"].startswith("low MRR")
    assert diagnose(run, Thresholds(mrr=0.25))["overall"] == "none"
    assert diagnose(run, Thresholds(recall=1.01))["overall"].startswith("low recall")


def test_a_collapsed_category_is_diagnosed_even_when_overall_is_healthy() -> None:
    ids = {f"cat{n}": [f"c{n}-{i}" for i in range(3)] for n in range(10)}
    hits = {i: cat != "cat7" for cat, members in ids.items() for i in members}
    run = hit_or_miss(hits, **ids)
    findings = build_report(run).diagnosis
    assert [(f.scope, f.problem.split(":")[0]) for f in findings] == [
        ("overall", "none"),
        ("category:cat7", "low recall"),
    ]  # healthy categories are not listed one by one
