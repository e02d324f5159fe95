"""The whole pipeline on both backends (embedded edge and qdrant-client) returns the same hits."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from service.domain import Document, FusionMethod, Mode
from service.filters import FilterSpec, parse_metadata_filters
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.stores.base import VectorStore
from service.stores.edge import EdgeStore
from service.stores.qdrant import QdrantStore
from tests.fakes import FakeEmbedder

QUERIES = [
    ("refund for annual plan", SearchParams(k=8)),
    ("LC-419 vpn", SearchParams(k=5, mode=Mode.KEYWORD)),
    ("laptop replacement policy", SearchParams(k=5, mode=Mode.DENSE)),
    ("expenses receipts", SearchParams(k=5, fusion=FusionMethod.RRF, filters=FilterSpec(tenant="fjord"))),
    ("password", SearchParams(k=6, fresh_only=False, filters=FilterSpec(tags=("security",)))),
    (
        "on-call",
        SearchParams(k=5, filters=FilterSpec(metadata=parse_metadata_filters({"review_cycle_days": {"lt": 200}}))),
    ),
]


def build(store: VectorStore, docs: list[Document]) -> SearchPipeline:
    index = Index(
        store,
        FakeEmbedder(),
        Chunker(ChunkerConfig()),
        TokenizerConfig(),
        Bm25Params(avg_len=50.0),
        measure_avg_len=False,
    )
    index.ingest(docs)
    return SearchPipeline(store, index.embedder, index.encoder, None)


def test_edge_and_qdrant_client_agree(handbook_docs: list[Document], tmp_path: Path) -> None:
    edge = build(EdgeStore(tmp_path / "index"), handbook_docs)
    server = build(QdrantStore(QdrantClient(":memory:"), "plumbline"), handbook_docs)
    for query, params in QUERIES:
        a, b = edge.search(query, params), server.search(query, params)
        assert a.hits, query
        assert [h.chunk.chunk_id for h in a.hits] == [h.chunk.chunk_id for h in b.hits], query
        assert [h.score for h in a.hits] == pytest.approx([h.score for h in b.hits], rel=1e-3, abs=1e-4), query
    edge.store.close()
