"""The integrity check and repair (`service.index.integrity`, `Index.check`): each state here is one a crash or an
older version left behind, built on the real embedded engine."""

from __future__ import annotations

from pathlib import Path

from service.domain import DocStatus, Document
from service.filters import Clause, Match, of_kind
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.stores.base import StorePoint
from service.stores.edge import EdgeStore
from service.stores.payload import chunk_point_id, document_point_id
from tests.fakes import FakeEmbedder

POL_A = Document(id="pol/a", title="Travel policy 2025", text="# Travel\n\nEconomy class on every flight.")
POL_B = Document(
    id="pol/b", title="Travel policy 2026", text="# Travel\n\nBusiness class past six hours.", supersedes="pol/a"
)


def open_index(path: Path) -> Index:
    store = EdgeStore(path)
    return Index(store, FakeEmbedder(), Chunker(ChunkerConfig(size=200, overlap=0)), TokenizerConfig(), Bm25Params())


def test_a_clean_index_is_clean(tmp_path: Path) -> None:
    index = open_index(tmp_path / "index")
    index.ingest([POL_A, POL_B])
    report, done, _ = index.check(repair=True)
    assert report.clean
    assert done == []
    assert report.documents == 2
    assert report.lines()[0] == f"{report.points} points, 2 documents"


def test_a_status_update_lost_in_a_crash_is_repaired_by_any_re_ingest_and_on_start(tmp_path: Path) -> None:
    index = open_index(tmp_path / "index")
    index.ingest([POL_A, POL_B])
    assert index.get("pol/a").superseded_by == "pol/b"
    # what SIGKILL between pol/b's commit and the status update leaves: pol/a still says current
    index.store.set_payload(Clause(must=(Match("doc_id", "pol/a"),)), {"status": "current", "superseded_by": None})
    report, _, _ = index.check()
    assert dict(report.statuses) == {"pol/a": ("superseded", "pol/b")}
    assert "status of 'pol/a' should be superseded (superseded by 'pol/b')" in report.lines()
    assert index.ingest([POL_B]).unchanged == 1  # re-sending either document, unchanged, repairs it
    assert index.get("pol/a").superseded_by == "pol/b"
    assert index.check()[0].clean
    index.store.set_payload(Clause(must=(Match("doc_id", "pol/a"),)), {"status": "current", "superseded_by": None})
    report, done, _ = index.check(repair=True, everything=False)  # what the server does on start
    assert done == ["corrected the status of 1 document(s)"]
    assert index.check()[0].clean
    assert index.store.count(Clause(must=(Match("doc_id", "pol/a"), Match("status", DocStatus.SUPERSEDED)))) == 3


def test_leftovers_are_found_and_removed(tmp_path: Path) -> None:
    index = open_index(tmp_path / "index")
    index.ingest([POL_A])
    committed = index.get("pol/a")
    # a crash before the old generation's deletion (older) and before a commit (newer): neither is read
    points = index.store.scroll(Clause(must=(Match("doc_id", "pol/a"), Match("kind", "chunk"))), limit=10)
    record = index.store.scroll(Clause(must=(Match("doc_id", "pol/a"), Match("kind", "document"))), limit=1)[0]
    vectors = FakeEmbedder().embed_documents(["x"])[0].tolist()
    for gen in (committed.generation - 5, committed.generation + 5):
        index.store.upsert(
            [
                *(
                    StorePoint(chunk_point_id(p.payload["chunk_id"], gen), {**p.payload, "gen": gen}, vectors)
                    for p in points
                ),
                StorePoint(document_point_id("pol/a", gen), {**record.payload, "gen": gen}),
            ]
        )
    report, done, _ = index.check(repair=True, everything=False)
    assert len(report.leftovers) == 2 * (len(points) + 1)
    assert done == [f"removed 0 unreadable and {2 * (len(points) + 1)} leftover point(s)"]
    assert index.check()[0].clean
    assert index.store.count(of_kind("chunk")) == len(points)
    assert index.get("pol/a") == committed


def test_newer_uncommitted_points_within_the_grace_period_are_left_alone(tmp_path: Path) -> None:
    """On a shared Qdrant server another replica may be writing a newer generation right now."""
    index = open_index(tmp_path / "index")
    index.ingest([POL_A])
    gen = index.get("pol/a").generation + 1  # begun a microsecond after the committed one
    record = index.store.scroll(Clause(must=(Match("doc_id", "pol/a"), Match("kind", "document"))), limit=1)[0]
    index.store.upsert([StorePoint(document_point_id("pol/a", gen), {**record.payload, "gen": gen})])
    assert index.check(grace=3600)[0].clean
    assert len(index.check(grace=0)[0].leftovers) == 1


def test_unreadable_points_and_damaged_documents_are_left_on_start_and_removed_by_the_doctor(tmp_path: Path) -> None:
    """An older version let metadata nested 130 deep in: the engine can neither read those points back nor
    delete them the usual way, and reading the document failed with a 500."""
    index = open_index(tmp_path / "index")
    index.ingest([POL_A, POL_B])
    chunk = index.store.scroll(Clause(must=(Match("doc_id", "pol/a"), Match("kind", "chunk"))), limit=1)[0]
    deep: object = 1
    for _ in range(130):
        deep = {"a": deep}
    index.store.upsert([StorePoint(chunk.id, {**chunk.payload, "metadata": deep}, [0.0] * 63 + [1.0])])
    report, done, _ = index.check(repair=True, everything=False)
    assert (report.unreadable, report.damaged, done) == ((chunk.id,), ("pol/a",), [])
    assert "1 damaged document(s), re-ingest them: 'pol/a'" in report.lines()
    report, done, _ = index.check(repair=True)
    assert done == ["removed 1 unreadable and 0 leftover point(s)", "removed damaged document 'pol/a': re-ingest it"]
    assert index.check()[0].clean
    assert index.documents() == 1
    assert index.ingest([POL_A]).chunks == 1  # the engine takes writes, and the document comes back
    assert index.get("pol/a").superseded_by == "pol/b"


def test_leftovers_never_cost_a_search_its_hits(tmp_path: Path) -> None:
    """543 leftovers once made 23 of 78 dense searches at k=50 return fewer than 50 hits."""
    index = open_index(tmp_path / "index")
    docs = [Document(id=f"d{i}", title=f"Doc {i}", text=f"# Doc {i}\n\nvpn error number {i}.") for i in range(60)]
    index.ingest(docs)
    pipeline = SearchPipeline(index.store, index.embedder, index.encoder, None)
    # 200 invisible points of an uncommitted generation, each the best match for the query
    embedder = FakeEmbedder()
    query = "vpn error number"
    vector = embedder.embed_queries([query])[0].tolist()
    head = index.get("d0")
    template = index.store.scroll(Clause(must=(Match("doc_id", "d0"), Match("kind", "chunk"))), limit=1)[0].payload
    leftovers = [
        StorePoint(
            chunk_point_id(f"d0#{n}", head.generation + 1),
            {**template, "chunk_id": f"d0#{n}", "gen": head.generation + 1},
            vector,
            index.encoder.encode_document(query),
        )
        for n in range(200)
    ]
    index.store.upsert(leftovers)
    for mode in ("dense", "keyword", "hybrid"):
        hits = pipeline.search(query, SearchParams(k=50, candidates=50, mode=mode)).hits  # type: ignore[arg-type]
        assert len(hits) == 50, mode
        assert {h.chunk.chunk_id for h in hits} <= {f"d{i}#0" for i in range(60)}
