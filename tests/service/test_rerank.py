"""Rerank through the real loader: a tiny random BERT cross-encoder saved to disk by `transformers`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from service.domain import Hit
from service.index import Index
from service.pipeline import SearchParams, SearchPipeline
from service.rerank import CrossEncoderReranker

QUERY = "vpn error code"


@pytest.fixture(scope="module")
def reranker(tiny_cross_encoder: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(str(tiny_cross_encoder), max_tokens=256)


@pytest.fixture(scope="module")
def pipeline(reranker: CrossEncoderReranker, handbook_index: Index) -> SearchPipeline:
    return SearchPipeline(handbook_index.store, handbook_index.embedder, handbook_index.encoder, reranker)


def _ids(hits: Sequence[Hit]) -> list[str]:
    return [h.chunk.chunk_id for h in hits]


def test_cross_encoder_loads_from_a_path_and_scores_each_pair(reranker: CrossEncoderReranker) -> None:
    passages = ["the vpn error code", "refund plan price", "laptop"]
    scores = reranker.score("vpn error", passages)
    assert len(set(scores)) == 3  # the model tells the passages apart
    # each score belongs to its own (query, passage) pair: scored alone, a passage gets the same score
    assert [reranker.score("vpn error", [p])[0] for p in passages] == pytest.approx(scores, rel=1e-4, abs=1e-6)
    assert reranker.score("refund", passages) != scores  # the query is part of the input
    assert reranker.score("vpn error", passages) == scores
    assert reranker.score("q", []) == []


def _by_score(chunk_ids: list[str], scores: list[float]) -> list[tuple[str, float]]:
    """Best first, ties broken by chunk id (the house rule for every ranking)."""
    return sorted(zip(chunk_ids, scores, strict=True), key=lambda pair: (-pair[1], pair[0]))


def test_rerank_orders_the_fused_top_by_the_cross_encoder_scores(
    pipeline: SearchPipeline, reranker: CrossEncoderReranker
) -> None:
    fused = pipeline.search(QUERY, SearchParams(k=10, rerank=False, explain=True))
    reranked = pipeline.search(QUERY, SearchParams(k=10, rerank=True, rerank_depth=10, explain=True))
    assert not fused.reranked
    assert reranked.reranked
    assert "rerank" in reranked.timings_ms
    assert "rerank" not in fused.timings_ms
    fused_ids = _ids(fused.hits)
    assert len(fused_ids) == 10

    # the cross-encoder's own scores for the fused top 10, computed here from the texts the model sees
    scores = reranker.score(QUERY, [h.chunk.embed_text for h in fused.hits])
    assert len(set(scores)) > 1
    expected = _by_score(fused_ids, scores)

    assert _ids(reranked.hits) == [chunk_id for chunk_id, _ in expected]
    assert _ids(reranked.hits) != fused_ids  # rerank really changed the order for this query
    assert [h.stages["rerank"].rank for h in reranked.hits] == list(range(1, 11))
    assert [h.score for h in reranked.hits] == pytest.approx([s for _, s in expected], rel=1e-6)
    assert [h.stages["rerank"].score for h in reranked.hits] == [h.score for h in reranked.hits]
    # the fusion stage still reports where each hit stood before the rerank
    assert [h.stages["fusion"].rank for h in reranked.hits] == [fused_ids.index(c) + 1 for c, _ in expected]


def test_hits_beyond_the_rerank_depth_keep_the_fused_order(
    pipeline: SearchPipeline, reranker: CrossEncoderReranker
) -> None:
    fused = pipeline.search(QUERY, SearchParams(k=10)).hits
    fused_ids = _ids(fused)
    assert len(fused_ids) == 10
    reranked = pipeline.search(QUERY, SearchParams(k=10, rerank=True, rerank_depth=4, explain=True))
    scores = reranker.score(QUERY, [h.chunk.embed_text for h in fused[:4]])
    expected_top = [chunk_id for chunk_id, _ in _by_score(fused_ids[:4], scores)]
    assert _ids(reranked.hits) == expected_top + fused_ids[4:]
    assert [h.stages["rerank"].rank for h in reranked.hits[:4]] == [1, 2, 3, 4]
    assert ["rerank" in h.stages for h in reranked.hits[4:]] == [False] * 6
    # beyond the depth a hit keeps its fusion score
    assert [h.score for h in reranked.hits[4:]] == [h.score for h in fused[4:]]
