"""Rerank through the real loader: a tiny random BERT cross-encoder saved to disk by `transformers`."""

from __future__ import annotations

from pathlib import Path

from service.index import Index
from service.pipeline import SearchParams, SearchPipeline
from service.rerank import CrossEncoderReranker


def test_cross_encoder_loads_from_a_path_and_scores(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoder), max_tokens=64)
    scores = reranker.score("vpn error", ["the vpn error code", "refund plan price", "laptop"])
    assert len(scores) == 3
    assert all(isinstance(s, float) for s in scores)
    assert scores == reranker.score("vpn error", ["the vpn error code", "refund plan price", "laptop"])
    assert reranker.score("q", []) == []


def test_pipeline_reorders_the_top_by_rerank_score(tiny_cross_encoder: Path, handbook_index: Index) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoder), max_tokens=64)
    pipeline = SearchPipeline(handbook_index.store, handbook_index.embedder, handbook_index.encoder, reranker)
    result = pipeline.search("vpn error code", SearchParams(k=5, rerank=True, rerank_depth=10, explain=True))
    assert result.reranked
    assert "rerank" in result.timings_ms
    ranks = [h.stages["rerank"].rank for h in result.hits]
    assert ranks == [1, 2, 3, 4, 5]
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert all(h.score == h.stages["rerank"].score for h in result.hits)
    # the reranked top comes from the fused top 10
    assert all(h.stages["fusion"].rank <= 10 for h in result.hits)
    plain = pipeline.search("vpn error code", SearchParams(k=10, rerank=False))
    assert {h.chunk.chunk_id for h in result.hits} <= {h.chunk.chunk_id for h in plain.hits}
