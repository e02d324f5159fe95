"""Rerank through the real loader: a tiny random BERT cross-encoder saved to disk by `transformers`; the window that
fits a long passage, with the packaged MiniLM's tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from service.domain import Hit
from service.index.index import Index
from service.retrieval.embedding import resolve_model_path
from service.retrieval.onnx_models import OnnxCrossEncoder
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.rerank import CrossEncoderReranker, PassageWindow, TorchCrossEncoder
from service.retrieval.tokenizer import Tokenizer, TokenizerConfig
from service.settings import PACKAGED_MODEL

QUERY = "vpn error code"


@pytest.fixture(scope="module")
def reranker(tiny_cross_encoder: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(TorchCrossEncoder(str(tiny_cross_encoder), max_tokens=256))


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


@pytest.fixture(scope="module")
def minilm_tokenizer() -> Any:
    from tokenizers import Tokenizer as ModelTokenizer

    return ModelTokenizer.from_file(f"{resolve_model_path(PACKAGED_MODEL)}/tokenizer.json")


def _pair_tokens(model: Any, query: str, passage: str) -> int:
    model.no_truncation()
    model.no_padding()
    return len(model.encode(query, passage).ids)


FILLER = "The committee met on Tuesday and discussed the agenda. " * 12  # no word of the queries below
ANSWER = "Refunds are granted within 30 days of an annual payment."


def test_a_long_passage_is_cut_around_the_query_terms_keeping_its_title(minilm_tokenizer: Any) -> None:
    window = PassageWindow(minilm_tokenizer, Tokenizer(TokenizerConfig()), max_tokens=64)
    passage = f"Billing\nAnnual plans\n\n{FILLER}{ANSWER} {FILLER}"
    [cut] = window.fit("refund for a yearly payment", [passage])
    head, body = cut.split("\n\n")
    assert head == "Billing\nAnnual plans"  # the title and heading path kept whole
    assert ANSWER[:-1] in body  # the stretch with the query's terms (stemmed: refunds -> refund, payment)
    assert body in passage  # one stretch of the text, not stitched pieces
    assert 56 <= _pair_tokens(minilm_tokenizer, "refund for a yearly payment", cut) <= 64  # the room, used
    start = passage.index(ANSWER) - body.index(ANSWER)  # the answer occurs once
    assert passage[start : start + len(body)] == body
    assert passage[start - 1] == " "
    assert passage[start + len(body)] == " "
    assert body.index(ANSWER) > 20  # centred: words before the answer too


def test_a_passage_that_fits_or_matches_nothing_is_kept_or_cut_at_its_end(minilm_tokenizer: Any) -> None:
    window = PassageWindow(minilm_tokenizer, Tokenizer(TokenizerConfig()), max_tokens=64)
    short = f"Billing\n\n{ANSWER}"
    long = f"Billing\n\n{FILLER}{ANSWER}"
    kept, cut = window.fit("password reset", [short, long])
    assert kept == short
    assert long.startswith(cut.rstrip())  # no query term anywhere: the beginning, as plain truncation keeps
    assert _pair_tokens(minilm_tokenizer, "password reset", cut) <= 64


def test_the_window_reads_cjk_and_drops_a_title_too_long_to_keep(minilm_tokenizer: Any) -> None:
    window = PassageWindow(minilm_tokenizer, Tokenizer(TokenizerConfig()), max_tokens=40)
    passage = "退款说明\n\n" + "会议在星期二举行。" * 20 + "年度套餐可以退款。" + "会议在星期二举行。" * 20
    [cut] = window.fit("退款", [passage])
    assert cut.startswith("退款说明\n\n")
    assert "可以退款" in cut.split("\n\n")[1]
    long_title = " ".join(["Handbook"] * 40) + "\n\n" + FILLER + ANSWER
    [cut] = window.fit("refund", [long_title])
    assert "\n\n" not in cut
    assert "Refunds" in cut


def test_the_rerankers_score_the_cut_passage(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    analyser = Tokenizer(TokenizerConfig())
    onnx = OnnxCrossEncoder(str(tiny_cross_encoder), cache=tmp_path, max_tokens=24)
    focused = CrossEncoderReranker(onnx, analyser=analyser)
    plain = CrossEncoderReranker(onnx)
    torch = CrossEncoderReranker(TorchCrossEncoder(str(tiny_cross_encoder), max_tokens=24), analyser=analyser)
    passage = "plan\n\n" + "the a of to and in is for on with " * 5 + "vpn error code " + "laptop leave " * 10
    window = PassageWindow(onnx.tokenizer, analyser, 24)
    [cut] = window.fit("vpn error", [passage])
    assert "vpn error code" in cut
    # exact comparisons: the same tokens through the same graph give the same float; the random tiny model's scores
    # of different inputs may differ only in the 7th decimal
    assert focused.score("vpn error", [passage]) == plain.score("vpn error", [cut])
    assert focused.score("vpn error", [passage]) != plain.score("vpn error", [passage])
    assert torch.score("vpn error", [passage]) == pytest.approx(focused.score("vpn error", [passage]), abs=1e-5)
