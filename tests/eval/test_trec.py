"""Interchange: BEIR/TREC qrels and queries in, TREC run lines out."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from eval.cases import Label
from eval.errors import EvalError
from eval.trec import cases_from_qrels, read_qrels, read_queries, trec_run_lines

from .helpers import doc_case, res, run_with


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_beir_qrels_with_header(tmp_path: Path) -> None:
    path = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t2\n\n3\td1\t0\n")
    assert read_qrels(path) == {"1": {"d1": 1, "d2": 2}, "3": {"d1": 0}}


def test_read_trec_qrels(tmp_path: Path) -> None:
    path = write(tmp_path / "qrels.txt", "401 0 FBIS3-10082 1\n401 0 FBIS3-10169 0\n402 0 FT921-1 2\n")
    assert read_qrels(path) == {"401": {"FBIS3-10082": 1, "FBIS3-10169": 0}, "402": {"FT921-1": 2}}


def test_read_qrels_first_line_is_data_when_numeric(tmp_path: Path) -> None:
    assert read_qrels(write(tmp_path / "q.tsv", "1\td1\t1\n")) == {"1": {"d1": 1}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("query-id\tcorpus-id\tscore\n1\td1\n", r"q\.tsv:2: expected 3 \(BEIR\) or 4 \(TREC\) columns, got 2"),
        ("1 0 d1 1\n1 0 d2 1 extra\n", r"q\.tsv:2: expected 3 .* got 5"),
        ("query-id\tcorpus-id\tscore\n1\td1\thigh\n", r"q\.tsv:2: relevance 'high' is not an integer"),
    ],
)
def test_read_qrels_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(EvalError, match=message):
        read_qrels(write(tmp_path / "q.tsv", text))


def test_read_queries_jsonl_and_tsv(tmp_path: Path) -> None:
    jsonl = write(
        tmp_path / "queries.jsonl",
        json.dumps({"_id": "1", "text": "0-dimensional biomaterials", "metadata": {}})
        + "\n\n"
        + json.dumps({"_id": 3, "text": "what is BM25"})
        + "\n",
    )
    assert read_queries(jsonl) == {"1": "0-dimensional biomaterials", "3": "what is BM25"}
    tsv = write(tmp_path / "queries.tsv", "1\tfirst query\n2\twith\ta tab\n")
    assert read_queries(tsv) == {"1": "first query", "2": "with\ta tab"}
    with pytest.raises(EvalError, match=r"bad\.tsv:1: not a query line"):
        read_queries(write(tmp_path / "bad.tsv", "no tab here\n"))
    with pytest.raises(EvalError, match=r"bad\.jsonl:1: not a query line"):
        read_queries(write(tmp_path / "bad.jsonl", '{"id": "1"}\n'))


def test_cases_from_qrels_keeps_grade_zero_and_skips_queries_without_positives() -> None:
    qrels = {"10": {"d2": 2, "d1": 0}, "2": {"d9": 1}, "3": {"d1": 0, "d4": 0}}
    queries = {"2": "second", "3": "third", "10": "tenth", "99": "unjudged"}
    cases = cases_from_qrels(qrels, queries, category="scifact")
    assert [c.id for c in cases] == ["2", "10"]  # numeric-looking ids in numeric order; "3" has no positive
    tenth = cases[1]
    assert tenth.question == "tenth"
    assert tenth.relevant == (Label(doc_id="d1", grade=0), Label(doc_id="d2", grade=2))
    assert tenth.positive == (Label(doc_id="d2", grade=2),)
    assert (tenth.category, tenth.source) == ("scifact", "qrels")


def test_cases_from_qrels_needs_every_judged_query() -> None:
    with pytest.raises(EvalError, match="query '7' is judged in the qrels but missing"):
        cases_from_qrels({"7": {"d": 1}}, {})


def parse(line: str) -> tuple[str, str, str, int, float, str]:
    qid, q0, docno, rank, score, tag = line.split(" ")
    return qid, q0, docno, int(rank), float(score), tag


def test_trec_run_lines_doc_unit_collapses_with_decreasing_scores() -> None:
    cases = [doc_case("q1", "a"), doc_case("q2", "b")]
    rankings = {
        "q1": [res("a#2", score=0.5), res("b#0", score=0.5), res("a#0", score=0.4), res("c#1", score=0.9)],
        "q2": [res("b#3")],
    }
    run = run_with(cases, rankings, ks=(1, 10), unit="doc")
    lines = list(trec_run_lines(run, tag="test"))
    assert lines == [
        "q1 Q0 a 1 3 test",
        "q1 Q0 b 2 2 test",
        "q1 Q0 c 3 1 test",
        "q2 Q0 b 1 1 test",
    ]


def test_trec_run_lines_chunk_unit_keeps_chunks() -> None:
    cases = [doc_case("q1", "a")]
    ranking = [res("a#2"), res("b#0"), res("a#0")]
    lines = [parse(line) for line in trec_run_lines(run_with(cases, {"q1": ranking}, ks=(1, 10)))]
    assert [(docno, rank) for _, _, docno, rank, _, _ in lines] == [("a#2", 1), ("b#0", 2), ("a#0", 3)]
    assert {(qid, q0, tag) for qid, q0, _, _, _, tag in lines} == {("q1", "Q0", "plumbline")}


def test_trec_run_scores_are_strictly_decreasing_whatever_the_retriever_scored() -> None:
    cases = [doc_case("q", "a")]
    ranking = [res(f"d{i}#0", score=1.0) for i in range(30)]  # all tied: trec_eval would reorder by docno
    for unit in ("chunk", "doc"):
        lines = [parse(line) for line in trec_run_lines(run_with(cases, {"q": ranking}, ks=(30,), unit=unit))]
        scores = [score for *_, score, _ in lines]
        assert all(a > b for a, b in itertools.pairwise(scores))
        assert [rank for _, _, _, rank, _, _ in lines] == list(range(1, 31))
        # sorting as trec_eval does (score descending, then docno descending) keeps our order
        assert sorted(lines, key=lambda x: (-x[4], x[2])) == lines


def test_trec_run_lines_for_an_empty_ranking() -> None:
    assert list(trec_run_lines(run_with([doc_case("q", "a")], {}, ks=(5,)))) == []
