"""The embedded store past its quantisation threshold: int8 scan, float32 rescoring, still the exact answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from service.filters import Clause, Match, MatchAny
from service.stores import edge, edge_layout
from service.stores.base import DENSE, StorePoint, VectorQuery
from service.stores.edge import EdgeStore
from service.stores.payload import head_point_id

N, DIM = 4_000, 384  # 4,000 x 1.5 KB of float32 is past the 5,000 KB threshold


def _uuid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def _vectors(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _store(path: Path, x: np.ndarray, graph_from: int = edge_layout.GRAPH_FROM) -> EdgeStore:
    store = EdgeStore(path, graph_from=graph_from)
    store.ensure_schema(DIM)
    points = [
        StorePoint(_uuid(i), {"kind": "chunk", "tenant": "acme" if i % 3 else "globex"}, dense=x[i].tolist())
        for i in range(len(x))
    ]
    for start in range(0, len(points), 1_000):  # in batches, as ingest writes them
        store.upsert(points[start : start + 1_000])
    return store


def _exact(x: np.ndarray, q: np.ndarray, allowed: np.ndarray, k: int) -> tuple[list[str], np.ndarray]:
    scores = np.where(allowed, x @ q, -np.inf)
    order = np.argsort(-scores, kind="stable")[:k]
    return [_uuid(int(i)) for i in order], scores[order]


def test_a_quantised_scan_returns_the_exact_top_k_with_exact_scores(tmp_path: Path) -> None:
    x = _vectors(N, seed=0)
    store = _store(tmp_path / "index", x)
    assert store._open.info().indexed_vectors_count >= 3_000  # the optimiser quantised the large segment
    acme = np.array([i % 3 != 0 for i in range(N)])
    for q in _vectors(5, seed=1):
        hits = store.query([VectorQuery(DENSE, q.tolist(), Clause(must=(Match("tenant", "acme"),)), 50)])[0]
        ids, scores = _exact(x, q, acme, 50)
        assert [h.id for h in hits] == ids
        np.testing.assert_allclose([h.score for h in hits], scores, atol=1e-5)  # rescored on float32
    store.close()


def test_writes_after_quantisation_stay_exact_and_survive_reopen(tmp_path: Path) -> None:
    x = _vectors(N, seed=2)
    store = _store(tmp_path / "index", x)
    store.delete(Clause(must=(MatchAny("tenant", ["globex"]),)))
    store.upsert([StorePoint(_uuid(N), {"kind": "chunk", "tenant": "acme"}, dense=x[7].tolist())])  # a near twin
    store.close()
    store = EdgeStore(tmp_path / "index")
    store.ensure_schema(DIM)
    everything = np.array([i % 3 != 0 for i in range(N)] + [True])
    both = np.vstack([x, x[7:8]])
    hits = store.query([VectorQuery(DENSE, x[7].tolist(), Clause(), 20)])[0]
    ids, _ = _exact(both, x[7], everything, 20)
    assert {h.id for h in hits[:2]} == {_uuid(7), _uuid(N)}
    assert [h.id for h in hits[2:]] == ids[2:]
    store.close()


def _graph_segments(index: Path) -> int:
    """Segments of the shard whose dense index is an HNSW graph (m > 0), as the engine records each one's."""
    configs = index.glob("segments/*/vector_index-dense/hnsw_config.json")
    return sum(json.loads(c.read_text())["m"] > 0 for c in configs)


def test_past_graph_from_a_write_builds_graphs_that_answer_as_the_scan_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every segment searched through its graph (by default one under 10,000 KB is still scanned)
    monkeypatch.setattr(edge_layout, "GRAPH", qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=1))
    x = _vectors(N, seed=3)
    below = _store(tmp_path / "below", x, graph_from=N + 1)
    assert not below.graphs
    assert _graph_segments(tmp_path / "below") == 0
    below.close()
    store = _store(tmp_path / "index", x, graph_from=3_000)  # the third batch of 1,000 passes it
    assert store.graphs
    assert _graph_segments(tmp_path / "index") >= 1
    acme = np.array([i % 3 != 0 for i in range(N)])
    queries = [1, 2, 4, 5, 3_998]  # stored acme vectors, each its own nearest neighbour

    def answers(s: EdgeStore) -> list[list[str]]:
        tenant = Clause(must=(Match("tenant", "acme"),))
        return [[h.id for h in s.query([VectorQuery(DENSE, x[i].tolist(), tenant, 10)])[0]] for i in queries]

    found = answers(store)
    assert [ids[0] for ids in found] == [_uuid(i) for i in queries]
    overlap = [len(set(ids) & set(_exact(x, x[i], acme, 10)[0])) / 10 for ids, i in zip(found, queries, strict=True)]
    assert np.mean(overlap) >= 0.9  # approximate, so not always the exact top 10
    store.close()
    again = EdgeStore(tmp_path / "index", graph_from=3_000)
    assert again.graphs  # read back from the shard's configuration
    assert answers(again) == found
    again.close()


def test_searches_while_the_shard_is_reopened_for_graphs_wait_for_it(tmp_path: Path) -> None:
    # one copy in the serving process (`PLUMBLINE_INDEX_COPIES=1`): the switch closes the shard and loads it again
    x = _vectors(2_000, seed=5)
    store = _store(tmp_path / "index", x[:1_000], graph_from=1_500)
    failures: list[Exception] = []
    answers: list[int] = []
    done = threading.Event()

    def search() -> None:
        while not done.is_set():
            try:
                answers.append(len(store.query([VectorQuery(DENSE, x[1].tolist(), Clause(), 5)])[0]))
            except Exception as exc:
                failures.append(exc)

    searcher = threading.Thread(target=search)
    searcher.start()
    try:
        store.upsert([StorePoint(_uuid(i), {"kind": "chunk"}, dense=x[i].tolist()) for i in range(1_000, 2_000)])
    finally:
        done.set()
        searcher.join(30)
    assert store.graphs
    assert failures == []
    assert answers
    assert set(answers) == {5}
    store.close()


def _head(doc_id: str, gen: int) -> StorePoint:
    return StorePoint(head_point_id(doc_id), {"kind": "head", "doc_id": doc_id, "gen": gen})


def test_committed_generations_are_cached_until_a_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EdgeStore(tmp_path / "index")
    store.ensure_schema(DIM)
    store.upsert([_head("a", 1), _head("b", 1)])
    reads: list[list[str]] = []
    real = edge.committed_generations
    monkeypatch.setattr(edge, "committed_generations", lambda s, ids: reads.append(sorted(ids)) or real(s, ids))
    assert store.committed({"a", "b", "c"}) == {"a": 1, "b": 1}
    assert store.committed({"a", "b"}) == {"a": 1, "b": 1}
    assert reads == [["a", "b", "c"]]  # the second answer came from the cache
    store.upsert([_head("a", 2)])  # a write (here a commit) forgets its documents'
    assert store.committed({"a"}) == {"a": 2}
    store.upsert([_head("b", 2)])

    # a read that overlaps a write is answered but not kept: it may have seen the old head
    def overlapping(s: EdgeStore, ids: list[str]) -> dict[str, int]:
        old = real(s, ids)
        s.upsert([_head("b", 3)])
        return old

    monkeypatch.setattr(edge, "committed_generations", overlapping)
    assert store.committed({"b"}) == {"b": 2}
    monkeypatch.setattr(edge, "committed_generations", real)
    assert store.committed({"b"}) == {"b": 3}
    # a read that starts while a write is under way (here just before the engine applies it) is not kept either
    shard = store._shard
    monkeypatch.setattr(store, "_shard", ReadsBeforeEachUpdate(shard, lambda: store.committed({"b"})))
    store.upsert([_head("b", 4)])
    monkeypatch.setattr(store, "_shard", shard)
    assert store.committed({"b"}) == {"b": 4}
    store.close()


def test_a_write_forgets_the_generations_of_the_documents_it_touches_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = EdgeStore(tmp_path / "index")
    store.ensure_schema(DIM)
    store.upsert([_head("a", 1), _head("b", 1), _head("c", 1)])
    reads: list[list[str]] = []
    real = edge.committed_generations
    monkeypatch.setattr(edge, "committed_generations", lambda s, ids: reads.append(sorted(ids)) or real(s, ids))
    abc = {"a": 1, "b": 1, "c": 1}
    assert store.committed(set(abc)) == abc
    store.upsert([_head("a", 2)])  # a commit of a's new generation
    store.delete(Clause(must=(Match("doc_id", "b"), Match("gen", 7))))  # an older generation of b
    store.set_payload(Clause(must=(MatchAny("doc_id", ("a", "b", "c")),)), {"status": "superseded"})  # no head's gen
    assert store.committed(set(abc)) == {"a": 2, "b": 1, "c": 1}
    store.set_payload(Clause(must=(Match("doc_id", "c"),)), {"gen": 5})  # a head's gen: c's
    assert store.committed(set(abc)) == {"a": 2, "b": 1, "c": 5}
    store.delete(Clause(must=(Match("kind", "head"), Match("gen", 2))))  # cannot tell whose: all of them
    assert store.committed(set(abc)) == {"b": 1, "c": 5}
    store.purge([head_point_id("b")])  # ids: all of them
    assert store.committed(set(abc)) == {"c": 5}
    assert reads == [["a", "b", "c"], ["a", "b"], ["c"], ["a", "b", "c"], ["a", "b", "c"]]
    store.close()


def test_an_index_opens_with_its_documents_generations_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EdgeStore(tmp_path / "index")
    store.ensure_schema(DIM)
    store.upsert([_head(f"doc-{i}", i % 3 + 1) for i in range(25)])
    store.close()
    monkeypatch.setattr(edge, "HEADS_PAGE", 10)  # three pages
    again = EdgeStore(tmp_path / "index")
    monkeypatch.setattr(edge, "committed_generations", lambda _store, ids: pytest.fail(f"read {sorted(ids)} again"))
    try:
        assert again.committed({f"doc-{i}" for i in range(25)}) == {f"doc-{i}": i % 3 + 1 for i in range(25)}
    finally:
        again.close()


def test_an_index_with_a_malformed_head_still_opens(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "index")
    store.ensure_schema(DIM)
    store.upsert([_head("a", 1), StorePoint(head_point_id("b"), {"kind": "head", "doc_id": "b", "gen": "none"})])
    store.close()
    again = EdgeStore(tmp_path / "index")  # the generations read at open stop at the bad head
    try:
        assert again.committed({"a"}) == {"a": 1}
    finally:
        again.close()


class ReadsBeforeEachUpdate:
    """A shard that runs `read` just before each update it applies."""

    def __init__(self, shard: object, read: Callable[[], object]) -> None:
        self.shard, self.read = shard, read

    def __getattr__(self, name: str) -> object:
        return getattr(self.shard, name)

    def update(self, operation: object) -> None:
        self.read()
        self.shard.update(operation)  # type: ignore[attr-defined]
