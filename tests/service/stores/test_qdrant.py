"""The Qdrant server adapter over real HTTP: the collection's options, the API key, retries, bounded failure when
the server is away, readiness, and recovery by itself (against the fake server of `fake_qdrant`, or no server)."""

from __future__ import annotations

import socket
import time

import pytest

from service.errors import StoreUnavailable, StoreUnreachable
from service.filters import Clause, Match
from service.stores.base import DENSE, PAYLOAD_INDEXES, SPARSE, SparseVector, StorePoint, VectorQuery
from service.stores.qdrant import BACKOFF_SECONDS, PROBE_SECONDS, QdrantOptions, QdrantStore, connect
from tests.service.stores.fake_qdrant import FakeQdrantServer
from tests.waiting import until

FAST = QdrantOptions(timeout=0.5, connect_timeout=0.5, retries=2)
POINT = StorePoint(
    "00000000-0000-0000-0000-000000000001", {"kind": "chunk"}, dense=[1.0, 0.0], sparse=SparseVector((1,), (1.0,))
)


def _store(url: str, options: QdrantOptions = FAST, api_key: str | None = None) -> QdrantStore:
    return QdrantStore(connect(url, api_key, options), "c", options)


def _search(store: QdrantStore) -> list[list[object]]:
    return list(store.query([VectorQuery(DENSE, [1.0, 0.0], Clause(), 3)]))


def test_the_collection_is_created_with_the_configured_layout_and_searched_with_hnsw_ef(
    fake_qdrant: FakeQdrantServer,
) -> None:
    options = QdrantOptions(shards=3, replication_factor=2, write_consistency=2, on_disk=True, hnsw_m=24, hnsw_ef=77)
    store = _store(fake_qdrant.url, options)
    store.ensure_schema(2)
    created = fake_qdrant.app.state.created
    assert (created.shard_number, created.replication_factor, created.write_consistency_factor) == (3, 2, 2)
    assert created.on_disk_payload is True
    assert created.vectors[DENSE].on_disk is True
    assert created.sparse_vectors[SPARSE].index.on_disk is True
    assert (created.hnsw_config.m, created.hnsw_config.ef_construct) == (24, 100)
    assert created.quantization_config.scalar.type == "int8"
    indexed = fake_qdrant.app.state.indexed
    assert set(indexed) == set(PAYLOAD_INDEXES)
    assert indexed["tenant"].is_tenant is True
    assert indexed["updated_at"] == "datetime"
    store.upsert([POINT])
    store.query(
        [VectorQuery(DENSE, [1.0, 0.0], Clause(), 3), VectorQuery(SPARSE, SparseVector((1,), (1.0,)), Clause(), 3)]
    )
    dense, sparse = fake_qdrant.app.state.searches
    assert dense.params.hnsw_ef == 77
    assert dense.params.quantization.rescore is True
    assert sparse.params is None


def test_a_keyword_querys_corpus_is_sent_as_its_idf_corpus(fake_qdrant: FakeQdrantServer) -> None:
    store = _store(fake_qdrant.url)
    store.ensure_schema(2)
    store.upsert([POINT])
    acme = Clause(must=(Match("tenant", "acme"),))
    store.query([VectorQuery(SPARSE, SparseVector((1,), (1.0,)), Clause(), 3, corpus=acme)])
    [sparse] = fake_qdrant.app.state.searches
    assert sparse.params.idf.corpus.must[0].key == "tenant"
    assert sparse.params.idf.corpus.must[0].match.value == "acme"


@pytest.mark.parametrize(("version", "refused"), [("1.18.2", True), ("v1.19.0-rc1", False), ("1.19.1", False)])
def test_a_server_too_old_for_an_idf_corpus_is_refused(
    fake_qdrant: FakeQdrantServer, version: str, refused: bool
) -> None:
    fake_qdrant.app.state.version = version
    store = _store(fake_qdrant.url)
    if refused:
        with pytest.raises(StoreUnavailable, match=r"runs version 1\.18\.2; Plumbline needs 1\.19 or later"):
            store.ensure_schema(2)
        assert not fake_qdrant.local.collection_exists("c")  # refused before anything was created
    else:
        store.ensure_schema(2)
    store.close()


def test_without_quantisation_the_collection_has_none(fake_qdrant: FakeQdrantServer) -> None:
    _store(fake_qdrant.url, QdrantOptions(quantization=False)).ensure_schema(2)
    assert fake_qdrant.app.state.created.quantization_config is None


def test_the_api_key_is_sent_and_a_refused_key_says_so() -> None:
    keyed = FakeQdrantServer(api_key="s3cret")
    keyed.start()
    try:
        _store(keyed.url, api_key="s3cret").ensure_schema(2)
        wrong = _store(keyed.url, api_key="nope")
        with pytest.raises(StoreUnavailable, match="refused the API key"):
            wrong.ensure_schema(2)
        assert "API key" in (wrong.health() or "")
        wrong.close()
    finally:
        keyed.stop()


def test_transient_answers_are_retried_and_other_errors_are_not(fake_qdrant: FakeQdrantServer) -> None:
    store = _store(fake_qdrant.url)
    store.ensure_schema(2)
    store.upsert([POINT])
    fake_qdrant.app.state.failures = [503, 502]  # two transient failures: the third attempt succeeds
    assert len(_search(store)[0]) == 1
    assert store.health() is None
    before = fake_qdrant.app.state.requests
    fake_qdrant.app.state.failures = [400]  # a request the server rejects: retrying would not help
    with pytest.raises(StoreUnavailable, match="answered 400"):
        _search(store)
    assert fake_qdrant.app.state.requests == before + 1
    assert store.health() is None  # the server is up: readiness stays true


def test_a_rate_limited_request_waits_as_told_and_is_retried(fake_qdrant: FakeQdrantServer) -> None:
    store = _store(fake_qdrant.url)
    store.ensure_schema(2)
    store.upsert([POINT])
    fake_qdrant.app.state.failures = [429]  # answered with Retry-After: 1
    started = time.monotonic()
    assert len(_search(store)[0]) == 1
    assert time.monotonic() - started >= 1.0
    fake_qdrant.app.state.failures = [429, 429, 429]  # past the retries: unreachable, and said so
    with pytest.raises(StoreUnreachable, match="rate limiting"):
        _search(store)
    store.close()


def test_a_port_nothing_listens_on_fails_within_the_bound_then_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = _store(f"http://127.0.0.1:{port}")
    waits: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr("service.stores.qdrant.time.sleep", lambda s: (waits.append(s), real_sleep(s)))
    started = time.monotonic()
    with pytest.raises(StoreUnreachable, match="could not search: ConnectError"):
        _search(store)
    assert time.monotonic() - started < FAST.worst_case_seconds
    assert waits == [BACKOFF_SECONDS, 2 * BACKOFF_SECONDS]  # three attempts, with backoff between them
    assert "Qdrant server is unavailable" in (store.health() or "")
    waits.clear()
    with pytest.raises(StoreUnreachable):
        _search(store)
    assert waits == []  # marked down: one attempt, no backoff
    store.close()


def test_a_server_that_never_answers_times_out_within_the_bound() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        store = _store(f"http://127.0.0.1:{silent.getsockname()[1]}", QdrantOptions(timeout=0.3, retries=1))
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="no answer in time"):
            _search(store)
        took = time.monotonic() - started
        assert 0.6 <= took < QdrantOptions(timeout=0.3, retries=1).worst_case_seconds
        store.close()


def test_the_store_recovers_by_itself_when_the_server_returns(fake_qdrant: FakeQdrantServer) -> None:
    store = _store(fake_qdrant.url)
    store.ensure_schema(2)
    store.upsert([POINT])
    fake_qdrant.stop()
    with pytest.raises(StoreUnavailable):
        _search(store)
    assert store.health() is not None
    fake_qdrant.start()  # same port, same points: a restarted server
    assert until(lambda: store.health() is None, 5 * PROBE_SECONDS)  # no call made: the probe notices
    assert len(_search(store)[0]) == 1
    store.close()
