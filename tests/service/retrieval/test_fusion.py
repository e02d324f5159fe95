from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.retrieval import fusion

keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
scores = st.floats(min_value=-100, max_value=100, allow_nan=False, allow_infinity=False)
score_maps = st.dictionaries(keys, scores, max_size=25)
# Real scores sit on a coarse grid compared to float precision; z-scoring values 1e-232 apart is not the point.
grid_scores = st.integers(-(10**6), 10**6).map(lambda i: i / 1000)


def shuffled(d: dict[str, float], seed: int) -> dict[str, float]:
    items = list(d.items())
    random.Random(seed).shuffle(items)
    return dict(items)


@given(score_maps, score_maps, st.integers(0, 1000), st.integers(1, 100))
def test_rrf_ignores_input_order(dense: dict[str, float], kw: dict[str, float], seed: int, k: int) -> None:
    a = fusion.rrf({"dense": dense, "keyword": kw}, k=k)
    b = fusion.rrf({"keyword": shuffled(kw, seed), "dense": shuffled(dense, seed + 1)}, k=k)
    assert a == b


@given(score_maps, score_maps, st.floats(0.01, 1000), st.floats(-50, 50), st.integers(1, 100))
def test_rrf_is_invariant_to_score_scale(
    dense: dict[str, float], kw: dict[str, float], scale: float, shift: float, k: int
) -> None:
    rescaled = {key: v * scale + shift for key, v in dense.items()}
    original = fusion.rrf({"dense": dense, "keyword": kw}, k=k)
    transformed = fusion.rrf({"dense": rescaled, "keyword": kw}, k=k)
    if len(set(rescaled.values())) == len(set(dense.values())):  # scaling kept every distinct score distinct
        assert [key for key, _ in original] == [key for key, _ in transformed]


@given(score_maps, score_maps, st.floats(0, 1), st.integers(0, 1000))
def test_weighted_ignores_input_order(dense: dict[str, float], kw: dict[str, float], alpha: float, seed: int) -> None:
    assert fusion.weighted(dense, kw, alpha) == fusion.weighted(shuffled(dense, seed), shuffled(kw, seed), alpha)


@given(st.lists(keys, min_size=1, max_size=20, unique=True), st.data())
def test_weighted_alpha_one_and_zero_equal_each_side(names: list[str], data: st.DataObject) -> None:
    # after the pipeline's rescoring both sides score the same keys
    dense = {k: data.draw(grid_scores) for k in names}
    kw = {k: data.draw(grid_scores) for k in names}
    order = lambda d: sorted(d, key=lambda k: (-d[k], k))  # noqa: E731
    assert [k for k, _ in fusion.weighted(dense, kw, 1.0)] == order(dense)
    assert [k for k, _ in fusion.weighted(dense, kw, 0.0)] == order(kw)


@given(score_maps, score_maps, st.floats(0, 1))
def test_fused_lists_are_sorted_and_cover_the_union(
    dense: dict[str, float], kw: dict[str, float], alpha: float
) -> None:
    for fused in (fusion.weighted(dense, kw, alpha), fusion.rrf({"d": dense, "k": kw})):
        assert {k for k, _ in fused} == set(dense) | set(kw)
        assert fused == sorted(fused, key=lambda item: (-item[1], item[0]))


def test_rrf_by_hand() -> None:
    fused = dict(fusion.rrf({"dense": {"a": 0.9, "b": 0.8}, "keyword": {"b": 5.0, "c": 1.0}}, k=60))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)


def test_ties_break_by_key() -> None:
    assert fusion.ranks({"b": 1.0, "a": 1.0, "c": 2.0}) == {"c": 1, "a": 2, "b": 3}


def test_weighted_uses_score_gaps_that_rrf_ignores() -> None:
    # "b" is barely second on the dense side but far ahead on the keyword side
    dense = {"a": 0.90, "b": 0.89, "c": 0.10}
    kw = {"a": 1.0, "b": 20.0, "c": 0.5}
    assert fusion.weighted(dense, kw, 0.5)[0][0] == "b"


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="alpha"):
        fusion.weighted({}, {}, 1.5)
    with pytest.raises(ValueError, match="rrf k"):
        fusion.rrf({}, k=0)
    assert fusion.zscores({"a": 3.0, "b": 3.0}) == {"a": 0.0, "b": 0.0}
