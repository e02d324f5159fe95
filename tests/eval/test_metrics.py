"""Metrics: hand-computed examples for every function, and Hypothesis properties over random cases."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.matching import Judgement, Retrieved, Unit, judge
from eval.metrics import (
    compute,
    hit_at,
    lower_is_better,
    metric_names,
    mrr,
    ndcg_at,
    precision_at,
    recall_at,
    stale_at,
)

from .helpers import res


def lg(p: int) -> float:
    return math.log2(1 + p)


# -- hand-computed examples ----------------------------------------------------------------------

# Five results; three labels: satisfied first at ranks 2 and 4, and never.
J = Judgement(first_ranks=(2, 4, None), grades=(1, 1, 1), relevant=(False, True, False, True, False))


@pytest.mark.parametrize(
    ("fn", "k", "expected"),
    [
        (hit_at, 1, 0.0),
        (hit_at, 2, 1.0),
        (hit_at, 10, 1.0),
        (recall_at, 1, 0.0),
        (recall_at, 3, 1 / 3),
        (recall_at, 4, 2 / 3),
        (recall_at, 10, 2 / 3),
        (precision_at, 1, 0.0),
        (precision_at, 2, 1 / 2),
        (precision_at, 3, 1 / 3),
        (precision_at, 5, 2 / 5),
        (precision_at, 10, 2 / 10),  # five results came back, but the divisor is still k
        (mrr, 1, 0.0),
        (mrr, 2, 1 / 2),
        (mrr, 10, 1 / 2),
        (ndcg_at, 1, 0.0),
        (ndcg_at, 3, (1 / lg(2)) / (1 + 1 / lg(2) + 1 / lg(3))),
        (ndcg_at, 5, (1 / lg(2) + 1 / lg(4)) / (1 + 1 / lg(2) + 1 / lg(3))),
    ],
)
def test_hand_computed(fn: Callable[[Judgement, int], float], k: int, expected: float) -> None:
    assert fn(J, k) == pytest.approx(expected, abs=1e-12)


def test_mrr_without_cut_uses_every_result() -> None:
    j = Judgement(first_ranks=(7,), grades=(1,), relevant=(False,) * 6 + (True,))
    assert mrr(j) == pytest.approx(1 / 7)
    assert mrr(j, 5) == 0.0
    assert mrr(j, 7) == pytest.approx(1 / 7)
    assert mrr(Judgement((None,), (1,), ())) == 0.0


def test_precision_divides_by_k_when_fewer_results_came_back() -> None:
    j = judge([Label(doc_id="a"), Label(doc_id="b")], [res("a#0"), res("b#0")], "chunk")
    assert precision_at(j, 2) == 1.0
    assert precision_at(j, 5) == pytest.approx(2 / 5)
    assert precision_at(j, 10) == pytest.approx(2 / 10)


def test_precision_counts_results_while_recall_counts_labels() -> None:
    # one label, satisfied by three chunks of its document
    j = judge([Label(doc_id="a")], [res("a#0"), res("a#1"), res("z#0"), res("a#2")], "chunk")
    assert recall_at(j, 4) == 1.0
    assert precision_at(j, 4) == pytest.approx(3 / 4)


def test_ndcg_with_grades() -> None:
    # labels of grade 3, 1, 2; the grade-1 label at rank 1, the grade-3 label at rank 2, the grade-2 one missed
    j = Judgement(first_ranks=(2, 1, None), grades=(3, 1, 2), relevant=(True, True, False))
    ideal3 = 3 / lg(1) + 2 / lg(2) + 1 / lg(3)
    assert ndcg_at(j, 3) == pytest.approx((1 / lg(1) + 3 / lg(2)) / ideal3, abs=1e-12)
    assert ndcg_at(j, 1) == pytest.approx((1 / lg(1)) / 3, abs=1e-12)
    ideal2 = 3 / lg(1) + 2 / lg(2)
    assert ndcg_at(j, 2) == pytest.approx((1 / lg(1) + 3 / lg(2)) / ideal2, abs=1e-12)


def test_ndcg_perfect_ranking_is_one() -> None:
    j = Judgement(first_ranks=(1, 2, 3), grades=(3, 2, 1), relevant=(True, True, True, False))
    for k in (1, 2, 3, 10):
        assert ndcg_at(j, k) == 1.0
    # the right documents in the wrong grade order are not perfect
    worse = Judgement(first_ranks=(3, 2, 1), grades=(3, 2, 1), relevant=(True, True, True))
    assert ndcg_at(worse, 3) < 1.0


def test_ndcg_several_labels_satisfied_by_one_result_take_consecutive_positions() -> None:
    # one chunk at rank 2 satisfies three evidence labels of grade 1, 2 and 3
    text = "alpha beta gamma"
    labels = [
        Label(doc_id="a", evidence="alpha", grade=1),
        Label(doc_id="a", evidence="beta", grade=2),
        Label(doc_id="a", evidence="gamma", grade=3),
    ]
    j = judge(labels, [res("z#0"), res("a#0", text), res("z#1")], "chunk")
    assert j.first_ranks == (2, 2, 2)
    ideal = 3 / lg(1) + 2 / lg(2) + 1 / lg(3)
    # best grade first from rank 2: grade 3 at position 2, grade 2 at 3, grade 1 at 4
    assert ndcg_at(j, 10) == pytest.approx((3 / lg(2) + 2 / lg(3) + 1 / lg(4)) / ideal, abs=1e-12)
    # positions beyond k are not credited
    assert ndcg_at(j, 3) == pytest.approx((3 / lg(2) + 2 / lg(3)) / ideal, abs=1e-12)
    assert ndcg_at(j, 2) == pytest.approx((3 / lg(2)) / (3 / lg(1) + 2 / lg(2)), abs=1e-12)


def test_ndcg_shared_result_pushes_later_labels_down() -> None:
    # rank 1 satisfies two labels (positions 1 and 2), so the label first satisfied at rank 2 takes position 3
    j = Judgement(first_ranks=(1, 1, 2), grades=(1, 1, 1), relevant=(True, True))
    assert ndcg_at(j, 3) == 1.0  # three labels in three positions: as good as the ideal
    assert ndcg_at(j, 2) == 1.0
    # without the rule, crediting both labels at rank 1 would give DCG 2 > IDCG@1 = 1
    assert ndcg_at(j, 1) == 1.0


def test_hit_and_recall_with_several_labels() -> None:
    j = Judgement(first_ranks=(None, 3, 1, None), grades=(1, 1, 2, 1), relevant=(True, False, True))
    assert hit_at(j, 1) == 1.0
    assert recall_at(j, 1) == 0.25
    assert recall_at(j, 3) == 0.5


def test_stale_at_counts_any_stale_result_in_the_top_k() -> None:
    # five results, the fourth from a stale document; relevance plays no part
    j = Judgement(
        first_ranks=(2, 4, None),
        grades=(1, 1, 1),
        relevant=(False, True, False, True, False),
        stale=(False, False, False, True, False),
    )
    assert [stale_at(j, k) for k in (1, 3, 4, 5, 10)] == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert stale_at(J, 10) == 0.0  # nothing stale came back


def test_stale_at_counts_only_what_came_back() -> None:
    j = judge([Label(doc_id="a")], [res("a#0"), Retrieved("old#0", "old", stale=True)], "chunk")
    assert j.stale == (False, True)
    assert stale_at(j, 1) == 0.0
    assert stale_at(j, 2) == stale_at(j, 100) == 1.0
    assert stale_at(judge([Label(doc_id="a")], [], "chunk"), 5) == 0.0  # nothing came back: nothing stale


def test_only_stale_is_lower_is_better() -> None:
    assert [m for m in metric_names([1, 10]) if lower_is_better(m)] == ["stale@1", "stale@10"]


@pytest.mark.parametrize("fn", [hit_at, recall_at, precision_at, ndcg_at, mrr, stale_at])
def test_no_labels_is_an_error(fn: Callable[[Judgement, int], float]) -> None:
    with pytest.raises(EvalError, match="grade above 0"):
        fn(Judgement((), (), (True, False)), 5)


@pytest.mark.parametrize("fn", [hit_at, recall_at, precision_at, ndcg_at, mrr, stale_at])
@pytest.mark.parametrize("k", [0, -1])
def test_k_below_one_is_an_error(fn: Callable[[Judgement, int], float], k: int) -> None:
    with pytest.raises(EvalError, match="k must be at least 1"):
        fn(J, k)


def test_metric_names_and_compute() -> None:
    names = metric_names([10, 1, 10])
    assert names == [
        "hit@1", "recall@1", "precision@1", "mrr@1", "ndcg@1", "stale@1",
        "hit@10", "recall@10", "precision@10", "mrr@10", "ndcg@10", "stale@10",
        "mrr",
    ]  # fmt: skip
    values = compute(J, [10, 1, 10])
    assert list(values) == names
    assert values["stale@10"] == 0.0
    assert values["hit@10"] == 1.0
    assert values["recall@10"] == pytest.approx(2 / 3)
    assert values["precision@1"] == 0.0
    assert values["mrr"] == 0.5


# -- properties ----------------------------------------------------------------------------------

WORDS = ["refund", "window", "days", "vpn", "error", "seat", "limit"]
DOCS = ["a", "b", "c", "d", "e", "f"]


@st.composite
def results_st(draw: st.DrawFn, min_size: int = 0, max_size: int = 15) -> list[Retrieved]:
    """A ranked list of distinct chunks from a few documents, with short texts over a small vocabulary;
    some documents are stale (every chunk of a document shares its staleness)."""
    stale_docs = draw(st.sets(st.sampled_from(DOCS)))
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(DOCS), st.integers(0, 5)), min_size=min_size, max_size=max_size, unique=True)
    )
    return [
        Retrieved(
            f"{d}#{n}", d, " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=6))), float(-i), d in stale_docs
        )
        for i, (d, n) in enumerate(pairs)
    ]


def label_st(grades: st.SearchStrategy[int]) -> st.SearchStrategy[Label]:
    return st.one_of(
        st.builds(Label, chunk_id=st.builds("{}#{}".format, st.sampled_from(DOCS), st.integers(0, 5)), grade=grades),
        st.builds(Label, doc_id=st.sampled_from(DOCS), grade=grades),
        st.builds(
            Label,
            doc_id=st.sampled_from(DOCS),
            evidence=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(" ".join),
            grade=grades,
        ),
    )


positive_label = label_st(st.integers(1, 3))
any_label = label_st(st.integers(0, 3))
labels_st = st.tuples(positive_label, st.lists(any_label, max_size=6)).map(lambda t: [t[0], *t[1]])
zero_labels_st = any_label.map(lambda label: Label(label.doc_id, label.chunk_id, label.evidence, grade=0))
units = st.sampled_from(["chunk", "doc"])
KS = range(1, 21)


def satisfies(label: Label, r: Retrieved, unit: Unit) -> bool:
    """The matching rules restated independently of eval.matching."""
    if unit == "doc":
        return r.doc_id == (label.chunk_id.rpartition("#")[0] if label.chunk_id else label.doc_id)
    if label.chunk_id:
        return r.chunk_id == label.chunk_id
    return r.doc_id == label.doc_id and (label.evidence is None or label.evidence in r.text)


def at_k(values: dict[str, float], k: int) -> dict[str, float]:
    return {name: v for name, v in values.items() if name.endswith(f"@{k}")}


@given(labels_st, results_st(), units)
def test_every_metric_is_within_zero_and_one(labels: list[Label], results: list[Retrieved], unit: Unit) -> None:
    values = compute(judge(labels, results, unit), KS)
    for name, value in values.items():
        assert 0.0 <= value <= 1.0 + 1e-12, (name, value)


@given(labels_st, results_st(), units)
def test_hit_and_recall_never_fall_as_k_grows(labels: list[Label], results: list[Retrieved], unit: Unit) -> None:
    j = judge(labels, results, unit)
    for fn in (hit_at, recall_at):
        values = [fn(j, k) for k in KS]
        assert values == sorted(values), fn.__name__


@given(labels_st, results_st(), units)
def test_stale_never_falls_as_k_grows_and_flags_exactly_the_stale_top_k(
    labels: list[Label], results: list[Retrieved], unit: Unit
) -> None:
    j = judge(labels, results, unit)
    values = [stale_at(j, k) for k in KS]
    assert values == sorted(values)
    # restated without eval.matching: doc unit ranks documents by their first chunk
    ranked = list(dict.fromkeys(r.doc_id for r in results)) if unit == "doc" else [r.doc_id for r in results]
    stale = {r.doc_id for r in results if r.stale}
    for k in KS:
        assert (stale_at(j, k) == 1.0) == any(d in stale for d in ranked[:k])


@given(labels_st, results_st(), units)
def test_metrics_agree_with_each_other(labels: list[Label], results: list[Retrieved], unit: Unit) -> None:
    j = judge(labels, results, unit)
    for k in KS:
        hit = hit_at(j, k)
        assert recall_at(j, k) <= hit
        assert (precision_at(j, k) > 0) == (hit == 1.0) == (mrr(j, k) > 0) == (ndcg_at(j, k) > 0)
        assert mrr(j, k) <= mrr(j)
    assert recall_at(j, len(results) + 1) == sum(f is not None for f in j.first_ranks) / len(j.first_ranks)


@given(labels_st, results_st(), units)
def test_mrr_is_one_exactly_when_rank_one_is_relevant(
    labels: list[Label], results: list[Retrieved], unit: Unit
) -> None:
    j = judge(labels, results, unit)
    top_relevant = bool(results) and any(satisfies(label, results[0], unit) for label in labels if label.grade > 0)
    assert (mrr(j) == 1.0) == top_relevant
    assert (mrr(j, 1) == 1.0) == top_relevant
    assert (hit_at(j, 1) == 1.0) == top_relevant


@given(labels_st, results_st(min_size=3, max_size=20), st.data())
def test_permuting_below_k_leaves_every_at_k_metric_unchanged(
    labels: list[Label], results: list[Retrieved], data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, len(results) - 2), label="k")
    permuted = results[:k] + data.draw(st.permutations(results[k:]), label="tail")
    before = compute(judge(labels, results, "chunk"), [k])
    after = compute(judge(labels, permuted, "chunk"), [k])
    assert at_k(before, k) == at_k(after, k)
    # in doc unit the same holds for the collapsed ranking: one chunk per document
    one_per_doc = list({r.doc_id: r for r in results}.values())
    doc_permuted = one_per_doc[:k] + data.draw(st.permutations(one_per_doc[k:]), label="doc tail")
    doc_before = compute(judge(labels, one_per_doc, "doc"), [k])
    doc_after = compute(judge(labels, doc_permuted, "doc"), [k])
    assert at_k(doc_before, k) == at_k(doc_after, k)


@given(labels_st, results_st(), units, st.floats(0.001, 1000), st.floats(-100, 100))
def test_scores_do_not_matter_only_the_order(
    labels: list[Label], results: list[Retrieved], unit: Unit, scale: float, shift: float
) -> None:
    rescored = [dataclasses.replace(r, score=r.score * scale + shift) for r in results]
    assert compute(judge(labels, results, unit), KS) == compute(judge(labels, rescored, unit), KS)


@given(labels_st, st.lists(zero_labels_st, min_size=1, max_size=5), results_st(), units)
def test_grade_zero_labels_are_never_counted(
    labels: list[Label], zeros: list[Label], results: list[Retrieved], unit: Unit
) -> None:
    with_zeros = judge([*zeros[:2], *labels, *zeros[2:]], results, unit)
    assert compute(with_zeros, KS) == compute(judge(labels, results, unit), KS)
    c = Case("c", "q", (*labels, *zeros))
    assert len(c.positive) == len([label for label in labels if label.grade > 0])


@given(st.lists(zero_labels_st, min_size=1, max_size=5), results_st(), units)
def test_no_positive_label_raises(zeros: list[Label], results: list[Retrieved], unit: Unit) -> None:
    with pytest.raises(EvalError):
        judge(zeros, results, unit)
    with pytest.raises(EvalError):
        Case("c", "q", tuple(zeros))
    fake = Judgement((), (), tuple(bool(i % 2) for i in range(len(results))))
    for fn in (hit_at, recall_at, precision_at, ndcg_at, mrr, stale_at):
        with pytest.raises(EvalError):
            fn(fake, 1)


@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=8),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    st.integers(0, 6),
    st.integers(1, 12),
)
def test_ndcg_at_most_one_when_one_result_satisfies_several_labels(
    grades: list[int], extra: list[str], rank: int, k: int
) -> None:
    # every label is an evidence label answered by the same chunk, at rank `rank + 1`; more labels may
    # share the next chunk
    words = [f"w{i}" for i in range(len(grades))]
    labels = [Label(doc_id="a", evidence=w, grade=g) for w, g in zip(words, grades, strict=True)]
    labels += [Label(doc_id="b", evidence=w) for w in extra]
    results = [Retrieved(f"z#{i}", "z") for i in range(rank)]
    results += [Retrieved("a#0", "a", " ".join(words)), Retrieved("b#0", "b", " ".join(WORDS))]
    j = judge(labels, results, "chunk")
    assert all(f is not None for f in j.first_ranks)
    value = ndcg_at(j, k)
    assert 0.0 <= value <= 1.0 + 1e-12
    if rank == 0:
        # best grades first from rank 1, then the grade-1 labels of the next chunk: the ideal order
        assert value == pytest.approx(1.0, abs=1e-12)
    else:
        assert value < 1.0


@given(st.lists(st.integers(0, 3), min_size=1, max_size=12), st.integers(1, 15))
def test_ndcg_equals_the_textbook_formula_with_one_label_per_result(gains: list[int], k: int) -> None:
    # BEIR-like: result i is document d_i; labels are the documents with gain > 0
    assume(any(g > 0 for g in gains))
    results = [Retrieved(f"d{i}#0", f"d{i}") for i in range(len(gains))]
    labels = [Label(doc_id=f"d{i}", grade=g) for i, g in enumerate(gains) if g > 0]
    dcg = sum(g / lg(i + 1) for i, g in enumerate(gains[:k]))
    idcg = sum(g / lg(i + 1) for i, g in enumerate(sorted(gains, reverse=True)[:k]))
    for unit in ("chunk", "doc"):
        assert ndcg_at(judge(labels, results, unit), k) == pytest.approx(dcg / idcg, abs=1e-12)
