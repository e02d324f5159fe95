"""The regression gate: per metric with tolerance, per category, case by case, with a paired test."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from eval.cases import Case
from eval.errors import EvalError
from eval.gate import compare, default_metrics, judging, named, paired_randomization_p
from eval.matching import Retrieved
from eval.runner import Run
from eval.verdict import GatePolicy, GateRequest

from .helpers import doc_case, docs, filler, run_with

GATED = ("hit@10", "recall@10", "mrr@10", "ndcg@10")  # the relevance metrics gated by default
DEFAULT = (*GATED, "stale@10")  # and the freshness guard, which nothing here makes stale unless it says so


def make_set(n: int, categories: Callable[[int], str] = lambda i: f"cat{i // 10}") -> list[Case]:
    """`n` cases, each with two relevant documents."""
    return [doc_case(f"c{i:03d}", f"doc-{i}-a", f"doc-{i}-b", category=categories(i)) for i in range(n)]


def good(c: Case) -> Sequence[Retrieved]:
    return [*docs(*(label.doc_id or "" for label in c.relevant)), *filler(c.id, 8)]


def dropping(every: int) -> Callable[[Case], Sequence[Retrieved]]:
    """Loses the relevant documents of every `every`-th case."""
    return lambda c: filler(c.id, 10) if int(c.id[1:]) % every == 0 else good(c)


def shuffling(every: int) -> Callable[[Case], Sequence[Retrieved]]:
    """Keeps every relevant document but moves them to the bottom of the top 10 for every `every`-th case."""

    def fn(c: Case) -> Sequence[Retrieved]:
        ranking = list(good(c))
        return [*ranking[2:], *ranking[:2]] if int(c.id[1:]) % every == 0 else ranking

    return fn


CASES = make_set(30)
BASE = run_with(CASES, good, ks=(1, 5, 10))


def test_default_metrics_are_at_the_largest_k() -> None:
    assert default_metrics(BASE) == DEFAULT


def test_a_run_passes_against_itself() -> None:
    again = run_with(CASES, good, ks=(1, 5, 10))
    for run in (BASE, again):
        gate = compare(run, BASE)
        assert gate.passed
        assert gate.verdict == "pass"
        assert gate.reasons == ("no gated metric fell beyond its tolerance",)
        assert gate.worse_cases == ()
        assert gate.better_cases == 0
        assert gate.warnings == ()
        assert all(c.p_value is None and c.delta == 0 and not c.failed for c in gate.checks)
        assert {c.metric for c in gate.checks} == set(DEFAULT)


def test_dropping_a_third_of_the_cases_fails_and_names_metrics_and_cases() -> None:
    degraded = run_with(CASES, dropping(3), ks=(1, 5, 10))
    gate = compare(degraded, BASE)
    assert not gate.passed
    assert gate.verdict == "fail"
    overall = {c.metric: c for c in gate.checks if c.scope == "overall"}
    for metric in GATED:
        check = overall[metric]
        assert check.failed
        assert check.baseline == 1.0
        assert check.current == pytest.approx(2 / 3)
        assert check.delta == pytest.approx(-1 / 3)
        assert check.p_value is not None
        assert check.p_value < 0.01  # ten of thirty cases fell: chance alone gives about 2**-10
        assert any(r.startswith(f"{metric} (overall) fell 0.333 from 1.000 to 0.667") for r in gate.reasons)
    dropped = {f"c{i:03d}" for i in range(0, 30, 3)}
    assert {w.case_id for w in gate.worse_cases} == dropped
    assert {(w.baseline, w.current) for w in gate.worse_cases} == {(1.0, 0.0)}
    assert len(gate.worse_cases) == len(dropped) * len(GATED)
    # each category of ten lost three or four cases: beyond the category tolerance too
    assert {c.scope for c in gate.checks if c.failed} == {"overall", "category:cat0", "category:cat1", "category:cat2"}


def test_shuffling_the_relevant_results_fails_on_rank_metrics_only() -> None:
    shuffled = run_with(CASES, shuffling(3), ks=(1, 5, 10))
    gate = compare(shuffled, BASE)
    assert not gate.passed
    failed = {c.metric for c in gate.checks if c.failed and c.scope == "overall"}
    assert failed == {"mrr@10", "ndcg@10"}
    assert all(("mrr@10" in r or "ndcg@10" in r) for r in gate.reasons)
    assert {w.metric for w in gate.worse_cases} == {"mrr@10", "ndcg@10"}


def test_an_improvement_passes_and_is_counted() -> None:
    worse = run_with(CASES, dropping(3), ks=(1, 5, 10))
    gate = compare(BASE, worse)
    assert gate.passed
    assert gate.better_cases == 10
    assert gate.worse_cases == ()
    assert all(c.p_value is not None and c.p_value > 0.5 for c in gate.checks if c.metric in GATED)
    assert all(c.p_value is None for c in gate.checks if c.metric == "stale@10")  # unchanged


def test_worse_cases_are_listed_biggest_drop_first() -> None:
    def partly(c: Case) -> Sequence[Retrieved]:
        i = int(c.id[1:])
        if i == 4:
            return filler(c.id, 10)  # loses both documents
        if i == 7:
            return [*good(c)[:1], *filler(c.id, 9)]  # loses one of two
        return good(c)

    gate = compare(run_with(CASES, partly, ks=(1, 5, 10)), BASE, GatePolicy(metrics=("recall@10",)))
    assert [(w.case_id, w.current) for w in gate.worse_cases] == [("c004", 0.0), ("c007", 0.5)]


def test_per_metric_tolerance() -> None:
    shuffled = run_with(CASES, shuffling(3), ks=(1, 5, 10))
    cfg = GatePolicy(per_metric={"mrr@10": 0.5, "ndcg@10": 0.5}, category_tolerance=None)
    assert compare(shuffled, BASE, cfg).passed
    assert not compare(shuffled, BASE, GatePolicy(per_metric={"mrr@10": 0.5}, category_tolerance=None)).passed


def test_a_category_collapse_fails_even_when_the_mean_is_within_tolerance() -> None:
    cases = make_set(200, categories=lambda i: "billing" if i < 10 else f"cat{i // 10}")
    base = run_with(cases, good, ks=(1, 5, 10))
    collapsed = run_with(cases, lambda c: filler(c.id, 10) if c.category == "billing" else good(c), ks=(1, 5, 10))
    cfg = GatePolicy(tolerance=0.06, category_tolerance=0.10)
    gate = compare(collapsed, base, cfg)
    overall = [c for c in gate.checks if c.scope == "overall" and c.metric in GATED]
    assert all(c.delta == pytest.approx(-0.05) and not c.failed for c in overall)
    assert not gate.passed
    assert {c.scope for c in gate.checks if c.failed} == {"category:billing"}
    assert all("(category:billing)" in r for r in gate.reasons)
    assert len(gate.reasons) == len(GATED)
    # without category checks the same run passes
    assert compare(collapsed, base, dataclasses.replace(cfg, category_tolerance=None)).passed


def test_small_categories_are_not_gated_on_their_own() -> None:
    cases = make_set(40, categories=lambda i: "tiny" if i < 4 else "big")
    base = run_with(cases, good, ks=(1, 5, 10))
    collapsed = run_with(cases, lambda c: filler(c.id, 10) if c.category == "tiny" else good(c), ks=(1, 5, 10))
    gate = compare(collapsed, base, GatePolicy(tolerance=0.2))
    assert "category:tiny" not in {c.scope for c in gate.checks}
    assert "category:big" in {c.scope for c in gate.checks}
    assert gate.passed
    assert not compare(collapsed, base, GatePolicy(tolerance=0.2, min_category_cases=4)).passed


def test_require_significance() -> None:
    cases = make_set(20)
    base = run_with(cases, good, ks=(1, 5, 10))
    one_case = run_with(cases, lambda c: filler(c.id, 10) if c.id == "c013" else good(c), ks=(1, 5, 10))
    plain = GatePolicy(metrics=GATED, category_tolerance=None)
    strict = GatePolicy(metrics=GATED, category_tolerance=None, require_significance=True)
    # a single case lost: the mean falls 0.05, beyond the tolerance, but that is within the set's noise
    gate = compare(one_case, base, plain)
    assert not gate.passed
    assert all(c.p_value is not None and c.p_value > 0.3 for c in gate.checks)
    assert compare(one_case, base, strict).passed
    # a consistent drop is both beyond the tolerance and significant
    many = run_with(cases, dropping(2), ks=(1, 5, 10))
    gate = compare(many, base, strict)
    assert not gate.passed
    assert all(c.failed and c.p_value is not None and c.p_value < 0.05 for c in gate.checks)
    assert all("(p = 0.00" in r for r in gate.reasons)


def test_paired_randomization_p() -> None:
    consistent = np.full(20, -0.5)
    p = paired_randomization_p(consistent)
    assert p is not None
    assert p < 0.001
    assert p > 0  # the +1 correction
    noise = np.array([0.5, -0.5] * 10)
    p_noise = paired_randomization_p(noise)
    assert p_noise is not None
    assert p_noise > 0.3
    assert paired_randomization_p(np.zeros(10)) is None
    assert paired_randomization_p(np.array([])) is None
    improvement = paired_randomization_p(np.full(10, 0.2))
    assert improvement is not None
    assert improvement > 0.99
    # a larger drop on the same cases is at least as significant
    mixed = np.array([-1.0, -1.0, -1.0, 0.5, 0.0, -1.0, 0.0, -1.0])
    p_mixed = paired_randomization_p(mixed)
    p_more = paired_randomization_p(np.where(mixed > 0, 0.0, mixed))
    assert p_mixed is not None
    assert p_more is not None
    assert p_more <= p_mixed
    # seeded: the same input gives the same p
    assert paired_randomization_p(mixed, seed=3) == paired_randomization_p(mixed, seed=3)


def test_different_unit_raises() -> None:
    doc_run = run_with(CASES, good, ks=(1, 5, 10), unit="doc")
    with pytest.raises(EvalError, match="unit='doc' but the baseline is unit='chunk'"):
        compare(doc_run, BASE)


def staling(every: int) -> Callable[[Case], Sequence[Retrieved]]:
    """Keeps every relevant document but makes the tenth result stale for every `every`-th case."""

    def fn(c: Case) -> Sequence[Retrieved]:
        ranking = list(good(c))
        if int(c.id[1:]) % every == 0:
            ranking[-1] = dataclasses.replace(ranking[-1], stale=True)
        return ranking

    return fn


def test_a_rise_in_stale_fails_because_lower_is_better() -> None:
    stale = run_with(CASES, staling(3), ks=(1, 5, 10))
    gate = compare(stale, BASE)
    assert not gate.passed
    overall = {c.metric: c for c in gate.checks if c.scope == "overall"}
    check = overall["stale@10"]
    assert (check.baseline, check.current, check.failed) == (0.0, pytest.approx(1 / 3), True)
    assert check.p_value is not None
    assert check.p_value < 0.01  # the test asks whether it rose this much by chance
    assert not any(overall[m].failed for m in GATED)  # relevance is untouched
    assert any(r.startswith("stale@10 (overall) rose 0.333 from 0.000 to 0.333") for r in gate.reasons)
    assert not any("fell" in r for r in gate.reasons)
    stale_cases = {f"c{i:03d}" for i in range(0, 30, 3)}
    assert {(w.case_id, w.metric, w.baseline, w.current) for w in gate.worse_cases} == {
        (c, "stale@10", 0.0, 1.0) for c in stale_cases
    }
    assert gate.better_cases == 0
    assert {(c.metric, c.scope) for c in gate.checks if c.failed} == {
        ("stale@10", s) for s in ("overall", "category:cat0", "category:cat1", "category:cat2")
    }
    assert not compare(stale, BASE, GatePolicy(require_significance=True)).passed
    # within tolerance it passes; going back to fresh results is an improvement, never a regression
    assert compare(stale, BASE, GatePolicy(per_metric={"stale@10": 0.4}, category_tolerance=None)).passed
    back = compare(BASE, stale)
    assert back.passed
    assert back.worse_cases == ()
    assert back.better_cases == len(stale_cases)


def test_stale_and_relevance_regressions_are_listed_worst_first() -> None:
    def both(c: Case) -> Sequence[Retrieved]:
        i = int(c.id[1:])
        if i == 4:
            return [dataclasses.replace(r, stale=True) for r in good(c)]  # stale@10 rises by 1
        if i == 7:
            return [*good(c)[:1], *filler(c.id, 9)]  # recall@10 falls by 0.5
        return good(c)

    gate = compare(run_with(CASES, both, ks=(1, 5, 10)), BASE, GatePolicy(metrics=("recall@10", "stale@10")))
    assert [(w.case_id, w.metric) for w in gate.worse_cases] == [("c004", "stale@10"), ("c007", "recall@10")]


def without_stale(run: Run) -> Run:
    """The run as stored before stale@k existed."""
    cases = tuple(
        dataclasses.replace(c, metrics={m: v for m, v in c.metrics.items() if not m.startswith("stale@")})
        for c in run.cases
    )
    return dataclasses.replace(run, cases=cases)


def test_a_baseline_that_predates_stale_still_gates_with_a_warning() -> None:
    old = without_stale(BASE)
    gate = compare(run_with(CASES, staling(3), ks=(1, 5, 10)), old)
    assert gate.passed  # stale@10 rose, but the baseline cannot say
    assert gate.warnings == ("the baseline predates stale@10; it is not gated",)
    assert {c.metric for c in gate.checks} == set(GATED)
    assert not compare(run_with(CASES, dropping(3), ks=(1, 5, 10)), old).passed  # the rest is still gated
    # an old run against a new baseline: the same
    assert compare(old, BASE).warnings == ("the run predates stale@10; it is not gated",)
    # asked for by name, it must be in both runs
    with pytest.raises(EvalError, match=r"\['stale@10'\] are not in both runs"):
        compare(BASE, old, GatePolicy(metrics=("hit@10", "stale@10")))


def test_a_policy_names_its_metrics_from_the_baseline_and_a_verdict_says_what_judged_it() -> None:
    assert named(GatePolicy(), BASE).metrics == (*GATED, "stale@10")
    assert named(GatePolicy(), without_stale(BASE)).metrics == GATED  # a baseline that predates stale@10
    assert named(GatePolicy(metrics=("hit@1",)), BASE).metrics == ("hit@1",)  # named ones are kept
    # at the baseline's largest k, whatever k the run asks for beyond it
    assert named(GatePolicy(), run_with(CASES, good, ks=(1, 5))).metrics[0] == "hit@5"
    stored = GatePolicy(tolerance=0.05)
    judged = judging(BASE, stored, GatePolicy(), GateRequest(tolerance=0.01))
    assert (judged.origin, judged.tightened) == ("baseline", ("tolerance 0.01",))
    gate = judged.compare(run_with(CASES, dropping(3), ks=(1, 5, 10)), BASE)
    assert not gate.passed
    assert gate.policy == named(GatePolicy(tolerance=0.01, per_metric={}), BASE)
    assert (gate.policy_origin, gate.tightened) == ("baseline", ("tolerance 0.01",))
    default = judging(BASE, None, GatePolicy(fail_on_regressed=False), GateRequest())
    assert (default.origin, default.policy.fail_on_regressed) == ("default", False)


def test_missing_metrics_raise() -> None:
    other_k = run_with(CASES, good, ks=(1, 5))
    assert compare(other_k, BASE).passed  # gated at the run's largest k, 5, which the baseline has too
    with pytest.raises(EvalError, match=r"not in both runs \(run has k=\[1, 5, 10\], baseline k=\[1, 5\]\)"):
        compare(BASE, other_k)
    with pytest.raises(EvalError, match="not in both runs"):
        compare(BASE, BASE, GatePolicy(metrics=("hit@3",)))


def test_no_shared_cases_raises() -> None:
    others = run_with(make_set(3, categories=str), good, ks=(1, 5, 10))
    renamed = dataclasses.replace(
        others, cases=tuple(dataclasses.replace(c, case_id="x" + c.case_id) for c in others.cases)
    )
    with pytest.raises(EvalError, match="share no case ids"):
        compare(renamed, BASE)


def test_a_changed_set_warns_and_pairs_the_shared_cases() -> None:
    grown = [*CASES, doc_case("c999", "doc-999-a")]
    run = run_with(grown, lambda c: filler(c.id, 10) if c.id == "c999" else good(c), ks=(1, 5, 10))
    assert run.set_fingerprint != BASE.set_fingerprint
    gate = compare(run, BASE)
    assert gate.passed  # the new, failing case has nothing to be compared with
    assert any("labelled set changed" in w for w in gate.warnings)
    assert "1 new and 0 removed case(s) ignored" in gate.warnings
    shrunk = run_with(CASES[:-2], good, ks=(1, 5, 10))
    assert "0 new and 2 removed case(s) ignored" in compare(shrunk, BASE).warnings


def test_same_set_different_retriever_does_not_warn() -> None:
    gate = compare(run_with(CASES, dropping(3), ks=(1, 5, 10)), BASE)
    assert gate.warnings == ()


def test_a_regressed_incident_fails_the_gate_unless_told_otherwise() -> None:
    cases = [doc_case("c1", "a"), doc_case("incident-7", "b", source="incident")]
    baseline = run_with(cases, {"c1": docs("a"), "incident-7": docs("b")})
    run = dataclasses.replace(baseline, incident_outcomes={"incident-7": "regressed"})
    gate = compare(run, baseline)
    assert not gate.passed
    assert gate.reasons == ("incident case(s) incident-7 passed in an earlier run and fail now (regressed)",)
    lenient = compare(run, baseline, GatePolicy(fail_on_regressed=False))
    assert lenient.passed
    assert any("incident-7" in w for w in lenient.warnings)
    assert compare(dataclasses.replace(run, incident_outcomes={"incident-7": "failed"}), baseline).passed
