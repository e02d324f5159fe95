"""Which results satisfy which labels: chunk vs doc unit, evidence after normalisation, collapsing."""

from __future__ import annotations

import pytest

from eval.cases import Label
from eval.errors import EvalError
from eval.matching import Judgement, Retrieved, collapse_to_documents, judge, normalize

from .helpers import res


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("30\u00a0days", "30 days"),  # no-break space
        ("３０ ｄａｙｓ", "30 days"),  # full-width digits and letters
        ("30\u3000days", "30 days"),  # ideographic space
        ("  30 \t\n days  ", "30 days"),  # whitespace runs
        ("Thirty DAYS", "thirty days"),  # case
        ("Straße", "strasse"),  # case folding, not just lower()
        ("ﬁnal", "final"),  # compatibility ligature
        ("", ""),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


# -- chunk unit ----------------------------------------------------------------------------------


def test_chunk_label_is_satisfied_only_by_that_chunk() -> None:
    results = [res("a#0"), res("a#3"), res("b#3")]
    j = judge([Label(chunk_id="a#3")], results, "chunk")
    assert j.first_ranks == (2,)
    assert j.relevant == (False, True, False)


def test_doc_label_is_satisfied_by_any_chunk_of_the_document() -> None:
    results = [res("b#0"), res("a#5"), res("a#1")]
    j = judge([Label(doc_id="a")], results, "chunk")
    assert j.first_ranks == (2,)  # counted once, at the first satisfying rank
    assert j.relevant == (False, True, True)  # but every satisfying chunk is a relevant result


@pytest.mark.parametrize(
    ("evidence", "text"),
    [
        ("30 days", "Annual plans can be refunded within 30 days of purchase."),
        ("30 days", "refunded within 30\u00a0days"),  # NBSP in the chunk
        ("30\u00a0days", "refunded within 30 days"),  # NBSP in the label
        ("30 days", "refunded within ３０ ｄａｙｓ"),  # full-width in the chunk
        ("３０ days", "refunded within 30 days"),  # full-width in the label
        ("30 days", "refunded within 30\n   days"),  # line break inside the evidence
        ("  Thirty   DAYS ", "within thirty days"),  # case and spacing of the label
    ],
)
def test_evidence_matches_after_normalisation(evidence: str, text: str) -> None:
    results = [res("a#0", "the wrong chunk of the right document"), res("a#1", text)]
    j = judge([Label(doc_id="a", evidence=evidence)], results, "chunk")
    assert j.first_ranks == (2,)
    assert j.relevant == (False, True)


def test_evidence_in_another_document_does_not_count() -> None:
    results = [res("b#0", "within 30 days"), res("a#0", "something else")]
    j = judge([Label(doc_id="a", evidence="30 days")], results, "chunk")
    assert j.first_ranks == (None,)
    assert j.relevant == (False, False)


def test_evidence_split_across_chunks_does_not_count() -> None:
    results = [res("a#0", "refunds within 30"), res("a#1", "days of purchase")]
    j = judge([Label(doc_id="a", evidence="30 days")], results, "chunk")
    assert j.first_ranks == (None,)


def test_one_chunk_can_satisfy_several_labels() -> None:
    text = "Refunds within 30 days. Annual plans are prorated."
    labels = [Label(doc_id="a", evidence="30 days"), Label(doc_id="a", evidence="prorated"), Label(chunk_id="a#1")]
    j = judge(labels, [res("z#0"), res("a#1", text)], "chunk")
    assert j.first_ranks == (2, 2, 2)
    assert j.relevant == (False, True)


def test_grade_zero_labels_are_left_out_of_the_judgement() -> None:
    labels = [Label(doc_id="a", grade=0), Label(doc_id="b", grade=3), Label(chunk_id="c#1", grade=0)]
    j = judge(labels, [res("a#0"), res("c#1"), res("b#0")], "chunk")
    assert j == Judgement(first_ranks=(3,), grades=(3,), relevant=(False, False, True), stale=(False, False, False))


def test_no_positive_label_raises() -> None:
    with pytest.raises(EvalError, match="grade above 0"):
        judge([Label(doc_id="a", grade=0)], [res("a#0")], "chunk")
    with pytest.raises(EvalError, match="grade above 0"):
        judge([], [res("a#0")], "doc")


def test_unknown_unit_raises() -> None:
    with pytest.raises(EvalError, match="unit"):
        judge([Label(doc_id="a")], [], "passage")  # type: ignore[arg-type]


def test_empty_results() -> None:
    assert judge([Label(doc_id="a"), Label(chunk_id="b#0")], [], "chunk") == Judgement((None, None), (1, 1), ())


# -- doc unit ------------------------------------------------------------------------------------


def test_collapse_keeps_the_first_occurrence_and_its_order() -> None:
    results = [res("a#2", "x"), res("b#0"), res("a#0", "y"), res("c#1"), res("b#4")]
    assert collapse_to_documents(results) == [results[0], results[1], results[3]]
    assert collapse_to_documents([]) == []


def test_doc_unit_ranks_documents_not_chunks() -> None:
    # chunk ranks: b=3 (a#0, a#1 come first); document ranks: b=2
    results = [res("a#0"), res("a#1"), res("b#0"), res("c#0"), res("b#1")]
    chunk = judge([Label(doc_id="b")], results, "chunk")
    doc = judge([Label(doc_id="b")], results, "doc")
    assert chunk.first_ranks == (3,)
    assert chunk.relevant == (False, False, True, False, True)
    assert doc.first_ranks == (2,)
    assert doc.relevant == (False, True, False)


def test_chunk_label_is_judged_by_its_document_in_doc_unit() -> None:
    results = [res("x#0"), res("billing/refunds#0")]
    label = Label(chunk_id="billing/refunds#3")
    assert judge([label], results, "chunk").first_ranks == (None,)
    assert judge([label], results, "doc").first_ranks == (2,)


def test_evidence_label_is_judged_by_its_document_in_doc_unit() -> None:
    results = [res("a#0", "no answer here")]
    label = Label(doc_id="a", evidence="30 days")
    assert judge([label], results, "chunk").first_ranks == (None,)
    assert judge([label], results, "doc").first_ranks == (1,)


def test_doc_unit_uses_the_result_doc_id_not_the_chunk_id() -> None:
    results = [Retrieved(chunk_id="opaque-1", doc_id="a"), Retrieved(chunk_id="opaque-2", doc_id="b")]
    assert judge([Label(doc_id="b")], results, "doc").first_ranks == (2,)
    assert judge([Label(doc_id="b")], results, "chunk").first_ranks == (2,)


def test_stale_flags_follow_the_ranked_list_after_the_unit_collapse() -> None:
    old = Retrieved("old#0", "old", stale=True)
    results = [res("a#0"), res("a#1"), old, Retrieved("old#1", "old", stale=True), res("b#0")]
    assert judge([Label(doc_id="b")], results, "chunk").stale == (False, False, True, True, False)
    assert judge([Label(doc_id="b")], results, "doc").stale == (False, True, False)
