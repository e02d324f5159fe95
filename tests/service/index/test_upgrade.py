"""An index written by payload schema 3 is upgraded to 4 when opened: fresh-only search sees what it saw."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, replace
from pathlib import Path

from service.domain import Document
from service.filters import Clause, of_kind
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.stores.base import StorePoint
from service.stores.edge import EdgeStore
from service.stores.payload import MANIFEST_ID, STALE
from tests.fakes import FakeEmbedder

DOCS = [
    Document(id="open", title="Open", text="refund policy for annual plans"),
    Document(
        id="expired",
        title="Expired",
        text="refund policy for the 2020 plans",
        valid_until=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
    ),
    Document(id="old", title="Old", text="refund policy, old pricing page"),
    Document(id="new", title="New", text="refund policy, new pricing page", supersedes="old"),
    Document(
        id="later", title="Later", text="refund policy until 2999", valid_until=dt.datetime(2999, 1, 1, tzinfo=dt.UTC)
    ),
]


def fresh_ids(index: Index) -> set[str]:
    pipeline = SearchPipeline(index.store, index.embedder, index.encoder, None)
    return {h.chunk.doc_id for h in pipeline.search("refund policy", SearchParams(k=10, fresh_only=True)).hits}


def open_index(store: EdgeStore) -> Index:
    return Index(store, FakeEmbedder(), Chunker(ChunkerConfig(200, 0)), TokenizerConfig(), Bm25Params())


def test_a_schema_3_index_is_upgraded_on_open(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "index")
    index = open_index(store)
    index.ingest(DOCS)
    assert fresh_ids(index) == {"open", "new", "later"}
    # what schema 3 left: no usable fresh_until, no valid_until on heads, and the manifest saying 3
    store.set_payload(Clause(), {"fresh_until": STALE})
    store.set_payload(of_kind("head"), {"valid_until": None})
    assert index.manifest is not None
    old = replace(index.manifest, schema_version=3)
    store.upsert([StorePoint(MANIFEST_ID, {"kind": "manifest", **asdict(old)})])
    assert fresh_ids(open_index(store)) == {"open", "new", "later"}
    assert open_index(store).manifest == replace(old, schema_version=4)
    heads = {
        p.payload["doc_id"]: p.payload["valid_until"]
        for p in store.scroll(of_kind("head"), 10, ("doc_id", "valid_until"))
    }
    assert heads["later"].startswith("2999-01-01")
    store.close()
