"""Corpus hygiene, the pure half: distractor reports (one run, several), near-duplicate groups, the what-if
comparison and the CLI table."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.cases import Case, Label
from eval.distractors import (
    DistractorReport,
    DocSketch,
    WhatIf,
    distractor_report,
    distractor_report_over,
    duplicate_groups,
    format_distractors,
    jaccard,
    shingles,
    what_if,
)
from eval.errors import EvalError
from eval.matching import Retrieved
from eval.runner import CaseResult, FunctionRetriever, Query, Run, run_set

K = 5
DEPTH = 10


def r(chunk_id: str, stale: bool = False) -> Retrieved:
    return Retrieved(chunk_id, chunk_id.rpartition("#")[0], stale=stale)


def cases(n: int = 10) -> list[Case]:
    """Case ci answers with document ans/i; the first half billing, the rest it."""
    return [
        Case(f"c{i}", f"question {i}", (Label(doc_id=f"ans/{i}"),), category="billing" if i < n // 2 else "it")
        for i in range(n)
    ]


def crowded(i: int) -> list[Retrieved]:
    """Cases 0-7: near/a (twice, once stale), near/b and a noise document take 4 of the 5 slots, and 2 answering
    chunks sit below k. Cases 8-9: only near/b crowds, and nothing answering is below k."""
    if i < 8:
        return [
            r("near/a#0"),
            r(f"ans/{i}#0"),
            r("near/b#0"),
            r("near/a#1", stale=True),
            r(f"noise/{i}#0"),
            r(f"ans/{i}#1"),
            r(f"ans/{i}#2"),
            r(f"noise/{i}#1"),
        ]
    return [r(f"ans/{i}#0"), r("near/b#0"), r(f"ans/{i}#1"), r(f"ans/{i}#2"), r(f"ans/{i}#3")]


def pruned_ranking(i: int) -> list[Retrieved]:
    """`crowded` with near/a and near/b excluded."""
    return [x for x in crowded(i) if not x.doc_id.startswith("near/")]


def run_of(ranking: object, n: int = 10, run_id: str = "base") -> Run:
    by_question = {c.question: int(c.id[1:]) for c in cases(n)}
    fn = ranking  # a function of the case number

    def answer(q: Query) -> list[Retrieved]:
        return fn(by_question[q.text])  # type: ignore[operator,no-any-return]

    return run_set(cases(n), FunctionRetriever(answer), set_name="s", ks=(1, K), depth=DEPTH, run_id=run_id)


# --- the report ------------------------------------------------------------------------------------------------------


def test_the_two_near_topic_documents_top_the_report_with_exact_counts() -> None:
    report = distractor_report(run_of(crowded))
    top, second = report.rows[:2]
    assert top.doc_id == "near/b"  # more cases (10) beats more slots (16)
    assert (top.cases, top.slots, top.pushed, top.stale_slots) == (10, 10, 8, 0)
    assert dict(top.categories) == {"billing": 5, "it": 5}
    assert second.doc_id == "near/a"
    assert (second.cases, second.slots, second.pushed, second.stale_slots) == (8, 16, 16, 8)
    assert dict(second.categories) == {"billing": 5, "it": 3}
    assert dict(second.chunks) == {"near/a#0": 8, "near/a#1": 8}
    assert second.example_cases == ("c0", "c1", "c2")
    # the noise documents crowd one case each, one slot, and push min(1, 2) = 1
    assert [(x.cases, x.slots, x.pushed) for x in report.rows[2:]] == [(1, 1, 1)] * 8
    assert [x.doc_id for x in report.rows[2:]] == sorted(f"noise/{i}" for i in range(8))


def test_report_level_totals_and_shares() -> None:
    run = run_of(crowded)
    report = distractor_report(run)
    assert (report.k, report.cases, report.skipped, report.runs) == (K, 10, 0, ("base",))
    assert (report.slots, report.top_k_slots, report.stale_slots, report.documents) == (34, 50, 8, 10)
    # each case's hits counted once: cases 0-7 min(4 slots, 2 below) = 2, cases 8-9 none below
    assert report.pushed == 16
    precision = sum(c.metrics[f"precision@{K}"] for c in run.cases) / len(run.cases)
    assert report.share == pytest.approx(1 - precision) == pytest.approx(0.68)
    shares = {c.name: (c.cases, c.slots, c.top_k_slots) for c in report.by_category}
    assert shares == {"billing": (5, 20, 25), "it": (5, 14, 25)}
    assert [c.name for c in report.by_category] == ["billing", "it"]  # the larger share first


def test_only_the_top_k_counts_and_pushed_is_capped_by_what_was_below() -> None:
    # at k=1 only the first result takes a slot: near/a in cases 0-7, none in 8-9 (the answer is first)
    report = distractor_report(run_of(crowded), k=1)
    assert [(x.doc_id, x.cases, x.slots) for x in report.rows] == [("near/a", 8, 8)]
    # below k=1 in cases 0-7: ans#0, ans#1, ans#2 answer; near/a took one slot, so it pushed one hit per case
    assert report.rows[0].pushed == 8
    assert report.pushed == 8


def test_answering_results_of_the_same_document_are_not_distractors() -> None:
    def ranking(i: int) -> list[Retrieved]:
        return [r(f"ans/{i}#0"), r(f"ans/{i}#1"), r("other#0")]

    report = distractor_report(run_of(ranking, n=2))
    assert [x.doc_id for x in report.rows] == ["other"]


def test_chunks_and_examples_are_truncated_and_limit_cuts_rows() -> None:
    def ranking(i: int) -> list[Retrieved]:
        return [r(f"big#{j}") for j in range(7 if i == 0 else 1)] + [r(f"ans/{i}#0")]

    run = run_set(
        cases(6),
        FunctionRetriever(lambda q: ranking(int(q.text.split()[-1]))),
        set_name="s",
        ks=(10,),
    )
    report = distractor_report(run, limit=1)
    row = report.rows[0]
    assert (row.doc_id, row.cases, row.slots) == ("big", 6, 12)
    assert list(row.chunks.items()) == [("big#0", 6), ("big#1", 1), ("big#2", 1), ("big#3", 1), ("big#4", 1)]
    assert row.example_cases == ("c0", "c1", "c2")
    assert len(report.rows) == 1
    assert report.documents == 1


def test_limit_keeps_the_first_rows_and_says_how_many_more() -> None:
    report = distractor_report(run_of(crowded), limit=2)
    assert [x.doc_id for x in report.rows] == ["near/b", "near/a"]
    assert report.documents == 10
    assert "8 more distractor document(s) not listed" in report.notes
    assert report.slots == 34  # totals cover every document, listed or not


def test_runs_stored_before_relevance_was_kept_are_skipped_and_counted() -> None:
    run = run_of(crowded)
    old = replace(run, cases=tuple(replace(c, relevant=None) for c in run.cases[:4]) + run.cases[4:])
    report = distractor_report(old)
    assert (report.cases, report.skipped, report.top_k_slots) == (6, 4, 30)
    assert any("stored before relevance was kept: rerun" in n for n in report.notes)
    near_b = next(x for x in report.rows if x.doc_id == "near/b")
    assert near_b.cases == 6
    none_known = distractor_report(replace(run, cases=tuple(replace(c, relevant=None) for c in run.cases)))
    assert (none_known.cases, none_known.skipped, none_known.rows) == (0, 10, ())
    assert "no distractors" in format_distractors(none_known)


def test_inconsistent_flags_and_bad_options_are_errors() -> None:
    run = run_of(crowded)
    broken = replace(run, cases=(replace(run.cases[0], relevant=(True,)), *run.cases[1:]))
    with pytest.raises(EvalError, match="relevance flags for"):
        distractor_report(broken)
    with pytest.raises(EvalError, match="k must be between"):
        distractor_report(run, k=K + 1)
    with pytest.raises(EvalError, match="limit"):
        distractor_report(run, limit=0)
    with pytest.raises(EvalError, match="no runs"):
        distractor_report_over([])
    other_k = replace(run_of(crowded, run_id="other"), ks=(1,))
    with pytest.raises(EvalError, match="pass k"):
        distractor_report_over([run, other_k])


def test_over_several_runs_counts_are_summed_and_runs_counted() -> None:
    first = run_of(crowded, run_id="r1")
    second = run_of(crowded, run_id="r2")
    third = run_of(pruned_ranking, run_id="r3")  # near/a and near/b excluded here
    report = distractor_report_over([first, second, third])
    rows = {x.doc_id: x for x in report.rows}
    assert (rows["near/b"].cases, rows["near/b"].slots, rows["near/b"].pushed, rows["near/b"].runs) == (20, 20, 16, 2)
    assert (rows["near/a"].cases, rows["near/a"].slots, rows["near/a"].stale_slots, rows["near/a"].runs) == (
        16,
        32,
        16,
        2,
    )
    assert dict(rows["near/a"].chunks) == {"near/a#0": 16, "near/a#1": 16}
    assert rows["noise/0"].runs == 3
    assert report.runs == ("r1", "r2", "r3")
    assert (report.cases, report.top_k_slots) == (30, 150)
    single = [distractor_report(x, limit=100) for x in (first, second, third)]
    assert report.slots == sum(x.slots for x in single)
    assert report.pushed == sum(x.pushed for x in single)


def test_report_json_round_trip() -> None:
    report = distractor_report_over([run_of(crowded, run_id="r1"), run_of(crowded, run_id="r2")], limit=3)
    obj = json.loads(json.dumps(report.to_json()))
    assert DistractorReport.from_json(obj) == report
    assert obj["share"] == pytest.approx(0.68)
    assert obj["distractors"][0]["doc_id"] == "near/b"


# --- Hypothesis: totals are the rows' sums; nothing appears that never crowded ----------------------------------------

POOL = ("a", "b", "c", "d")


@st.composite
def random_runs(draw: st.DrawFn) -> tuple[list[Run], int]:
    depth = draw(st.integers(1, 6))
    k = draw(st.integers(1, depth))
    runs = []
    for n in range(draw(st.integers(1, 3))):
        results = []
        for c in range(draw(st.integers(0, 5))):
            length = draw(st.integers(0, depth))
            retrieved = tuple(
                Retrieved(f"{d}#{draw(st.integers(0, 2))}", d, stale=draw(st.booleans()))
                for d in draw(st.lists(st.sampled_from(POOL), min_size=length, max_size=length))
            )
            known = draw(st.booleans())
            flags = tuple(draw(st.lists(st.booleans(), min_size=length, max_size=length))) if known else None
            category = draw(st.sampled_from(("x", "y")))
            results.append(CaseResult(f"c{c}", "q", category, "s", {}, 1, None, (), retrieved, flags))
        runs.append(Run(f"r{n}", "s", "f", "t", "chunk", (depth,), {}, tuple(results)))
    return runs, k


@settings(max_examples=200, deadline=None)
@given(random_runs())
def test_totals_equal_the_sum_of_rows_and_only_crowding_documents_appear(drawn: tuple[list[Run], int]) -> None:
    runs, k = drawn
    report = distractor_report_over(runs, k=k, limit=1000)
    assert report.documents == len(report.rows)
    assert report.slots == sum(x.slots for x in report.rows)
    assert report.stale_slots == sum(x.stale_slots for x in report.rows)
    assert report.slots == sum(c.slots for c in report.by_category)
    assert report.cases == sum(c.cases for c in report.by_category)
    assert report.pushed <= sum(x.pushed for x in report.rows)
    crowding: Counter[str] = Counter()
    for run in runs:
        for c in run.cases:
            if c.relevant is not None:
                crowding.update(x.doc_id for x, ok in zip(c.retrieved[:k], c.relevant[:k], strict=True) if not ok)
    assert {x.doc_id: x.slots for x in report.rows} == dict(crowding)
    for x in report.rows:
        assert x.cases == sum(x.categories.values())
        assert sum(x.chunks.values()) <= x.slots
        assert 1 <= x.runs <= len(runs)
        assert x.pushed <= x.slots
    keys = [(-x.cases, -x.slots, x.doc_id) for x in report.rows]
    assert keys == sorted(keys)


# --- near-duplicates -------------------------------------------------------------------------------------------------

TEXT = (
    "Annual plans can be refunded in full within thirty days of purchase. After thirty days the refund is "
    "prorated to the remaining whole months, minus any discount that was applied at checkout."
)
EDITED = TEXT + " Contact billing support for help."
OTHER = (
    "Monthly invoices are emailed on the first business day. The invoice lists every seat, the plan, taxes "
    "and credits, and a link to pay by card or bank transfer within fourteen days."
)
HEADS = ("Billing > Refunds", "Billing")


def test_same_headings_and_mostly_the_same_text_are_grouped() -> None:
    a, b = shingles(TEXT), shingles(EDITED)
    assert 0.8 <= jaccard(a, b) < 0.9  # the headings rule, not the text-only one, groups them
    docs = {"new": DocSketch(EDITED, HEADS), "old": DocSketch(TEXT, tuple(reversed(HEADS))), "x": DocSketch(OTHER)}
    assert duplicate_groups(docs) == [("new", "old")]
    # different headings: the same pair is below the text-only threshold
    assert duplicate_groups({"new": DocSketch(EDITED, HEADS), "old": DocSketch(TEXT, ("FAQ",))}) == []
    # no headings on either is not "the same headings"
    assert duplicate_groups({"new": DocSketch(EDITED), "old": DocSketch(TEXT)}) == []
    # the threshold is the caller's
    assert duplicate_groups({"new": DocSketch(EDITED, HEADS), "old": DocSketch(TEXT, HEADS)}, jaccard=0.95) == []


def test_same_headings_different_text_are_not_grouped() -> None:
    assert duplicate_groups({"a": DocSketch(TEXT, HEADS), "b": DocSketch(OTHER, HEADS)}) == []


def test_text_alone_groups_at_090_whatever_the_headings() -> None:
    long_text = TEXT + " " + OTHER
    long_edit = long_text + " Thanks."
    assert jaccard(shingles(long_text), shingles(long_edit)) >= 0.9
    assert duplicate_groups({"a": DocSketch(long_text, ("A",)), "b": DocSketch(long_edit)}) == [("a", "b")]


def test_near_identical_vectors_are_grouped_and_others_not() -> None:
    docs = {
        "a": DocSketch("one text", (), [1.0, 0.0, 0.0]),
        "b": DocSketch("another text entirely", (), [0.99, 0.05, 0.0]),
        "c": DocSketch("a third", (), [0.0, 1.0, 0.0]),
        "d": DocSketch("no vector"),
        "z": DocSketch("zero vector", (), [0.0, 0.0, 0.0]),
    }
    assert duplicate_groups(docs) == [("a", "b")]
    assert duplicate_groups(docs, cosine=0.999) == []
    with pytest.raises(EvalError, match="different lengths"):
        duplicate_groups({"a": DocSketch("x", (), [1.0]), "b": DocSketch("y", (), [1.0, 0.0])})
    with pytest.raises(EvalError, match="cosine"):
        duplicate_groups(docs, cosine=0)


def test_cjk_documents_are_compared_by_character_shingles() -> None:
    zh = "年度套餐在购买后三十天内可以全额退款超过三十天后按剩余整月比例退款并扣除结账时使用的折扣"
    zh_edited = zh + "请联系支持"
    zh_other = "月度发票在每月第一个工作日通过电子邮件发送发票列出每个席位套餐税费和抵扣"
    assert len(shingles(zh)) == len(zh) - 4  # one shingle per character window, though there are no spaces
    assert 0.8 <= jaccard(shingles(zh), shingles(zh_edited)) < 0.9
    docs = {"zh": DocSketch(zh, HEADS), "zh2": DocSketch(zh_edited, HEADS), "zh3": DocSketch(zh_other, HEADS)}
    assert duplicate_groups(docs) == [("zh", "zh2")]


def test_groups_are_transitive_sorted_and_deterministic() -> None:
    docs = {
        "d": DocSketch("x", (), [1.0, 0.0]),
        "b": DocSketch("y", (), [0.98, 0.2]),  # near d, and near a; a and d are not near each other
        "a": DocSketch("z", (), [0.9, 0.43]),
        "q": DocSketch(TEXT, HEADS),
        "p": DocSketch(EDITED, HEADS),
    }
    assert duplicate_groups(docs) == [("a", "b", "d"), ("p", "q")]
    assert duplicate_groups(dict(reversed(list(docs.items())))) == duplicate_groups(docs)


WORDS = ("alpha", "beta", "gamma", "delta", "eps")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12), min_size=2, max_size=6),
    st.lists(st.sampled_from(((), ("H",), ("G",))), min_size=6, max_size=6),
    st.sampled_from((0.5, 0.8, 0.95)),
)
def test_duplicate_groups_agree_with_checking_every_pair(
    texts: list[list[str]], heads: list[tuple[str, ...]], threshold: float
) -> None:
    docs = {f"d{i}": DocSketch(" ".join(t), heads[i]) for i, t in enumerate(texts)}
    # the brute force: every pair, the three rules, then connected components
    ids = sorted(docs)
    edges = set()
    for x, y in itertools.combinations(ids, 2):
        sim = jaccard(shingles(docs[x].text), shingles(docs[y].text))
        same = bool(docs[x].headings) and set(docs[x].headings) == set(docs[y].headings)
        if sim >= max(threshold, 0.9) or (same and sim >= threshold):
            edges.add((x, y))
    component = {d: {d} for d in ids}
    for x, y in edges:
        merged = component[x] | component[y]
        for d in merged:
            component[d] = merged
    expected = sorted({tuple(sorted(c)) for c in component.values() if len(c) > 1})
    assert duplicate_groups(docs, jaccard=threshold) == expected


# --- what-if ---------------------------------------------------------------------------------------------------------


def test_excluding_the_distractors_recovers_precision_significantly() -> None:
    base, pruned = run_of(crowded), run_of(pruned_ranking, run_id="pruned")
    result = what_if(base, pruned)
    p = result.metric(f"precision@{K}")
    # cases 0-7: 1/5 -> 3/5 (ans#0, ans#1, ans#2 in the top 5); cases 8-9 unchanged at 4/5
    assert p.base == pytest.approx(0.32)
    assert p.pruned == pytest.approx((8 * 0.6 + 2 * 0.8) / 10)
    assert p.delta == pytest.approx(0.32)
    assert p.p_value is not None
    assert p.p_value < 0.01
    assert p.significant
    assert p.verdict.endswith("excluding them helps")
    assert p.verdict.startswith(f"precision@{K} 0.320 → 0.640 (+0.320, p=")
    stale = result.metric(f"stale@{K}")  # near/a#1 was stale: lower is better, and it fell
    assert (stale.base, stale.pruned, stale.lower_is_better) == (0.8, 0.0, True)
    assert stale.significant
    assert stale.verdict.endswith("excluding them helps")
    recall = result.metric(f"recall@{K}")  # the answer was in the top 5 either way
    assert recall.p_value is None
    assert recall.verdict.endswith("no case changed")
    assert result.key_metrics == tuple(f"{m}@{K}" for m in ("precision", "recall", "ndcg", "mrr", "stale"))
    assert len(result.verdicts) == 5
    cats = {c.name: c for c in result.by_category}
    assert (cats["billing"].cases, cats["it"].cases) == (5, 5)
    assert cats["billing"].delta[f"precision@{K}"] == pytest.approx(0.4)
    assert cats["it"].delta[f"precision@{K}"] == pytest.approx((3 * 0.4) / 5)
    assert cats["it"].base[f"precision@{K}"] == pytest.approx((3 * 0.2 + 2 * 0.8) / 5)


def test_excluding_answering_documents_hurts_significantly() -> None:
    result = what_if(run_of(pruned_ranking), run_of(crowded, run_id="worse"))
    p = result.metric(f"precision@{K}")
    assert p.delta == pytest.approx(-0.32)
    assert p.significant
    assert p.verdict.endswith("excluding them hurts")


def test_noise_is_not_significant() -> None:
    def up_or_down(i: int) -> list[Retrieved]:
        return pruned_ranking(i) if i % 2 == 0 else crowded(i)

    def down_or_up(i: int) -> list[Retrieved]:
        return crowded(i) if i % 2 == 0 else pruned_ranking(i)

    result = what_if(run_of(up_or_down, n=8), run_of(down_or_up, n=8, run_id="noise"))
    p = result.metric(f"precision@{K}")
    assert p.delta == pytest.approx(0.0)
    assert p.p_value is not None
    assert not p.significant
    assert p.verdict.endswith("not significant")


def test_small_consistent_gain_on_few_cases_is_not_significant() -> None:
    # two cases improve: the best one-sided p with 2 cases is 1/4, never below 0.05
    result = what_if(run_of(crowded, n=2), run_of(pruned_ranking, n=2, run_id="p"))
    p = result.metric(f"precision@{K}")
    assert p.delta > 0
    assert not p.significant
    assert p.verdict.endswith("not significant")


def test_what_if_refuses_mismatched_cases_and_units() -> None:
    base = run_of(crowded)
    with pytest.raises(EvalError, match="not of the same cases"):
        what_if(base, run_of(pruned_ranking, n=9, run_id="p"))
    with pytest.raises(EvalError, match="unit"):
        what_if(base, replace(run_of(pruned_ranking, run_id="p"), unit="doc"))
    repeated = replace(base, cases=(*base.cases, base.cases[0]))
    with pytest.raises(EvalError, match="not of the same cases"):
        what_if(repeated, run_of(pruned_ranking, run_id="p"))


def test_what_if_uses_only_the_metrics_both_runs_have() -> None:
    base = run_of(crowded)
    pruned = run_set(
        cases(),
        FunctionRetriever(lambda q: pruned_ranking(int(q.text.split()[-1]))),
        set_name="s",
        ks=(K, DEPTH),
    )
    result = what_if(base, pruned)
    names = {m.metric for m in result.metrics}
    assert f"precision@{K}" in names
    assert "precision@1" not in names
    assert f"precision@{DEPTH}" not in names
    assert result.k == K


def test_what_if_json_round_trip() -> None:
    result = what_if(run_of(crowded), run_of(pruned_ranking, run_id="pruned"), seed=3)
    obj = json.loads(json.dumps(result.to_json()))
    assert WhatIf.from_json(obj) == result
    assert obj["verdicts"] == list(result.verdicts)


# --- the table -------------------------------------------------------------------------------------------------------


def test_table_has_freshness_and_group_columns() -> None:
    report = distractor_report(run_of(crowded), limit=3)
    freshness = {"near/a": {"status": "superseded", "updated_at": "2025-01-02", "owner": "ops", "superseded_by": "x"}}
    text = format_distractors(report, freshness, groups=[("near/a", "near/b"), ("zz", "zzz")])
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| doc"))
    assert header == "| doc | cases | slots | pushed | categories | status | updated_at | owner | superseded_by | dup |"
    assert "| near/b | 10 | 10 | 8 | billing:5, it:5 | - | - | - | - | G1 |" in lines
    assert "| near/a | 8 | 16 | 16 | billing:5, it:3 | superseded | 2025-01-02 | ops | x | G1 |" in lines
    assert "G1: near/a, near/b" in lines
    assert not any(line.startswith("G2") for line in lines)  # a group with no listed document is not shown
    assert "34 of 50 top-k slots (68.0%)" in lines[0]
    assert "by category: billing 80.0%, it 56.0%" in lines
    plain = format_distractors(report)
    assert "status" not in plain
    assert "dup" not in plain


def test_table_escapes_pipes() -> None:
    def ranking(i: int) -> list[Retrieved]:
        return [Retrieved("a|b#0", "a|b"), r(f"ans/{i}#0")]

    text = format_distractors(distractor_report(run_of(ranking, n=1)))
    assert "| a\\|b | 1 | 1 | 0 |" in text


def test_a_report_at_the_runs_depth_says_pushed_cannot_be_seen() -> None:
    shallow = run_set(cases(), FunctionRetriever(lambda q: crowded(int(q.text.split()[-1]))), set_name="s", ks=(1, K))
    assert distractor_report(run_of(crowded)).depth > K  # retrieved deeper than k: pushed is measured
    assert not any("cannot be seen" in n for n in distractor_report(run_of(crowded)).notes)
    at_depth = distractor_report(shallow)
    assert at_depth.depth == K
    assert at_depth.pushed == 0
    assert any(f"pushed cannot be seen at k={K}" in n for n in at_depth.notes)
    assert DistractorReport.from_json(at_depth.to_json()) == at_depth
