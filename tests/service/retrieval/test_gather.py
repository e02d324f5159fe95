"""The engine's half of a search (`service.retrieval.gather`): the demo handbook with the real model, and an index
kept as two copies, where it runs in an engine process."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from service.domain import Document, FusionMethod, Mode, StageScore
from service.filters import Clause, HasId
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.retrieval.candidates import Candidates
from service.retrieval.gather import Ask, _fuse, _stages
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.stores.base import DENSE, SPARSE, ScoredPoint, VectorQuery, VectorStore
from service.stores.edge import EdgeStore
from service.stores.mirrored import MirroredStore
from tests.fakes import FakeEmbedder


@pytest.fixture(scope="module")
def pipeline(handbook_index: Index) -> SearchPipeline:
    return SearchPipeline(handbook_index.store, handbook_index.embedder, handbook_index.encoder, None)


def test_the_stages_of_the_shown_chunks_only() -> None:
    """A chunk's rank and score in each list that retrieved it, its rescored score (no rank) where one did not, and its
    fusion rank; built for the chunks a search shows, none for the other candidates."""
    c = Candidates(
        lists={DENSE: {"a": 0.9, "b": 0.5}, SPARSE: {"b": 7.0, "c": 3.0}},
        rescored={DENSE: {"a": 0.9, "b": 0.5, "c": 0.1}, SPARSE: {"a": 0.0, "b": 7.0, "c": 3.0}},
    )
    fused = _fuse(c, Ask(None, None, 100, 10, Mode.HYBRID, FusionMethod.WEIGHTED, 0.5, 60, distinct_docs=False))
    fusion = {key: StageScore(rank, score) for rank, (key, score) in enumerate(fused, start=1)}
    assert _stages(c, fused, ["c", "b"]) == {
        "c": {"keyword": StageScore(2, 3.0), "dense": StageScore(None, 0.1), "fusion": fusion["c"]},
        "b": {"dense": StageScore(2, 0.5), "keyword": StageScore(1, 7.0), "fusion": fusion["b"]},
    }


def test_rescoring_asks_the_engine_only_for_the_scores_a_list_lacks(pipeline: SearchPipeline) -> None:
    store, calls = pipeline.store, []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def run(self, work: Callable[..., Any], *args: Any) -> Any:
            return work(self, *args)

        def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
            results = store.query(queries)
            calls.append(list(zip(queries, results, strict=True)))
            return results

    recording = SearchPipeline(Recording(), pipeline.embedder, pipeline.encoder, None)
    result = recording.search("vpn keeps disconnecting LC-419", SearchParams(k=10, candidates=30))
    [retrieved, rescoring] = calls  # no refill: every handbook chunk is committed
    by_rank = {q.using: sorted(points, key=lambda p: (-p.score, p.payload["chunk_id"]))[:30] for q, points in retrieved}
    listed = {using: {p.id for p in points} for using, points in by_rank.items()}
    union = listed[DENSE] | listed[SPARSE]
    asked = {q.using: set(q.filter.must[0].ids) for q, _ in rescoring}  # type: ignore[union-attr]
    assert asked == {DENSE: union - listed[DENSE], SPARSE: union - listed[SPARSE]}
    assert asked[DENSE]
    assert asked[SPARSE]
    # every shown chunk's two scores are what one query over the whole union gives
    vectors = {q.using: q.vector for q, _ in retrieved}
    where = Clause(must=(HasId(tuple(union)),))
    full = store.query([VectorQuery(u, vectors[u], where, len(union), with_payload=False) for u in (DENSE, SPARSE)])
    scores = {u: {p.id: p.score for p in points} for u, points in zip((DENSE, SPARSE), full, strict=True)}
    ids = {p.payload["chunk_id"]: p.id for points in by_rank.values() for p in points}
    for hit in result.hits:
        assert hit.stages["dense"].score == scores[DENSE][ids[hit.chunk.chunk_id]]
        assert hit.stages["keyword"].score == scores[SPARSE].get(ids[hit.chunk.chunk_id], 0.0)
    assert len(result.hits) == 10


@pytest.fixture(scope="module")
def one_and_two_copies(
    handbook_docs: list[Document], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SearchPipeline, SearchPipeline]]:
    """Pipelines on the same 20 handbook documents (fake embeddings), one on a shard in this process and one on two
    copies, each in its engine process."""
    folder = tmp_path_factory.mktemp("copies")
    stores: list[VectorStore] = [EdgeStore(folder / "one" / "index"), MirroredStore(folder / "two" / "index")]
    pipelines = []
    for store in stores:
        index = Index(store, FakeEmbedder(), Chunker(ChunkerConfig()), TokenizerConfig(), Bm25Params())
        index.ingest(handbook_docs[:20])
        pipelines.append(SearchPipeline(store, index.embedder, index.encoder, None))
    yield pipelines[0], pipelines[1]
    for store in stores:
        store.close()


SEARCHES = [
    ("vpn keeps disconnecting", SearchParams(k=5, explain=True)),
    ("password rotation", SearchParams(k=3, fusion=FusionMethod.RRF)),
    ("refund", SearchParams(k=4, mode=Mode.KEYWORD, distinct_docs=True)),
    ("laptop", SearchParams(k=4, mode=Mode.DENSE, alpha=0.3)),
]


@pytest.mark.engine
def test_a_search_on_two_copies_is_one_call_to_an_engine_process_and_finds_the_same(
    one_and_two_copies: tuple[SearchPipeline, SearchPipeline], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = one_and_two_copies
    calls: list[str] = []
    read = MirroredStore._read

    def counted(self: MirroredStore, name: str, *args: Any) -> Any:
        calls.append(name)
        return read(self, name, *args)

    monkeypatch.setattr(MirroredStore, "_read", counted)
    for query, params in SEARCHES:
        calls.clear()
        there = two.search(query, params)
        assert calls == ["run"]  # retrieve, generations, rescore and fetch in the engine process
        here = one.search(query, params)
        assert len(here.hits) == params.k
        assert [(h.chunk.chunk_id, h.score, h.stages) for h in there.hits] == [
            (h.chunk.chunk_id, h.score, h.stages) for h in here.hits
        ]
        assert there.timings_ms["transfer"] >= 0.0
    calls.clear()
    batch = two.search_batch([q for q, _ in SEARCHES], [p for _, p in SEARCHES])  # an eval batch: one call too
    assert calls == ["run"]
    assert [[h.chunk.chunk_id for h in r.hits] for r in batch] == [
        [h.chunk.chunk_id for h in one.search(q, p).hits] for q, p in SEARCHES
    ]
