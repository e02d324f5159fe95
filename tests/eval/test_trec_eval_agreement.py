"""Differential tests: with unit="doc" on BEIR-style qrels every metric equals pytrec_eval's to 1e-9.

SciFact (test split) is ranked by a BM25 in conftest.py, at document level and at chunk level (so the
collapse to documents is exercised too); graded qrels, grade-0 judgements and chunk-level qrels are
covered by a Hypothesis property over random data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.cases import Case, Label
from eval.matching import Retrieved, Unit
from eval.runner import FunctionRetriever, Query, Run, run_set
from eval.trec import cases_from_qrels, trec_run_lines

from .conftest import Scifact, SparseBm25

KS = (1, 3, 5, 10, 100)
TOL = 1e-9
TrecRun = dict[str, dict[str, float]]


def measures(ks: Sequence[int]) -> set[str]:
    cut = ",".join(map(str, ks))
    return {f"recall.{cut}", f"P.{cut}", f"ndcg_cut.{cut}", f"success.{cut}", "recip_rank"}


def ours_vs_theirs(
    ours: Mapping[str, float], theirs: Mapping[str, float], ks: Sequence[int]
) -> dict[str, tuple[float, float]]:
    """Every pair of (our value, pytrec_eval's value) that should be equal, by our metric name."""
    pairs = {"mrr": (ours["mrr"], theirs["recip_rank"])}
    for k in ks:
        pairs[f"hit@{k}"] = (ours[f"hit@{k}"], theirs[f"success_{k}"])
        pairs[f"recall@{k}"] = (ours[f"recall@{k}"], theirs[f"recall_{k}"])
        pairs[f"precision@{k}"] = (ours[f"precision@{k}"], theirs[f"P_{k}"])
        pairs[f"ndcg@{k}"] = (ours[f"ndcg@{k}"], theirs[f"ndcg_cut_{k}"])
    return pairs


def run_from_lines(lines: Sequence[str]) -> TrecRun:
    out: TrecRun = {}
    for line in lines:
        qid, _, docno, _, score, _ = line.split()
        out.setdefault(qid, {})[docno] = float(score)
    return out


def independent_doc_run(run: Run) -> TrecRun:
    """The run as pytrec_eval should see it, built here without eval.trec or eval.matching."""
    out: TrecRun = {}
    for c in run.cases:
        ranked: list[str] = []
        for r in c.retrieved:
            if r.doc_id not in ranked:
                ranked.append(r.doc_id)
        out[c.case_id] = {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}
    return out


def cut(trec_run: TrecRun, k: int) -> TrecRun:
    return {q: dict(sorted(docs.items(), key=lambda x: -x[1])[:k]) for q, docs in trec_run.items()}


def assert_agree(run: Run, qrels: Mapping[str, Mapping[str, int]], trec_run: TrecRun) -> int:
    """Compare every query and metric, and mrr@k against recip_rank of the run cut at k; returns the count."""
    evaluator = pytrec_eval.RelevanceEvaluator({q: dict(qrels[q]) for q in trec_run}, measures(run.ks))
    theirs = evaluator.evaluate(trec_run)
    mrr_at = {
        k: pytrec_eval.RelevanceEvaluator({q: dict(qrels[q]) for q in trec_run}, {"recip_rank"}).evaluate(
            cut(trec_run, k)
        )
        for k in run.ks
    }
    compared = 0
    disagreements = []
    for c in run.cases:
        if not trec_run.get(c.case_id):
            assert all(v == 0.0 for v in c.metrics.values()), c.case_id  # pytrec_eval skips empty rankings
            continue
        pairs = ours_vs_theirs(c.metrics, theirs[c.case_id], run.ks)
        for k in run.ks:
            pairs[f"mrr@{k}"] = (c.metrics[f"mrr@{k}"], mrr_at[k][c.case_id]["recip_rank"])
        # stale@k (the freshness guard) has no trec_eval equivalent; nothing here is stale
        assert set(pairs) == {m for m in c.metrics if not m.startswith("stale@")}
        assert all(c.metrics[f"stale@{k}"] == 0.0 for k in run.ks)
        for name, (mine, reference) in pairs.items():
            compared += 1
            if abs(mine - reference) > TOL:
                disagreements.append((c.case_id, name, mine, reference))
    assert disagreements == []
    return compared


def bm25_retriever(bm25: SparseBm25, ids: Sequence[tuple[str, str, str]]) -> FunctionRetriever:
    def search(q: Query) -> list[Retrieved]:
        return [Retrieved(ids[i][0], ids[i][1], ids[i][2], score) for i, score in bm25.top(q.text, q.k)]

    return FunctionRetriever(search)


# -- SciFact -------------------------------------------------------------------------------------


def test_scifact_cases_from_qrels(scifact: Scifact) -> None:
    assert len(scifact.cases) == 300
    assert sum(len(c.positive) for c in scifact.cases) == 339
    assert all(label.grade == 1 for c in scifact.cases for label in c.relevant)


def test_scifact_documents_agree_with_pytrec_eval(
    scifact: Scifact, scifact_doc_bm25: tuple[list[str], SparseBm25]
) -> None:
    doc_ids, bm25 = scifact_doc_bm25
    ids = [(f"{d}#0", d, "") for d in doc_ids]
    run = run_set(scifact.cases, bm25_retriever(bm25, ids), set_name="scifact", ks=KS, unit="doc")
    # a realistic ranking: BM25 on SciFact scores nDCG@10 about 0.66, R@100 about 0.9 (REFERENCE_NUMBERS.md)
    ndcg10 = sum(c.metrics["ndcg@10"] for c in run.cases) / len(run.cases)
    recall100 = sum(c.metrics["recall@100"] for c in run.cases) / len(run.cases)
    assert 0.6 < ndcg10 < 0.72
    assert 0.8 < recall100 < 0.95
    trec_run = independent_doc_run(run)
    assert run_from_lines(list(trec_run_lines(run))) == trec_run
    assert assert_agree(run, scifact.qrels, trec_run) == 300 * (5 * len(KS) + 1)


def test_scifact_chunks_collapsed_to_documents_agree_with_pytrec_eval(
    scifact: Scifact, scifact_chunk_bm25: tuple[list[tuple[str, str, str]], SparseBm25]
) -> None:
    chunks, bm25 = scifact_chunk_bm25
    run = run_set(scifact.cases, bm25_retriever(bm25, chunks), set_name="scifact", ks=KS, unit="doc", depth=150)
    # the collapse matters here: many rankings hold several chunks of one document
    collapsed = [len({r.doc_id for r in c.retrieved}) for c in run.cases]
    assert sum(n < 150 for n in collapsed) > 250
    trec_run = run_from_lines(list(trec_run_lines(run)))
    assert trec_run == independent_doc_run(run)
    assert assert_agree(run, scifact.qrels, trec_run) > 0


def test_scifact_subset_with_a_pseudo_random_ranking(scifact: Scifact) -> None:
    """Relevant documents mixed into a deterministic pseudo-random list at known ranks."""
    doc_ids = sorted({d for judged in scifact.qrels.values() for d in judged} | set(list(scifact.corpus)[:500]))
    by_question = {c.question: c for c in scifact.cases[:50]}

    def mix(q: Query) -> list[Retrieved]:
        c = by_question[q.text]
        seed = sum(map(ord, c.id))
        others = [d for d in doc_ids if d not in {label.doc_id for label in c.relevant}]
        ranked = [others[(seed * 7919 + i * 104729) % len(others)] for i in range(q.k)]
        ranked = list(dict.fromkeys(ranked))
        for n, label in enumerate(c.relevant):
            ranked.insert(min(len(ranked), (seed + 13 * n) % 40), label.doc_id or "")
        return [Retrieved(f"{d}#0", d) for d in ranked]

    run = run_set(list(by_question.values()), FunctionRetriever(mix), set_name="mixed", ks=KS, unit="doc")
    assert assert_agree(run, scifact.qrels, independent_doc_run(run)) == 50 * (5 * len(KS) + 1)


# -- graded and chunk-level qrels, as a property ------------------------------------------------

DOCS = [f"d{i}" for i in range(12)]


@st.composite
def qrels_and_ranking(draw: st.DrawFn) -> tuple[dict[str, int], list[tuple[str, int]]]:
    judged = draw(st.dictionaries(st.sampled_from(DOCS), st.integers(0, 3), min_size=1, max_size=8))
    if not any(g > 0 for g in judged.values()):
        judged[draw(st.sampled_from(sorted(judged)))] = draw(st.integers(1, 3))
    # a chunk ranking: (document, chunk number) pairs, documents may repeat
    ranking = draw(st.lists(st.tuples(st.sampled_from(DOCS), st.integers(0, 2)), min_size=1, max_size=25, unique=True))
    return judged, ranking


@settings(max_examples=150, deadline=None)
@given(st.lists(qrels_and_ranking(), min_size=1, max_size=4), st.sampled_from(["doc", "chunk"]))
def test_graded_qrels_agree_with_pytrec_eval(
    data: list[tuple[dict[str, int], list[tuple[str, int]]]], unit: Unit
) -> None:
    ks = (1, 2, 3, 5, 10)
    rankings: dict[str, list[Retrieved]] = {}
    if unit == "doc":
        qrels = {f"q{i}": judged for i, (judged, _) in enumerate(data)}
        cases = cases_from_qrels(qrels, {q: f"question {q}" for q in qrels})
        for i, (_, ranking) in enumerate(data):
            rankings[f"q{i}"] = [Retrieved(f"{d}#{n}", d) for d, n in ranking]
    else:
        # chunk unit, chunk labels: the same numbers with chunk ids in place of document ids
        qrels = {f"q{i}": {f"{d}#0": g for d, g in judged.items()} for i, (judged, _) in enumerate(data)}
        cases = [
            Case(q, f"question {q}", tuple(Label(chunk_id=c, grade=g) for c, g in sorted(judged.items())))
            for q, judged in qrels.items()
        ]
        for i, (_, ranking) in enumerate(data):
            rankings[f"q{i}"] = [Retrieved(f"{d}#{n}", d) for d, n in ranking]
    by_question = {c.question: c.id for c in cases}
    run = run_set(cases, FunctionRetriever(lambda q: rankings[by_question[q.text]]), set_name="p", ks=ks, unit=unit)
    trec_run = run_from_lines(list(trec_run_lines(run)))
    assert assert_agree(run, qrels, trec_run) == len(cases) * (5 * len(ks) + 1)
