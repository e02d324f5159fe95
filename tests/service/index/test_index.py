from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from service.domain import Document
from service.errors import (
    IndexMismatch,
    IngestFailed,
    InsufficientStorage,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
)
from service.filters import Clause, Match, of_kind
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index, IndexLimits, Manifest
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.stores.base import StorePoint, VectorStore
from service.stores.edge import EdgeStore
from service.stores.payload import MANIFEST_ID
from tests.fakes import FakeEmbedder, FlakyStore

V1 = Document(
    id="policy/pw",
    title="Passwords",
    text="# Passwords\n\n## Length\n\nMinimum length is twelve characters.\n\n"
    "## Rotation\n\nRotate every ninety days.\n",
)
V2 = Document(
    id="policy/pw",
    title="Passwords",
    text="# Passwords\n\n## Length\n\nMinimum length is sixteen characters.\n\n"
    "## Rotation\n\nNo scheduled rotation.\n\n## MFA\n\nUse a hardware key.\n",
)
OTHER = Document(id="it/vpn", title="VPN", text="# VPN\n\nConnect with lkconnect up.\n")


def make_index(store: VectorStore, **kw: object) -> Index:
    return Index(
        store, FakeEmbedder(), Chunker(ChunkerConfig(size=200, overlap=0)), TokenizerConfig(), Bm25Params(), **kw
    )  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EdgeStore]:
    s = EdgeStore(tmp_path / "index")
    yield s
    s.close()


def texts(index: Index, doc_id: str) -> list[str]:
    return [c.text for c in index.get(doc_id).chunks]


def search_texts(index: Index, query: str) -> list[str]:
    pipeline = SearchPipeline(index.store, index.embedder, index.encoder, None)
    return [h.chunk.text for h in pipeline.search(query, SearchParams(k=10, candidates=50)).hits]


def test_ingest_get_delete(store: EdgeStore) -> None:
    index = make_index(store)
    result = index.ingest([V1, OTHER])
    assert (result.documents, result.chunks, result.unchanged) == (2, 3, 0)
    stored = index.get("policy/pw")
    assert stored.document == V1
    assert [c.heading_path for c in stored.chunks] == [("Length",), ("Rotation",)]
    assert index.delete("policy/pw") == 2
    with pytest.raises(NotFound):
        index.get("policy/pw")
    assert index.chunks() == 1
    assert index.documents() == 1


def test_reingest_replaces_all_chunks(store: EdgeStore) -> None:
    index = make_index(store)
    index.ingest([V1, OTHER])
    index.ingest([V2])
    assert texts(index, "policy/pw") == [
        "Minimum length is sixteen characters.",
        "No scheduled rotation.",
        "Use a hardware key.",
    ]
    assert index.chunks() == 4
    assert index.documents() == 2
    assert "Minimum length is twelve characters." not in search_texts(index, "minimum length characters")


def test_unchanged_documents_are_not_re_embedded(store: EdgeStore) -> None:
    index = make_index(store)
    index.ingest([V1, OTHER])
    calls = index.embedder.calls  # type: ignore[attr-defined]
    result = index.ingest([V1, OTHER])
    assert (result.chunks, result.unchanged) == (0, 2)
    assert index.embedder.calls == calls  # type: ignore[attr-defined]


class PausingStore(FlakyStore):
    """Runs `before_upsert[n]` just before the n-th upsert (1-based) and `before_delete` before the next delete."""

    def __init__(self, inner: VectorStore) -> None:
        super().__init__(inner, fail_on_upsert=-1)
        self.before_upsert: dict[int, Callable[[], None]] = {}
        self.before_delete: Callable[[], None] | None = None

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        hook = self.before_upsert.pop(self.upserts + 1, None)
        if hook:
            hook()
        super().upsert(points, durable=durable)

    def delete(self, where: Clause) -> None:
        if self.before_delete is not None:
            hook, self.before_delete = self.before_delete, None
            hook()
        super().delete(where)


QUERY = "length rotation characters key"


def test_readers_see_the_old_version_until_the_commit_and_the_new_one_after(store: EdgeStore) -> None:
    paused = PausingStore(store)
    index = make_index(paused)
    index.ingest([V1])
    old = search_texts(index, QUERY)
    seen: dict[str, tuple[list[str], int]] = {}

    def look(moment: str) -> Callable[[], None]:
        return lambda: seen.__setitem__(moment, (search_texts(index, QUERY), store.count(of_kind("chunk"))))

    paused.upserts = 0
    paused.before_upsert[3] = look("chunks written, not committed")  # upserts: 1 chunks, 2 records, 3 heads
    paused.before_delete = look("committed, old not yet deleted")
    index.ingest([V2])
    new = search_texts(index, QUERY)
    assert seen["chunks written, not committed"] == (old, 2 + 3)  # both generations in the engine
    assert seen["committed, old not yet deleted"] == (new, 2 + 3)
    assert set(new) == set(texts(index, "policy/pw"))
    assert set(new) != set(old)


class FailingDelete(FlakyStore):
    def delete(self, where: Clause) -> None:  # noqa: ARG002
        raise OSError("fake: the delete after the commit failed")


def test_leftovers_of_a_failed_cleanup_stay_invisible_and_are_removed_later(store: EdgeStore) -> None:
    index = make_index(store)
    index.ingest([V1])
    old = search_texts(index, QUERY)
    broken = make_index(FailingDelete(store, fail_on_upsert=-1))
    assert broken.ingest([V2]).chunks == 3  # committed, so acknowledged despite the failed cleanup
    assert store.count(of_kind("chunk")) == 2 + 3
    after = search_texts(index, "zebra twelve ninety length rotation")
    assert after
    assert not set(after) & set(old)
    index.ingest([V2])  # unchanged, but its leftovers go
    assert store.count(of_kind("chunk")) == 3


class FailingHeads(FlakyStore):
    """Writes only the first head of the commit batch, then raises: a write that fails half-way through the commit."""

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        if points and points[0].payload.get("kind") == "head":
            self.inner.upsert(points[:1])
            raise OSError("fake disk failure")
        super().upsert(points, durable=durable)


# upserts of a 40-document ingest: 2 chunk batches, the records, the heads
@pytest.mark.parametrize("failing", [lambda s: FlakyStore(s, fail_on_upsert=2), lambda s: FailingHeads(s, -1)])
def test_a_write_that_raises_is_rolled_back(
    store: EdgeStore, handbook_docs: list[Document], failing: Callable[[VectorStore], VectorStore]
) -> None:
    """A store write that raises (the process lives on) makes `ingest` undo what it wrote and re-raise.

    This tests the rollback path on an exception only, not a crash: a killed process runs no rollback, and what
    it leaves behind is tested by killing a real process elsewhere.
    """
    index = make_index(store)
    index.ingest(handbook_docs[:5])
    before = {d.id: texts(index, d.id) for d in handbook_docs[:5]}
    counts = (index.chunks(), index.documents())
    flaky = failing(store)
    broken = make_index(flaky)
    changed = [replace(d, text=d.text + "\n\nAppendix: new text.") for d in handbook_docs[:5]]
    with pytest.raises(OSError, match="fake disk failure"):
        broken.ingest(changed + handbook_docs[5:40])
    assert (index.chunks(), index.documents()) == counts
    assert {d.id: texts(index, d.id) for d in handbook_docs[:5]} == before
    assert not [t for t in search_texts(index, "Appendix new text") if "Appendix" in t]


class LostAnswers(FlakyStore):
    """A server that applies the commit markers but whose answer is lost (a timeout), then refuses every write but
    deletes: the roll-back can delete but not write."""

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        if self.upserts >= 0 and points and points[0].payload.get("kind") == "head":
            self.inner.upsert(points)
            self.upserts = -1
        if self.upserts < 0:
            raise StoreUnavailable("the Qdrant server could not write points: no answer in time (ReadTimeout)")
        super().upsert(points, durable=durable)


def test_a_roll_back_that_fails_half_way_leaves_every_document_whole(store: EdgeStore) -> None:
    index = make_index(store)
    index.ingest([V1])
    broken = make_index(LostAnswers(store, fail_on_upsert=-1))
    with pytest.raises(IngestFailed, match="which is not known") as failed:
        broken.ingest([V2, OTHER])
    assert failed.value.outcome() == {"committed": [], "not_committed": [], "unknown": ["policy/pw", "it/vpn"]}
    assert index.get("policy/pw").document.text in (V1.text, V2.text)
    assert index.get("it/vpn").document.text == OTHER.text


@pytest.mark.parametrize(
    ("docs", "error", "message"),
    [
        ([], InvalidRequest, "no documents"),
        ([replace(OTHER, text="   ")], InvalidRequest, "text is empty"),
        ([replace(OTHER, id="")], InvalidRequest, "id must be"),
        ([replace(OTHER, id="a#1")], InvalidRequest, "id must be"),
        ([replace(OTHER, id="a/../b")], InvalidRequest, "'..' segment"),
        ([replace(OTHER, id=".")], InvalidRequest, "'..' segment"),
        ([OTHER, OTHER], InvalidRequest, "appears twice"),
        ([replace(OTHER, text="x" * 501)], PayloadTooLarge, "characters"),
        ([replace(OTHER, id=f"d{i}") for i in range(4)], PayloadTooLarge, "split it"),
        ([replace(OTHER, text="# Only a heading\n")], InvalidRequest, "no text to index"),
    ],
)
def test_bad_batches_change_nothing(store: EdgeStore, docs: list[Document], error: type, message: str) -> None:
    index = make_index(store, limits=IndexLimits(max_batch_documents=3, max_document_chars=500))
    index.ingest([V1])
    with pytest.raises(error, match=message):
        index.ingest([V2, *docs] if docs else [])  # a valid replacement of V1 rides along with the bad input
    assert index.documents() == 1
    assert index.get("policy/pw").document == V1


def test_title_defaults_to_first_heading_or_id(store: EdgeStore) -> None:
    index = make_index(store)
    index.ingest([replace(OTHER, title=""), Document(id="plain", title="", text="no heading here")])
    assert index.get("it/vpn").document.title == "VPN"
    assert index.get("plain").document.title == "plain"


def test_the_first_batch_fixes_the_mean_chunk_length_and_encodes_with_it(store: EdgeStore) -> None:
    index = make_index(store)
    index.ingest([V1, OTHER])
    chunks = [c for d in (V1, OTHER) for c in index.chunker.chunk(d)]
    terms = [index.encoder.tokenizer.tokens(c.embed_text) for c in chunks]
    assert index.manifest is not None
    assert index.manifest.bm25.avg_len == pytest.approx(sum(map(len, terms)) / len(terms))
    assert index.manifest.bm25.avg_len != Bm25Params().avg_len
    points, _ = store.dump(None, 100)
    stored = {p.payload["text"]: p.sparse for p in points if p.payload["kind"] == "chunk"}
    assert len(stored) == len(chunks) > 2
    for c in chunks:  # the engine keeps float32 weights
        want, got = index.encoder.encode_document(c.embed_text), stored[c.text]
        assert got is not None
        assert got.indices == want.indices
        assert got.values == pytest.approx(want.values, rel=1e-6)


def test_manifest_guards_against_another_model(tmp_path: Path) -> None:
    s = EdgeStore(tmp_path / "index")
    index = make_index(s)
    index.ingest([V1])
    assert index.manifest is not None
    assert index.manifest.bm25.avg_len > 1
    s.close()
    again = EdgeStore(tmp_path / "index")
    reopened = make_index(again)
    assert reopened.manifest == index.manifest
    assert reopened.get("policy/pw").document == V1
    with pytest.raises(IndexMismatch, match="embedding model"):
        Index(again, FakeEmbedder(name="other-model"), Chunker(ChunkerConfig()), TokenizerConfig(), Bm25Params())
    older = replace(index.manifest, schema_version=1)
    again.upsert([StorePoint(MANIFEST_ID, {"kind": "manifest", **asdict(older)})])
    with pytest.raises(IndexMismatch, match="payload schema version 1"):
        make_index(again)
    again.upsert([StorePoint(MANIFEST_ID, {"kind": "manifest", **asdict(index.manifest)})])
    with pytest.raises(IndexMismatch, match="tokenizer"):
        Index(again, FakeEmbedder(), Chunker(ChunkerConfig()), TokenizerConfig(stemmer=None), Bm25Params())
    again.close()


def test_an_index_without_a_manifest_adopts_one_written_since_it_opened(store: EdgeStore) -> None:
    """Two replicas opened on an empty collection (or one opened before `plumbline import`): the second to write
    uses the first one's manifest, measured BM25 mean included, instead of overwriting it with its own."""
    first, second = make_index(store), make_index(store)
    first.ingest([V1])
    assert first.manifest is not None
    long_doc = replace(OTHER, text="# VPN\n\n" + "Connect with lkconnect up and wait for the green light. " * 30)
    second.ingest([long_doc])
    assert second.manifest == first.manifest
    assert make_index(store).manifest == first.manifest


class RecordingDurability(FlakyStore):
    """Records, for each upsert, the kind of its first point and whether it asked to be made durable."""

    def __init__(self, inner: VectorStore) -> None:
        super().__init__(inner, fail_on_upsert=-1)
        self.writes: list[tuple[str, bool]] = []

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        self.writes.append((points[0].payload["kind"], durable))
        super().upsert(points, durable=durable)


def test_an_ingest_is_made_durable_at_its_commit_marker_only(store: EdgeStore, handbook_docs: list[Document]) -> None:
    recording = RecordingDurability(store)
    make_index(recording).ingest(handbook_docs[:40])
    kinds = [kind for kind, _ in recording.writes]
    assert kinds.count("chunk") >= 2  # several write batches
    assert recording.writes[-1] == ("head", True)  # the commit flushes (and runs the optimiser) once
    assert [durable for kind, durable in recording.writes if kind != "head"] == [False] * (len(kinds) - 1)


def test_a_documents_fingerprint_is_unchanged_by_serialising_the_settings_once(store: EdgeStore) -> None:
    """Fingerprints are stored in every head: a different text would make every document look changed (re-embedded
    on its next ingest) after an upgrade."""
    index = make_index(store)
    for doc in (V1, replace(V2, metadata={"ö": [1, 2.5, None]}, tags=("b", "a"))):
        settings = [asdict(index.chunker.config), asdict(Manifest("fake-bow", 64, TokenizerConfig(), Bm25Params()))]
        blob = json.dumps([asdict(doc), *settings], sort_keys=True, default=str)
        assert index._fingerprint(doc) == hashlib.sha256(blob.encode()).hexdigest()


class DeleteCountingStore(EdgeStore):
    """The embedded store, counting its deletes (each one a flush and an optimiser run)."""

    deletes = 0

    def delete(self, where: Clause) -> None:
        self.deletes += 1
        super().delete(where)


def test_an_ingest_deletes_only_when_an_older_generation_exists(tmp_path: Path) -> None:
    store = DeleteCountingStore(tmp_path / "index")
    index = make_index(store)
    index.ingest([V1, OTHER])  # new documents: nothing older to delete, no durable write for it
    assert store.deletes == 0
    index.ingest([V2])  # a changed document: its old generation goes
    assert store.deletes == 1
    assert store.count(Clause(must=(Match("doc_id", V2.id),))) == store.count(
        Clause(must=(Match("doc_id", V2.id), Match("gen", index.get(V2.id).generation)))
    )
    store.close()


class Float64Embedder(FakeEmbedder):
    """A fake whose vectors come as float64 (as a model's own code may give them)."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[override]
        return np.asarray(super().embed_documents(texts), dtype=np.float64) / 3


def test_a_float64_embedding_is_stored_as_its_float32_values(store: EdgeStore) -> None:
    index = Index(
        store, Float64Embedder(), Chunker(ChunkerConfig(size=200, overlap=0)), TokenizerConfig(), Bm25Params()
    )
    index.ingest([OTHER])
    points, _ = store.dump(None, 100)
    stored = [p.dense for p in points if p.payload.get("kind") == "chunk"]
    expected = Float64Embedder().embed_documents([c.embed_text for c in index.chunker.chunk(OTHER)])
    assert len(stored) == len(expected) == 1
    want = expected[0].astype(np.float32)
    np.testing.assert_allclose(stored[0], want / np.linalg.norm(want), rtol=1e-6)  # the engine normalises for cosine


def test_a_tenant_cannot_hold_more_documents_than_its_cap(store: EdgeStore) -> None:
    index = make_index(store, limits=IndexLimits(tenant_max_documents=2))
    acme = [replace(OTHER, id=f"acme/{n}", tenant="acme") for n in range(3)]
    index.ingest(acme[:2])
    with pytest.raises(InsufficientStorage, match=r"tenant 'acme' holds 2 documents and this batch adds 1 new"):
        index.ingest([replace(acme[0], text="# VPN\n\nReconnect.\n"), acme[2]])  # a replacement rides along
    assert index.documents() == 2  # the batch changed nothing
    assert "Reconnect." not in texts(index, "acme/0")
    index.ingest([replace(acme[0], text="# VPN\n\nReconnect.\n")])  # replacing what it holds adds nothing
    assert "Reconnect." in texts(index, "acme/0")
    index.ingest([replace(OTHER, id=f"beta/{n}", tenant="beta") for n in range(2)])  # another tenant's own cap
    index.ingest([replace(OTHER, id=f"shared/{n}") for n in range(3)])  # documents of no tenant are not capped
    index.delete("acme/1", lambda _: True)
    index.ingest([acme[2]])  # a deletion frees its place
    assert index.documents() == 7
