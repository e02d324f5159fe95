"""The document-embedding cache: unchanged texts skip the model, anything else is a miss, and a broken file is
replaced."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from service.domain import Document
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.retrieval.embedding import Matrix
from service.retrieval.embedding_cache import CachedEmbedder
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.settings import PACKAGED_MODEL, Settings
from service.stores.edge import EdgeStore
from tests.conftest import SEED
from tests.fakes import FakeEmbedder


class CountingFakeEmbedder(FakeEmbedder):
    """A `FakeEmbedder` that records every text it was asked to embed as a document."""

    def __init__(self, name: str = "fake-bow") -> None:
        super().__init__(name=name)
        self.embedded: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        self.embedded += texts
        return super().embed_documents(texts)


def test_cached_texts_skip_the_model_and_keep_their_order(tmp_path: Path) -> None:
    inner = CountingFakeEmbedder()
    cache = CachedEmbedder(inner, tmp_path / "e.db")
    first = cache.embed_documents(["alpha beta", "gamma"])
    again = cache.embed_documents(["gamma", "delta", "alpha beta", "gamma"])
    assert sorted(inner.embedded) == ["alpha beta", "delta", "gamma"]  # only the new text reached the model, once
    want = FakeEmbedder().embed_documents(["gamma", "delta", "alpha beta", "gamma"])
    np.testing.assert_array_equal(again, want)
    np.testing.assert_array_equal(first, want[[2, 0]])
    assert (cache.hits, cache.misses) == (3, 3)
    # a new process finds them on disk; another model or document prefix does not
    assert CachedEmbedder(CountingFakeEmbedder(), tmp_path / "e.db").embed_documents(["gamma"]).shape == (1, 64)
    other = CountingFakeEmbedder(name="another-model")
    CachedEmbedder(other, tmp_path / "e.db").embed_documents(["gamma"])
    prefixed = CountingFakeEmbedder()
    CachedEmbedder(prefixed, tmp_path / "e.db", variant="passage: ").embed_documents(["gamma"])
    assert other.embedded == prefixed.embedded == ["gamma"]


def test_a_broken_cache_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "e.db").write_bytes(b"not a database" * 100)
    cache = CachedEmbedder(CountingFakeEmbedder(), tmp_path / "e.db")
    assert cache.embed_documents(["alpha"]).shape == (1, 64)


def test_reingesting_a_changed_document_embeds_only_its_changed_chunks(tmp_path: Path) -> None:
    inner = CountingFakeEmbedder()
    store = EdgeStore(tmp_path / "index")
    index = Index(
        store, CachedEmbedder(inner, tmp_path / "e.db"), Chunker(ChunkerConfig(200, 0)), TokenizerConfig(), Bm25Params()
    )
    sections = [f"## Part {i}\n\n" + f"word{i} " * 30 for i in range(4)]
    index.ingest([Document(id="d", title="D", text="\n\n".join(sections))])
    chunks = len(inner.embedded)
    assert chunks >= 4
    inner.embedded.clear()
    sections[2] = "## Part 2\n\nrewritten entirely " * 3
    result = index.ingest([Document(id="d", title="D", text="\n\n".join(sections))])
    assert result.chunks >= 4
    assert inner.embedded
    assert all("rewritten" in t for t in inner.embedded)
    store.close()


class NoModel:
    """Stands for the packaged model and fails if asked for anything: every vector must come from the cache."""

    name, dimension = PACKAGED_MODEL, 384

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        raise AssertionError(
            f"{len(texts)} chunk(s) missing from the seed, first {texts[0][:80]!r}: make demo-embeddings"
        )

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        raise AssertionError(f"not used: {texts}")


def test_the_shipped_seed_covers_the_demo_handbook(tmp_path: Path, handbook_docs: list[Document]) -> None:
    cache = CachedEmbedder(NoModel(), tmp_path / "e.db")
    assert cache.seed(SEED) == 535
    s = Settings(data_dir=tmp_path)
    store = EdgeStore(tmp_path / "index")
    index = Index(store, cache, Chunker(ChunkerConfig(s.chunk_size, s.chunk_overlap)), TokenizerConfig(), Bm25Params())
    assert index.ingest(handbook_docs).chunks == 535
    assert (cache.hits, cache.misses) == (535, 0)
    store.close()


def test_a_seed_exports_and_loads_back(tmp_path: Path) -> None:
    cache = CachedEmbedder(FakeEmbedder(), tmp_path / "a.db")
    want = cache.embed_documents(["alpha", "beta gamma"])
    cache.export(tmp_path / "seed.npz")
    fresh = CachedEmbedder(CountingFakeEmbedder(), tmp_path / "b.db")
    assert fresh.seed(tmp_path / "seed.npz") == 2
    assert fresh.seed(tmp_path / "seed.npz") == 0  # already there
    np.testing.assert_array_equal(fresh.embed_documents(["alpha", "beta gamma"]), want)
    assert fresh.inner.embedded == []  # type: ignore[attr-defined]
    other = CachedEmbedder(FakeEmbedder(dimension=8), tmp_path / "c.db")
    assert other.seed(tmp_path / "seed.npz") == 0  # vectors of another size are refused
