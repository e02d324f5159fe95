"""One contract suite, run over every VectorStore adapter (qdrant-client congruence style)."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient

from service.filters import Clause, DateRange, HasId, Match, MatchAny, NumberRange
from service.stores import edge as edge_module
from service.stores.base import DENSE, SPARSE, SparseVector, StorePoint, VectorQuery, VectorStore
from service.stores.edge import EdgeStore
from service.stores.mirrored import MirroredStore
from service.stores.qdrant import QdrantOptions, QdrantStore, connect
from tests.service.stores.fake_qdrant import FakeQdrantServer

CHUNKS = Clause(must=(Match("kind", "chunk"),))


def _id(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def _points() -> list[StorePoint]:
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    out = []
    for i in range(12):
        payload = {
            "kind": "chunk",
            "chunk_id": f"d{i % 4}#{i}",
            "doc_id": f"d{i % 4}",
            "gen": 1 + i % 2,
            "tenant": "acme" if i % 3 else "globex",
            "tags": ["billing"] if i % 2 else ["hr", "it"],
            "status": "current" if i % 5 else "superseded",
            "updated_at": (base + dt.timedelta(days=i)).isoformat(),
            "metadata": {"days": i * 10, "owner": "ana" if i < 6 else "bo"},
            "text": f"text {i}",
        }
        if i % 4 == 0:
            payload["valid_until"] = (base + dt.timedelta(days=30 + i)).isoformat()
        dense = [1.0, i / 10, (i % 3) / 3, 0.5]
        sparse = SparseVector((1, 2 + i % 3), (1.0 + i / 10, 0.5))
        out.append(StorePoint(_id(i), payload, dense=dense, sparse=sparse))
    out.append(StorePoint(_id(99), {"kind": "manifest", "note": "no vectors"}))
    return out


# what a production collection is created with (int8, HNSW, on-disk storage, shards): the suite must pass with it
CLUSTER = QdrantOptions(shards=2, on_disk=True, hnsw_m=16, hnsw_ef=64, quantization=True, rescore=True)


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeQdrantServer]:
    server = FakeQdrantServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(
    params=["edge", pytest.param("edge-two-copies", marks=pytest.mark.engine), "qdrant-memory", "qdrant-http"]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s: VectorStore
    if request.param == "edge":
        s = EdgeStore(tmp_path / "index")
    elif request.param == "edge-two-copies":
        s = MirroredStore(tmp_path / "index")
    elif request.param == "qdrant-memory":
        s = QdrantStore(QdrantClient(":memory:"), "t", CLUSTER)
    else:  # the real client over real HTTP, to the fake server (one collection per test)
        server = request.getfixturevalue("fake_server")
        s = QdrantStore(connect(server.url, None, CLUSTER), tmp_path.name, CLUSTER)
    s.ensure_schema(4)
    s.ensure_schema(4)  # idempotent
    s.upsert(_points())
    yield s
    s.close()


def _ids(points: list) -> list[str]:
    return [p.payload["chunk_id"] for p in points]


def test_counts_and_retrieve(store: VectorStore) -> None:
    assert store.count(Clause()) == 13
    assert store.count(CHUNKS) == 12
    [manifest] = store.retrieve([_id(99)])
    assert manifest.payload["note"] == "no vectors"
    got = store.retrieve([_id(3), "00000000-0000-0000-0000-000000000777"])
    assert [p.payload["chunk_id"] for p in got] == ["d3#3"]


def test_payload_round_trip(store: VectorStore) -> None:
    [p] = store.retrieve([_id(4)])
    assert p.payload["metadata"] == {"days": 40, "owner": "ana"}
    assert p.payload["tags"] == ["hr", "it"]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (Match("tenant", "globex"), {0, 3, 6, 9}),
        (MatchAny("tags", ("billing",)), {1, 3, 5, 7, 9, 11}),
        (MatchAny("doc_id", ("d1", "d2")), {1, 2, 5, 6, 9, 10}),
        (Match("gen", 2), {1, 3, 5, 7, 9, 11}),
        (NumberRange("gen", lt=2), {0, 2, 4, 6, 8, 10}),
        (NumberRange("metadata.days", gte=30, lt=60), {3, 4, 5}),
        (Match("metadata.owner", "bo"), {6, 7, 8, 9, 10, 11}),
        (DateRange("updated_at", gte=dt.datetime(2026, 1, 10, tzinfo=dt.UTC)), {9, 10, 11}),
        (DateRange("valid_until", gt=dt.datetime(2026, 2, 5, tzinfo=dt.UTC)), {8}),
        (
            Clause(
                should=(Match("tenant", "globex"), DateRange("valid_until", gt=dt.datetime(2026, 2, 5, tzinfo=dt.UTC)))
            ),
            {0, 3, 6, 8, 9},
        ),
        (HasId((_id(2), _id(7))), {2, 7}),
        (Clause(must_not=(Match("status", "current"),)), {0, 5, 10}),
    ],
)
def test_filters_select_the_same_points(store: VectorStore, where: object, expected: set[int]) -> None:
    clause = Clause(must=(Match("kind", "chunk"), where))  # type: ignore[arg-type]
    got = {int(p.payload["chunk_id"].split("#")[1]) for p in store.scroll(clause, limit=100)}
    assert got == expected
    assert store.count(clause) == len(expected)


def _cosine_order(query: list[float], allowed: set[int]) -> list[str]:
    q = np.array(query) / np.linalg.norm(query)
    scored = []
    for i, p in enumerate(_points()[:12]):
        if i in allowed:
            v = np.array(p.dense) / np.linalg.norm(p.dense)
            scored.append((-float(q @ v), p.payload["chunk_id"]))
    return [c for _, c in sorted(scored)]


def test_dense_and_sparse_queries_are_filtered_inside_the_engine(store: VectorStore) -> None:
    acme = Clause(must=(Match("kind", "chunk"), Match("tenant", "acme")))
    acme_points = {i for i in range(12) if i % 3}
    query = [1.0, 1.1, 0.0, 0.5]
    dense, sparse = store.query(
        [
            VectorQuery(DENSE, query, acme, 3),
            VectorQuery(SPARSE, SparseVector((3,), (1.0,)), acme, 10),
        ]
    )
    assert _ids(dense) == _cosine_order(query, acme_points)[:3]
    assert set(dense[0].payload) == {"chunk_id", "doc_id", "gen"}  # candidates carry only what fusion needs
    assert [p.score for p in dense] == sorted((p.score for p in dense), reverse=True)
    # term 3 sits in chunks i % 3 == 1; the filter must keep out globex chunks (i % 3 == 0) before the limit
    assert sorted(_ids(sparse)) == sorted(f"d{i % 4}#{i}" for i in range(12) if i % 3 == 1)


def test_sparse_scores_use_idf(store: VectorStore) -> None:
    # same weight in the point for both terms: the rarer term (in a third of the chunks) must score higher
    [common], [rare] = store.query(
        [
            VectorQuery(
                SPARSE, SparseVector((1,), (1.0,)), Clause(must=(Match("kind", "chunk"), Match("chunk_id", "d0#4"))), 1
            ),
            VectorQuery(
                SPARSE, SparseVector((3,), (1.0,)), Clause(must=(Match("kind", "chunk"), Match("chunk_id", "d0#4"))), 1
            ),
        ]
    )
    # chunk 4 has term 1 at weight 1.4 and term 3 at 0.5; IDF of term 1 (in all 12) is far below term 3 (in 4)
    assert common.score / 1.4 < rare.score / 0.5


def _idf(points: int, with_term: int) -> float:
    return math.log(1 + (points - with_term + 0.5) / (with_term + 0.5))


def test_sparse_idf_over_a_corpus_counts_only_its_points(store: VectorStore) -> None:
    acme = Clause(must=(Match("tenant", "acme"),))

    def score(corpus: Clause | None) -> float:
        chunk_1 = Clause(must=(Match("chunk_id", "d1#1"),))  # term 3 at weight 0.5
        [[point]] = store.query([VectorQuery(SPARSE, SparseVector((3,), (1.0,)), chunk_1, 1, corpus=corpus)])
        return point.score

    # acme holds 8 of the 12 chunks (i % 3 != 0), 4 of them with term 3 (i % 3 == 1); record points have no vector
    assert score(acme) == pytest.approx(0.5 * _idf(8, 4), rel=1e-5)
    assert score(None) == pytest.approx(0.5 * _idf(12, 4), rel=1e-5)
    globex = [
        StorePoint(
            _id(50 + i),
            {"kind": "chunk", "chunk_id": f"g#{i}", "doc_id": "g", "gen": 1, "tenant": "globex"},
            dense=[0.0, 1.0, 0.0, 0.0],
            sparse=SparseVector((3,), (1.0,)),
        )
        for i in range(6)
    ]
    store.upsert(globex)  # another tenant's chunks holding term 3: the collection's IDF of it falls, acme's does not
    assert score(acme) == pytest.approx(0.5 * _idf(8, 4), rel=1e-5)
    assert score(None) == pytest.approx(0.5 * _idf(18, 10), rel=1e-5)
    store.delete(Clause(must=(Match("chunk_id", "d0#4"),)))  # an acme chunk with term 3
    assert score(acme) == pytest.approx(0.5 * _idf(7, 3), rel=1e-5)


def test_delete_by_filter(store: VectorStore) -> None:
    store.delete(Clause(must=(Match("doc_id", "d1"), NumberRange("gen", lt=2))))
    # d1 holds chunks 1, 5, 9, all generation 2: nothing of d1 is older than 2
    assert {p.payload["chunk_id"] for p in store.scroll(Clause(must=(Match("doc_id", "d1"),)), 100)} == {
        "d1#1",
        "d1#5",
        "d1#9",
    }
    store.delete(Clause(must=(Match("doc_id", "d0"), NumberRange("gen", lt=2))))  # d0: chunks 0, 4, 8, gen 1
    assert store.scroll(Clause(must=(Match("doc_id", "d0"),)), 100) == []
    store.delete(Clause(must=(Match("kind", "chunk"),)))
    assert store.count(CHUNKS) == 0
    assert store.count(Clause()) == 1


def test_set_payload_by_filter(store: VectorStore) -> None:
    store.set_payload(Clause(must=(Match("doc_id", "d1"),)), {"status": "superseded", "superseded_by": "d9"})
    changed = store.scroll(Clause(must=(Match("status", "superseded"),)), 100, fields=("chunk_id", "superseded_by"))
    # chunks 0, 5 and 10 were superseded already; d1 holds chunks 1, 5 and 9
    assert {p.payload["chunk_id"] for p in changed} == {"d0#0", "d1#1", "d1#5", "d1#9", "d2#10"}
    assert {p.payload["chunk_id"] for p in changed if p.payload.get("superseded_by") == "d9"} == {
        "d1#1",
        "d1#5",
        "d1#9",
    }
    assert all(set(p.payload) <= {"chunk_id", "superseded_by"} for p in changed)  # only the fields asked for


# A child process writes points, acknowledging each batch once `upsert` has returned, then SIGKILLs itself
# without closing the store: nothing gets a chance to flush on the way out.
_WRITE_THEN_DIE = """
import json, os, signal, sys
from pathlib import Path
from service.stores.base import SparseVector
from service.stores.base import StorePoint
from service.stores.edge import EdgeStore
from service.stores.mirrored import MirroredStore

spec = json.load(sys.stdin)
store = EdgeStore(Path(spec["path"]))
store.ensure_schema(4)
for batch in spec["batches"]:
    store.upsert([
        StorePoint(p["id"], p["payload"], p["dense"], SparseVector(*p["sparse"]) if p["sparse"] else None)
        for p in batch
    ])
    print("acked", *[p["id"] for p in batch], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _as_json(p: StorePoint) -> dict[str, Any]:
    sparse = [list(p.sparse.indices), list(p.sparse.values)] if p.sparse else None
    return {"id": p.id, "payload": dict(p.payload), "dense": p.dense, "sparse": sparse}


@pytest.mark.process
def test_edge_store_keeps_every_acknowledged_write_after_a_sigkill(tmp_path: Path) -> None:
    points = _points()
    batches = [[_as_json(p) for p in points[i : i + 4]] for i in range(0, len(points), 4)]
    root = Path(edge_module.__file__).resolve().parents[2]  # the child imports the same `service` as this process
    child = subprocess.run(
        [sys.executable, "-c", _WRITE_THEN_DIE],
        input=json.dumps({"path": str(tmp_path / "index"), "batches": batches}),
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    acked = [i for line in child.stdout.splitlines() if line.startswith("acked ") for i in line.split()[1:]]
    assert acked == [p.id for p in points]  # every batch was acknowledged before the kill

    again = EdgeStore(tmp_path / "index")  # no ensure_schema: what is there is what the child left
    try:
        assert {p.id: dict(p.payload) for p in again.retrieve(acked)} == {p.id: dict(p.payload) for p in points}
        assert again.count(Clause()) == 13
        assert again.count(CHUNKS) == 12
        query = [1.0, 1.1, 0.0, 0.5]
        dense, sparse = again.query(
            [VectorQuery(DENSE, query, CHUNKS, 20), VectorQuery(SPARSE, SparseVector((1,), (1.0,)), CHUNKS, 20)]
        )
        assert _ids(dense) == _cosine_order(query, set(range(12)))
        assert sorted(_ids(sparse)) == sorted(p.payload["chunk_id"] for p in points[:12])  # term 1 is in every chunk
        globex = again.scroll(Clause(must=(Match("tenant", "globex"),)), 100)  # a payload index still filters
        assert set(_ids(globex)) == {"d0#0", "d3#3", "d2#6", "d1#9"}
    finally:
        again.close()


def test_page_walks_every_point_once_in_id_order(store: VectorStore) -> None:
    seen: list[str] = []
    offset: str | None = None
    for _ in range(20):  # 13 points in pages of 5: three pages
        page, offset = store.page(offset, 5, ("kind",))
        seen += [p.id for p in page]
        assert all(set(p.payload) <= {"kind"} for p in page)
        if offset is None:
            break
    assert offset is None
    assert seen == sorted(p.id for p in _points())
    ids_only, _ = store.page(None, 3, ())
    assert [p.payload for p in ids_only] == [{}, {}, {}]


def test_page_with_a_filter_walks_only_the_matching_points(store: VectorStore) -> None:
    globex = Clause(must=(Match("tenant", "globex"),))
    first, offset = store.page(None, 3, ("tenant",), globex)
    assert offset is not None
    rest, last = store.page(offset, 3, ("tenant",), globex)
    assert last is None
    assert [p.id for p in first + rest] == sorted(p.id for p in _points() if p.payload.get("tenant") == "globex")
    assert {p.payload["tenant"] for p in first + rest} == {"globex"}


def test_purge_deletes_by_id_and_health_is_clear(store: VectorStore) -> None:
    store.purge([_id(0), _id(99), "00000000-0000-0000-0000-000000000777"])
    store.purge([])
    assert store.count(Clause()) == 11
    assert store.retrieve([_id(0), _id(99)]) == []
    assert store.health() is None


def test_dump_gives_back_every_point_whole(store: VectorStore) -> None:
    dumped, offset, pages = [], None, 0
    while True:
        page, offset = store.dump(offset, 5)
        dumped += page
        pages += 1
        if offset is None:
            break
    assert pages == 3
    by_id = {p.id: p for p in dumped}
    assert len(by_id) == len(dumped) == 13
    for original in _points():
        back = by_id[original.id]
        assert back.payload == original.payload
        if original.dense is None or original.sparse is None:  # the manifest: a record without vectors
            assert back.dense is None
            assert back.sparse is None
        else:
            assert back.sparse is not None
            assert back.sparse.indices == original.sparse.indices
            assert back.sparse.values == pytest.approx(original.sparse.values, rel=1e-6)  # kept as float32
            unit = np.asarray(original.dense) / np.linalg.norm(original.dense)
            assert back.dense == pytest.approx(unit.tolist(), abs=1e-6)
