"""The runner: queries in batches through any retriever, one scored CaseResult per case."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from eval.cases import Case, Label, fingerprint
from eval.errors import EvalError
from eval.matching import Retrieved
from eval.runner import MAX_K, FunctionRetriever, Query, run_set, score_case

from .helpers import case, doc_case, docs, filler, res


class RecordingRetriever:
    """A fake retriever: answers from a table by question and records every batch it was sent."""

    def __init__(self, answers: dict[str, list[Retrieved]], extra: int = 0) -> None:
        self.answers = answers
        self.batches: list[list[Query]] = []
        self.extra = extra

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
        self.batches.append(list(queries))
        return [self.answers.get(q.text, []) + filler(q.text, self.extra) for q in queries]


def test_function_retriever_truncates_to_k() -> None:
    r = FunctionRetriever(lambda _q: docs(*(f"d{i}" for i in range(50))))
    (out,) = r.retrieve([Query("q", k=7)])
    assert [x.doc_id for x in out] == [f"d{i}" for i in range(7)]


def test_queries_carry_question_depth_filters_and_unit() -> None:
    cases = [Case("a", "first", (Label(doc_id="x"),), filters={"tenant": "acme"}), doc_case("b", "y")]
    fake = RecordingRetriever({})
    run_set(cases, fake, set_name="s", ks=(1, 3), unit="doc", depth=20)
    (batch,) = fake.batches
    assert batch[0] == Query("first", 20, {"tenant": "acme"}, "doc")
    assert batch[1] == Query("question b", 20, {}, "doc")


def test_queries_go_in_batches() -> None:
    cases = [doc_case(f"c{i}", "x") for i in range(10)]
    fake = RecordingRetriever({})
    run = run_set(cases, fake, set_name="s", batch_size=4)
    assert [len(b) for b in fake.batches] == [4, 4, 2]
    assert [c.case_id for c in run.cases] == [f"c{i}" for i in range(10)]


def test_depth_defaults_to_the_largest_k_and_cuts_long_answers() -> None:
    cases = [doc_case("a", "x")]
    fake = RecordingRetriever({"question a": docs("x")}, extra=30)
    run = run_set(cases, fake, set_name="s", ks=(5, 1))
    assert fake.batches[0][0].k == 5
    assert len(run.cases[0].retrieved) == 5  # the retriever returned 31; the run keeps depth


def test_mrr_uses_the_whole_depth_while_at_k_metrics_cut() -> None:
    cases = [doc_case("a", "x")]
    ranking = [*filler("a", 14), *docs("x")]
    run = run_set(cases, FunctionRetriever(lambda _q: ranking), set_name="s", ks=(1, 10), depth=20)
    m = run.cases[0].metrics
    assert m["mrr"] == pytest.approx(1 / 15)
    assert m["mrr@10"] == 0.0
    assert m["recall@10"] == 0.0
    assert run.cases[0].first_relevant_rank == 15


@pytest.mark.parametrize(
    ("ks", "depth", "message"),
    [
        ((), None, "k values"),
        ((0, 5), None, "k values"),
        ((MAX_K + 1,), None, "k values"),
        ((1, 10), 5, "depth 5 is below the largest k 10"),
    ],
)
def test_bad_options_raise(ks: tuple[int, ...], depth: int | None, message: str) -> None:
    with pytest.raises(EvalError, match=message):
        run_set([doc_case("a", "x")], FunctionRetriever(lambda _q: []), set_name="s", ks=ks, depth=depth)


def test_empty_set_raises() -> None:
    with pytest.raises(EvalError, match="no cases"):
        run_set([], FunctionRetriever(lambda _q: []), set_name="s")


def test_a_retriever_that_answers_too_few_queries_is_an_error() -> None:
    class Forgetful:
        def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
            return [[] for _ in queries[1:]]

    with pytest.raises(EvalError, match="answered 1 of 2"):
        run_set([doc_case("a", "x"), doc_case("b", "y")], Forgetful(), set_name="s")


def test_run_record_fields() -> None:
    cases = [doc_case("a", "x", category="billing", source="log"), doc_case("b", "y")]
    run = run_set(
        cases,
        FunctionRetriever(lambda _q: docs("x", "y")),
        set_name="handbook",
        ks=(10, 1, 5, 5),
        unit="doc",
        params={"mode": "hybrid"},
    )
    assert run.set_name == "handbook"
    assert run.set_fingerprint == fingerprint(cases)
    assert run.unit == "doc"
    assert run.ks == (1, 5, 10)
    assert run.params == {"mode": "hybrid"}
    assert re.fullmatch(r"\d{8}T\d{12}-[0-9a-f]{6}", run.run_id)  # to the microsecond: sortable
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", run.created_at)
    first = run.cases[0]
    assert (first.case_id, first.question, first.category, first.source) == ("a", "question a", "billing", "log")
    assert first.metrics["hit@1"] == 1.0
    assert run.cases[1].metrics["hit@1"] == 0.0
    assert run.cases[1].metrics["mrr"] == 0.5
    assert run_set(cases, FunctionRetriever(lambda _q: []), set_name="s").run_id != run.run_id


def test_score_case_lists_what_was_missed() -> None:
    c = case(
        "a",
        Label(doc_id="x", evidence="30 days"),
        Label(chunk_id="y#2"),
        Label(doc_id="z"),
        Label(doc_id="w", grade=0),
    )
    ranking = [res("q#0"), res("x#1", "refunds within 30 days"), res("y#1")]
    result = score_case(c, ranking, (1, 3), "chunk")
    assert result.labels == 3  # the grade-0 label is not counted
    assert result.missed == (Label(chunk_id="y#2"), Label(doc_id="z"))
    assert result.first_relevant_rank == 2
    assert result.retrieved == tuple(ranking)
    assert result.metrics["recall@3"] == pytest.approx(1 / 3)
    doc = score_case(c, ranking, (1, 3), "doc")
    assert doc.missed == (Label(doc_id="z"),)  # in doc unit y#1 stands for document y


def test_first_relevant_rank_is_none_when_nothing_matched() -> None:
    result = score_case(doc_case("a", "x"), docs("p", "q"), (1,), "chunk")
    assert result.first_relevant_rank is None
    assert result.missed == (Label(doc_id="x"),)
