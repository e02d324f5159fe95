"""Parameter sweeps, the pure half: space validation, grid and random search, splits, Pareto, choice, the paired
held-out comparison and the stored result."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.sweep import (
    INDEX_PARAMETERS,
    PARAMETERS,
    Comparison,
    Config,
    Row,
    SplitSummary,
    SweepResult,
    SweepSpace,
    choose,
    compare_paired,
    context_tokens,
    format_sweep_table,
    held_out,
    latency_summary,
    make_row,
    mark_pareto,
    pareto_front,
    split_cases,
)

from .helpers import doc_case, docs, run_with


def row(label_k: int, quality: float, p95: float = 10.0, tokens: float = 100.0, metric: str = "ndcg@10") -> Row:
    return Row(Config.of({"k": label_k}), {metric: quality}, {}, p95 / 2, p95, tokens)


def cases(n: int, split: str | list[str | None] | None = None) -> list[Case]:
    splits = split if isinstance(split, list) else [split] * n
    return [Case(f"c{i}", "q", (Label(doc_id="d"),), split=splits[i]) for i in range(n)]


# --- the space -------------------------------------------------------------------------------------------------------


def test_index_parameters_are_the_chunking_ones() -> None:
    assert INDEX_PARAMETERS == ("chunk_size", "chunk_overlap")
    assert {n for n, p in PARAMETERS.items() if p.index} == set(INDEX_PARAMETERS)


def test_grid_puts_index_parameters_outermost_and_is_deterministic() -> None:
    space = SweepSpace.parse({"alpha": [0.7, 0.3], "chunk_size": [800, 400], "k": [10, 5]})
    grid = space.grid()
    assert [c.label() for c in grid] == [
        c.label() for c in SweepSpace.parse(dict(space.to_json()["parameters"])).grid()
    ]
    assert len(grid) == space.size == 8
    keys = [c.index_key() for c in grid]
    # configurations sharing an index are adjacent: each key appears in one run
    assert [dict(k) for k, _ in itertools.groupby(keys)] == [{"chunk_size": 400}, {"chunk_size": 800}]
    assert len(set(keys)) == 2  # hashable: a key names one index
    assert grid[0].label() == "chunk_size=400 alpha=0.3 k=5"
    assert grid[0].search_part() == {"alpha": 0.3, "k": 5}


def test_the_order_values_are_given_in_does_not_matter() -> None:
    a = SweepSpace.parse({"mode": ["keyword", "hybrid"], "k": [10, 1]})
    b = SweepSpace.parse({"k": [1, 10], "mode": ["hybrid", "keyword"]})
    assert a == b
    assert [c.label() for c in a.grid()] == [
        "mode=hybrid k=1",
        "mode=hybrid k=10",
        "mode=keyword k=1",
        "mode=keyword k=10",
    ]


@pytest.mark.parametrize(
    ("space", "words"),
    [
        ({"chunksize": [500]}, ["unknown parameter(s) ['chunksize']", "chunk_size", "rerank_depth"]),
        ({"alpha": [1.5]}, ["alpha values must be between 0 and 1", "1.5"]),
        ({"alpha": [True]}, ["alpha values must be numbers"]),
        ({"k": [5.0]}, ["k values must be whole numbers"]),
        ({"k": [0]}, ["between 1 and 100"]),
        ({"chunk_size": [99]}, ["between 100 and 20000"]),
        ({"rrf_k": [0]}, [">= 1"]),
        ({"mode": ["sparse"]}, ["mode values must be one of ['hybrid', 'dense', 'keyword']"]),
        ({"rerank": ["yes"]}, ["true or false"]),
        ({"k": [5, 5]}, ["k: 5 is listed twice"]),
        ({"alpha": [0, 0.0]}, ["alpha: 0 is listed twice"]),
        ({"k": []}, ["k: the list is empty"]),
        ({"k": 5}, ["k: give a list of values"]),
        ({"chunk_overlap": [50]}, ["give chunk_size too"]),
        ({}, ["names no parameter"]),
    ],
)
def test_invalid_spaces_say_what_to_fix(space: dict[str, object], words: list[str]) -> None:
    with pytest.raises(EvalError) as err:
        SweepSpace.parse(space)
    for word in words:
        assert word in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(EvalError) as err:
        SweepSpace.parse({"k": [0], "alpha": [2], "nope": [1]})
    assert "nope" in str(err.value)
    assert "k values" in str(err.value)
    assert "alpha values" in str(err.value)


def test_invalid_combinations_are_dropped_and_counted() -> None:
    space = SweepSpace.parse({"chunk_size": [200, 1000], "chunk_overlap": [0, 100, 300]})
    labels = [c.label() for c in space.grid()]
    # 200 with overlap 100 or 300: overlap >= size/2; 1000 with 300 is fine
    assert labels == [
        "chunk_size=200 chunk_overlap=0",
        "chunk_size=1000 chunk_overlap=0",
        "chunk_size=1000 chunk_overlap=100",
        "chunk_size=1000 chunk_overlap=300",
    ]
    assert space.notes == ("2 combination(s) dropped: chunk_overlap >= chunk_size/2",)


def test_candidates_below_k_are_dropped() -> None:
    space = SweepSpace.parse({"candidates": [5, 50], "k": [10]})
    assert [c.label() for c in space.grid()] == ["candidates=50 k=10"]
    assert "candidates below k" in space.notes[0]


def test_ignored_parameters_are_left_out_and_duplicates_merged() -> None:
    space = SweepSpace.parse({"fusion": ["weighted", "rrf"], "alpha": [0.2, 0.8], "rrf_k": [10, 60]})
    labels = [c.label() for c in space.grid()]
    assert labels == [
        "fusion=weighted alpha=0.2",
        "fusion=weighted alpha=0.8",
        "fusion=rrf rrf_k=10",
        "fusion=rrf rrf_k=60",
    ]
    assert len(space.notes) == 2
    assert all("merged" in note for note in space.notes)
    rerank = SweepSpace.parse({"rerank": [False, True], "rerank_depth": [10, 20]})
    assert [c.label() for c in rerank.grid()] == [
        "rerank=false",
        "rerank=true rerank_depth=10",
        "rerank=true rerank_depth=20",
    ]
    modes = SweepSpace.parse({"mode": ["dense", "keyword", "hybrid"], "alpha": [0.3, 0.6]})
    assert [c.label() for c in modes.grid()] == [
        "mode=hybrid alpha=0.3",
        "mode=hybrid alpha=0.6",
        "mode=dense",
        "mode=keyword",
    ]


def test_a_space_with_no_valid_configuration_is_an_error() -> None:
    space = SweepSpace.parse({"chunk_size": [200], "chunk_overlap": [100]})
    with pytest.raises(EvalError, match=r"no valid configuration.*chunk_overlap >= chunk_size/2"):
        space.grid()


def test_a_grid_above_the_bound_asks_for_random_search() -> None:
    space = SweepSpace.parse({"k": list(range(1, 11)), "rrf_k": list(range(1, 6))}, max_configs=20)
    assert space.size == 50
    with pytest.raises(EvalError, match=r"50 configurations.*bound 20.*random search with n <= 20.*shrink"):
        space.grid()
    picked = space.random(20, seed=3)
    assert len(picked) == 20
    assert len(set(picked)) == 20


def test_the_default_bound_is_200() -> None:
    space = SweepSpace.parse({"k": list(range(1, 101)), "rrf_k": [1, 2, 3]})
    with pytest.raises(EvalError, match="200"):
        space.grid()


def test_a_huge_space_is_refused_before_it_is_enumerated() -> None:
    with pytest.raises(EvalError, match="combinations"):
        SweepSpace.parse({"k": list(range(1, 101)), "rrf_k": list(range(1, 101)), "candidates": list(range(100, 120))})


def test_random_search_is_seeded_bounded_and_in_grid_order() -> None:
    space = SweepSpace.parse(
        {"chunk_size": [300, 600, 900], "alpha": [0.1, 0.3, 0.5, 0.7, 0.9], "k": [5, 10, 20]}, max_configs=45
    )
    grid = space.grid()
    a, b, c = space.random(10, seed=7), space.random(10, seed=7), space.random(10, seed=8)
    assert a == b
    assert a != c
    assert len(set(a)) == 10
    assert all(config in grid for config in a)
    # sorted in grid order: index-sharing configurations adjacent
    assert [grid.index(config) for config in a] == sorted(grid.index(config) for config in a)
    keys = [config.index_key() for config in a]
    assert len([k for k, _ in itertools.groupby(keys)]) == len(set(keys))
    assert space.random(45, seed=0) == grid  # n covering the grid: all of it


@pytest.mark.parametrize("n", [0, -1, 201, True])
def test_random_search_refuses_n_outside_the_bound(n: int) -> None:
    with pytest.raises(EvalError, match="between 1 and 200"):
        SweepSpace.parse({"k": [1, 2]}).random(n, seed=0)


def test_config_validates_and_round_trips() -> None:
    c = Config.of({"alpha": 0.3, "chunk_size": 500, "rerank": True})
    assert list(c) == ["chunk_size", "alpha", "rerank"]
    assert c["alpha"] == 0.3
    assert dict(c) == {"chunk_size": 500, "alpha": 0.3, "rerank": True}
    assert c.label() == "chunk_size=500 alpha=0.3 rerank=true"
    assert Config.from_json(c.to_json()) == c
    assert hash(c) == hash(Config.from_json(c.to_json()))
    with pytest.raises(EvalError, match="chunk_overlap >= chunk_size/2"):
        Config.of({"chunk_size": 400, "chunk_overlap": 200})
    with pytest.raises(EvalError, match="unknown parameter"):
        Config.of({"top_k": 3})
    assert Config().label() == "(the service's settings)"


# --- splits ----------------------------------------------------------------------------------------------------------


def test_split_by_the_cases_own_labels() -> None:
    tune, test, origin = split_cases(cases(4, ["tune", "test", "test", "tune"]), seed=0)
    assert ([c.id for c in tune], [c.id for c in test], origin) == (["c0", "c3"], ["c1", "c2"], "case")


def test_split_by_hash_is_seeded_and_stable() -> None:
    all_cases = cases(200)
    tune, test, origin = split_cases(all_cases, seed=1)
    assert origin == "hash"
    assert len(tune) + len(test) == 200
    assert 60 < len(test) < 140
    assert split_cases(list(reversed(all_cases)), seed=1)[1] == list(reversed(test))  # order does not matter
    assert {c.id for c in split_cases(all_cases, seed=2)[1]} != {c.id for c in test}
    # a case's side depends on its id alone: adding cases moves none
    more = split_cases([*all_cases, Case("new", "q", (Label(doc_id="d"),))], seed=1)[1]
    assert {c.id for c in more} - {"new"} == {c.id for c in test}
    _, smaller, _ = split_cases(all_cases, seed=1, test_share=0.2)
    assert {c.id for c in smaller} < {c.id for c in test}


def test_mixed_split_keeps_labels_and_hashes_the_rest() -> None:
    unlabelled = cases(40)
    labelled = [replace(c, id=f"t{c.id}", split="test") for c in cases(5)]
    tune, test, origin = split_cases([*labelled, *unlabelled], seed=0)
    assert origin == "mixed"
    assert all(c in test for c in labelled)
    hashed_test = split_cases(unlabelled, seed=0)[1]
    assert [c for c in test if c.split is None] == hashed_test
    assert tune == split_cases(unlabelled, seed=0)[0]


def test_an_empty_side_says_how_many_and_what_to_do() -> None:
    with pytest.raises(EvalError, match=r'the test split is empty: tune has 3 case\(s\), test 0.*"split": "test"'):
        split_cases(cases(3, "tune"), seed=0)
    with pytest.raises(EvalError, match=r"split is empty.*by hash.*at least 2"):
        split_cases(cases(1), seed=0)
    with pytest.raises(EvalError, match="test_share"):
        split_cases(cases(4), seed=0, test_share=1.0)


# --- rows ------------------------------------------------------------------------------------------------------------


def test_context_tokens_and_latency() -> None:
    assert context_tokens(["one two", "three"], lambda t: len(t.split())) == 3
    assert latency_summary([5.0]) == (5.0, 5.0)
    p50, p95 = latency_summary([float(i) for i in range(1, 101)])
    assert p50 == pytest.approx(50.5)
    assert p95 == pytest.approx(95.05)
    with pytest.raises(EvalError):
        latency_summary([])


def test_make_row_from_case_results() -> None:
    set_ = [doc_case(f"c{i}", f"d{i}") for i in range(4)]
    run = run_with(set_, lambda c: docs(f"d{c.id[1:]}") if c.id in ("c0", "c1") else docs("x"))
    r = make_row(
        Config.of({"k": 10}),
        run.cases,
        quality="recall@10",
        latencies_ms=[1.0, 2.0, 3.0],
        contexts=[["a b c"], ["a", "b"], ["a b c d e"]],
        count=lambda t: len(t.split()),
    )
    assert r.metrics["recall@10"] == 0.5
    assert r.case_metrics == {"c0": 1.0, "c1": 1.0, "c2": 0.0, "c3": 0.0}
    assert (r.p50_ms, r.context_tokens) == (2.0, 3.0)
    with pytest.raises(EvalError, match="no metric 'nope'"):
        make_row(Config(), run.cases, quality="nope", latencies_ms=[1.0], contexts=[["a"]], count=len)


# --- Pareto and choice -----------------------------------------------------------------------------------------------


def test_pareto_front_on_constructed_rows() -> None:
    rows = [
        row(1, 0.9, p95=50, tokens=500),  # best quality
        row(2, 0.8, p95=20, tokens=500),  # faster
        row(3, 0.8, p95=20, tokens=300),  # as fast, fewer tokens: dominates row 2
        row(4, 0.7, p95=30, tokens=400),  # dominated by row 3
        row(5, 0.6, p95=5, tokens=900),  # fastest
    ]
    assert pareto_front(rows, quality="ndcg@10") == [True, False, True, False, True]
    assert [r.pareto for r in mark_pareto(rows, quality="ndcg@10")] == [True, False, True, False, True]


def test_equal_rows_are_both_on_the_front() -> None:
    assert pareto_front([row(1, 0.5), row(2, 0.5), row(3, 0.4)], quality="ndcg@10") == [True, True, False]


def test_a_lower_is_better_quality_is_minimised() -> None:
    rows = [row(1, 0.1, metric="stale@10"), row(2, 0.3, metric="stale@10")]
    assert pareto_front(rows, quality="stale@10") == [True, False]
    assert choose(rows, quality="stale@10").label == "k=1"


def test_a_missing_quality_metric_is_an_error() -> None:
    with pytest.raises(EvalError, match="no metric 'mrr@10'"):
        pareto_front([row(1, 0.5)], quality="mrr@10")


points = st.tuples(
    st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), st.sampled_from([1.0, 2.0, 3.0]), st.sampled_from([10.0, 20.0])
)


@given(st.lists(points, min_size=1, max_size=12))
def test_pareto_front_property(values: list[tuple[float, float, float]]) -> None:
    rows = [row(i + 1, q, p95=p, tokens=t) for i, (q, p, t) in enumerate(values)]
    front = pareto_front(rows, quality="ndcg@10")

    def dominates(a: Row, b: Row) -> bool:
        qa, qb = a.metrics["ndcg@10"], b.metrics["ndcg@10"]
        ge = qa >= qb and a.p95_ms <= b.p95_ms and a.context_tokens <= b.context_tokens
        return ge and (qa > qb or a.p95_ms < b.p95_ms or a.context_tokens < b.context_tokens)

    for r, on in zip(rows, front, strict=True):
        dominated = any(dominates(o, r) for o in rows)
        assert on == (not dominated)
    assert any(front)  # a finite set always has an undominated row
    best = choose(rows, quality="ndcg@10")
    assert front[rows.index(best)]  # the winner is never dominated


def test_choose_breaks_ties_by_latency_then_tokens_then_label() -> None:
    assert choose([row(1, 0.5), row(2, 0.6)], quality="ndcg@10").label == "k=2"
    assert choose([row(1, 0.5, p95=20), row(2, 0.5 + 1e-12, p95=10)], quality="ndcg@10").label == "k=2"
    assert choose([row(1, 0.5, tokens=300), row(2, 0.5, tokens=200)], quality="ndcg@10").label == "k=2"
    assert choose([row(2, 0.5), row(1, 0.5)], quality="ndcg@10").label == "k=1"
    # beyond the tie margin quality wins whatever the cost
    assert choose([row(1, 0.5, p95=1), row(2, 0.5 + 1e-6, p95=100)], quality="ndcg@10").label == "k=2"
    with pytest.raises(EvalError):
        choose([], quality="ndcg@10")


# --- the held-out comparison -----------------------------------------------------------------------------------------


def test_a_clear_win_is_significant() -> None:
    winner = {f"c{i}": 1.0 if i % 5 else 0.0 for i in range(50)}
    current = {f"c{i}": 0.0 if i % 2 else winner[f"c{i}"] for i in range(50)}
    c = compare_paired(winner, current)
    assert c.delta > 0.3
    assert c.p_value is not None
    assert c.p_value < 0.01
    assert c.significant
    assert c.cases == 50


def test_noise_is_not_significant() -> None:
    winner = {f"c{i}": float(i % 2) for i in range(20)}
    current = {f"c{i}": float((i + 1) % 2) if i < 4 else float(i % 2) for i in range(20)}
    c = compare_paired(winner, current)
    assert c.delta == 0.0
    assert c.p_value is not None
    assert c.p_value > 0.05
    assert not c.significant


def test_identical_values_have_no_p_value() -> None:
    values = {"a": 0.5, "b": 1.0}
    c = compare_paired(values, dict(values))
    assert (c.delta, c.p_value, c.significant) == (0.0, None, False)


def test_a_worse_winner_is_never_significant() -> None:
    current = {f"c{i}": 1.0 for i in range(30)}
    winner = {f"c{i}": 0.0 for i in range(30)}
    c = compare_paired(winner, current)
    assert c.delta == -1.0
    assert not c.significant
    assert c.p_value is not None
    assert c.p_value > 0.5


def test_a_lower_is_better_comparison_is_reversed() -> None:
    winner = {f"c{i}": 0.0 for i in range(30)}
    current = {f"c{i}": 1.0 for i in range(30)}
    c = compare_paired(winner, current, lower_is_better=True)
    assert c.significant
    assert c.improvement == 1.0


def test_mismatched_case_ids_are_an_error() -> None:
    with pytest.raises(EvalError, match=r"different cases.*\['b'\].*\['c'\]"):
        compare_paired({"a": 1.0, "b": 1.0}, {"a": 1.0, "c": 0.0})
    with pytest.raises(EvalError, match="no held-out cases"):
        compare_paired({}, {})


def test_held_out_carries_both_runs_metrics() -> None:
    set_ = [doc_case(f"c{i}", f"d{i}") for i in range(30)]
    good = run_with(set_, lambda c: docs(f"d{c.id[1:]}"))
    bad = run_with(set_, lambda c: docs(f"d{c.id[1:]}") if int(c.id[1:]) % 2 else docs("x"))
    c = held_out(good.cases, bad.cases, quality="recall@10")
    assert c.winner_metrics["recall@10"] == 1.0
    assert c.current_metrics["recall@10"] == 0.5
    assert c.significant


# --- the result ------------------------------------------------------------------------------------------------------


def result(comparison: Comparison | None, current: Config | None = None) -> SweepResult:
    space = SweepSpace.parse({"chunk_size": [400, 800], "alpha": [0.3, 0.7]})
    rows = [
        Row(config, {"recall@10": q, "mrr@10": q / 2}, {"c1": q, "c2": q}, 4.0, p95, 300.0)
        for config, q, p95 in zip(space.grid(), (0.7, 0.8, 0.75, 0.8), (10.0, 20.0, 5.0, 30.0), strict=True)
    ]
    rows = mark_pareto(rows, quality="recall@10")
    winner = choose(rows, quality="recall@10")
    return SweepResult(
        space,
        "grid",
        0,
        SplitSummary("hash", 2, 2),
        "recall@10",
        tuple(rows),
        winner.label,
        current or Config.of({"chunk_size": 400, "alpha": 0.3}),
        comparison,
        notes=space.notes,
    )


def test_sweep_result_round_trips() -> None:
    c = replace(compare_paired({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 1.0}), winner_metrics={"recall@10": 1.0})
    for r in (result(c), result(None)):
        assert SweepResult.from_json(r.to_json()) == r
    assert result(c).winner == "chunk_size=400 alpha=0.7"
    assert result(c).winner_row.p95_ms == 20.0
    with pytest.raises(EvalError, match="not a stored sweep result"):
        SweepResult.from_json({"mode": "grid"})
    with pytest.raises(EvalError, match="winner"):
        replace(result(c), winner="nope")


def test_recommendations() -> None:
    win = Comparison(0.9, 0.7, 0.2, 0.003, True, 40)
    assert result(win).recommendation == (
        "adopt: chunk_size=400 alpha=0.7 beats the current configuration on the held-out split (Δ=+0.200, p=0.0030)"
    )
    noise = Comparison(0.72, 0.7, 0.02, 0.31, False, 40)
    assert result(noise).recommendation == (
        "keep the current configuration: the difference on the held-out split is not significant (p=0.3100)"
    )
    worse = Comparison(0.6, 0.7, -0.1, 0.97, False, 40)
    assert result(worse).recommendation.startswith("keep: the winner is worse on the held-out split")
    same = Comparison(0.7, 0.7, 0.0, None, False, 40)
    assert "p=n/a" in result(same).recommendation
    assert result(win, current=Config.of({"chunk_size": 400, "alpha": 0.7})).recommendation.startswith(
        "keep the current configuration: it is the best"
    )
    assert result(win).to_json()["recommendation"] == result(win).recommendation


def test_the_table_marks_pareto_rows_and_the_winner() -> None:
    table = format_sweep_table(result(Comparison(0.9, 0.7, 0.2, 0.003, True, 40)))
    lines = table.splitlines()
    assert lines[0].startswith("| | configuration | recall@10 |")
    body = lines[2:6]
    # best quality first; the tie at 0.8 broken by p95
    assert [line.split("|")[2].strip() for line in body] == [
        "chunk_size=400 alpha=0.7",
        "chunk_size=800 alpha=0.7",
        "chunk_size=800 alpha=0.3",
        "chunk_size=400 alpha=0.3",
    ]
    assert body[0].split("|")[1].strip() == "★ ◀ winner"
    assert body[1].split("|")[1].strip() == ""  # dominated by the winner (same quality, slower)
    assert body[2].split("|")[1].strip() == "★"  # the fastest
    assert "adopt:" in lines[-1]
    assert "split by hash" in table


def test_a_tie_goes_to_fewer_context_tokens_before_latency() -> None:
    lean = Row(Config.of({"k": 5}), {"recall@10": 0.9}, {}, 5.0, 30.0, 700.0)  # slower in this sample, half the context
    wide = Row(Config.of({"k": 10}), {"recall@10": 0.9}, {}, 5.0, 20.0, 1400.0)
    assert choose([wide, lean], quality="recall@10") is lean
