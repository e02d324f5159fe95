"""The engine's half of a search: from its queries to the payloads of the chunks it shows.

    dense top-N ∥ keyword top-N   (one batched engine call, filtered inside the engine)
    ─► keep committed generations (refill a list that lost some) ─► [weighted: rescore the union on both sides]
    ─► fusion ─► the shown chunks' payloads, and where each stood in each stage

`gather` takes the store first so that `VectorStore.run` can run it where the index lives: in a copy's engine process
with two copies of the index (`MirroredStore`), one round trip for a search's five or so engine calls, which each
cost a pickled round trip of their own before (a search at 100k chunks took 34.8 ms that way against 29.9 ms with the
shard in the serving process, alternating in one probe); in this process with the other stores. Its arguments and
its answer are plain data that pickle, and it imports nothing heavy (the engine process imports it on first use).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from service.domain import FusionMethod, Mode, StageScore
from service.filters import Clause, HasId
from service.retrieval import fusion
from service.retrieval.candidates import Candidates
from service.stores.base import DENSE, SPARSE, ScoredPoint, VectorName, VectorQuery, VectorStore

MAX_REFILLS = 10  # each doubles the depth: up to 1024 times the asked-for depth


@dataclass(frozen=True)
class Ask:
    """One search's engine work: its dense and keyword queries (either may be absent), how many candidates each list
    keeps, how many chunks it shows (k, or the rerank depth), and how they are fused."""

    dense: VectorQuery | None
    keyword: VectorQuery | None
    depth: int
    show: int
    mode: Mode
    fusion: FusionMethod
    alpha: float
    rrf_k: int
    distinct_docs: bool


@dataclass(frozen=True)
class Found:
    """One search's shown chunks, best first, with their payloads and where each stood in each stage."""

    top: list[str]
    payloads: dict[str, Mapping[str, Any]]
    stages: dict[str, dict[str, StageScore]]


class Timer:
    """Stage timings in ms, summed per stage; `observe` also gets each stage's seconds."""

    def __init__(self, observe: Callable[[str, float], None] | None = None) -> None:
        self.ms: dict[str, float] = {}
        self._observe = observe

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record(stage, time.perf_counter() - start)

    def record(self, stage: str, seconds: float) -> None:
        self.ms[stage] = round(self.ms.get(stage, 0.0) + seconds * 1000, 3)
        if self._observe:
            self._observe(stage, seconds)


def gather(store: VectorStore, asks: Sequence[Ask]) -> tuple[list[Found], dict[str, float]]:
    """What each search shows, and the stage timings (ms): retrieve, generations, rescore, fuse, fetch."""
    timer = Timer()
    requests = [(i, q) for i, a in enumerate(asks) for q in (a.dense, a.keyword) if q is not None]
    with timer("retrieve"):
        results = store.query([q for _, q in requests])
    with timer("generations"):  # and the lists cut to depth from the points of committed generations
        committed = store.committed({p.payload["doc_id"] for points in results for p in points})
        _refill(store, [q for _, q in requests], results, committed)
        candidates = [Candidates() for _ in asks]
        for (i, q), points in zip(requests, results, strict=True):
            candidates[i].add(q.using, points, committed, asks[i].depth)
    with timer("rescore"):
        _rescore(store, candidates, asks)
    return [_finish(store, a, c, timer) for a, c in zip(asks, candidates, strict=True)], timer.ms


def _finish(store: VectorStore, a: Ask, c: Candidates, timer: Timer) -> Found:
    with timer("fuse"):
        fused = _fuse(c, a)
        order = [key for key, _ in fused]
        if a.distinct_docs:
            order = c.first_per_document(order)
        top = order[: a.show]
        stages = _stages(c, fused, top)
    with timer("fetch"):
        payloads = {sp.payload["chunk_id"]: sp.payload for sp in store.retrieve([c.points[k] for k in top])}
    top = [k for k in top if k in payloads]  # a document deleted between the two engine calls
    return Found(top, payloads, stages)


def _refill(
    store: VectorStore, requests: list[VectorQuery], results: list[list[ScoredPoint]], committed: dict[str, int]
) -> None:
    """Ask again, twice as deep, for each list the engine filled to its limit but that lost candidates to
    uncommitted generations (a crash's leftovers, a write in flight), until it is whole or the engine runs
    out: such points never cost a search its hits. In place; `committed` grows with the new documents."""
    depth = [q.limit for q in requests]
    for _ in range(MAX_REFILLS):
        short = [
            j
            for j, (q, points) in enumerate(zip(requests, results, strict=True))
            if len(points) >= depth[j] and _live(points, committed) < q.limit
        ]
        if not short:
            return
        deeper = [replace(requests[j], limit=2 * depth[j]) for j in short]
        for j, q, points in zip(short, deeper, store.query(deeper), strict=True):
            depth[j], results[j] = q.limit, points
        seen = {p.payload["doc_id"] for j in short for p in results[j]} - committed.keys()
        committed.update(store.committed(seen))


def _live(points: Sequence[ScoredPoint], committed: Mapping[str, int]) -> int:
    return sum(committed.get(p.payload["doc_id"]) == int(p.payload["gen"]) for p in points)


def _rescore(store: VectorStore, candidates: list[Candidates], asks: Sequence[Ask]) -> None:
    """Weighted fusion needs both scores of every candidate: ask the engine for the ones a list did not return.

    An id-filtered engine query per side and search (the engine scores 200 ids faster than we can fetch their
    vectors: 3.5 ms against 7 ms at 100k chunks), batched across searches. A candidate's score in the list that
    returned it is the one such a query gives (equal on all 11,600 compared at 100k chunks, both sides), so only
    the others are asked for: about half of the union, whose every point the binding hands back as a UUID object
    to be turned into a string (about 6 µs a point).
    """
    requests: list[tuple[int, VectorName, VectorQuery]] = []
    unions: dict[int, list[str]] = {}  # of each search to rescore (`Candidates.union` sorts it anew each time)
    for i, (c, a) in enumerate(zip(candidates, asks, strict=True)):
        union = c.union
        if a.mode is not Mode.HYBRID or a.fusion is not FusionMethod.WEIGHTED or len(c.lists) < 2 or not union:
            continue
        unions[i] = union
        for side in (q for q in (a.dense, a.keyword) if q is not None):  # both: the search has two lists
            if missing := [c.points[k] for k in union if k not in c.lists[side.using]]:
                where = Clause(must=(HasId(tuple(missing)),))
                requests.append((i, side.using, replace(side, filter=where, limit=len(missing), with_payload=False)))
    asked: dict[tuple[int, VectorName], dict[str, float]] = {}
    if requests:
        for (i, using, _), points in zip(requests, store.query([r for _, _, r in requests]), strict=True):
            asked[i, using] = {sp.id: sp.score for sp in points}  # by point id: the queries read no payload
    for i, union in unions.items():
        c = candidates[i]
        for using in (DENSE, SPARSE):
            listed, scores = c.lists[using], asked.get((i, using), {})
            c.rescored[using] = {k: listed[k] if k in listed else scores.get(c.points[k], 0.0) for k in union}


_NAMES = {DENSE: "dense", SPARSE: "keyword"}


def _fuse(c: Candidates, a: Ask) -> list[tuple[str, float]]:
    """The fused order of every candidate: (chunk id, fusion score), best first."""
    if a.mode is Mode.HYBRID and a.fusion is FusionMethod.WEIGHTED and c.rescored:
        return fusion.weighted(c.rescored[DENSE], c.rescored[SPARSE], a.alpha)
    if a.mode is Mode.HYBRID and a.fusion is FusionMethod.WEIGHTED:
        return fusion.weighted(c.lists.get(DENSE, {}), c.lists.get(SPARSE, {}), a.alpha)
    if a.mode is Mode.HYBRID:
        return fusion.rrf({_NAMES[u]: s for u, s in c.lists.items()}, k=a.rrf_k)
    only = c.lists.get(DENSE if a.mode is Mode.DENSE else SPARSE, {})
    return [(k, only[k]) for k in sorted(only, key=lambda k: (-only[k], k))]


def _stages(c: Candidates, fused: Sequence[tuple[str, float]], keys: Sequence[str]) -> dict[str, dict[str, StageScore]]:
    """Where each of `keys` stood in each stage: its rank and score in each list it was retrieved by, its rescored score
    where it was not, and its fusion rank. Only for the chunks a search shows (k of about 200 candidates): the fusion
    stage took 0.54 ms instead of 1.36 with them built for all 182 candidates of a probe (weighted fusion, k=10)."""
    stages: dict[str, dict[str, StageScore]] = {key: {} for key in keys}
    for using, scores in c.lists.items():
        for key, rank in fusion.ranks(scores).items():
            if key in stages:
                stages[key][_NAMES[using]] = StageScore(rank, scores[key])
    for using, scores in c.rescored.items():
        for key, stage in stages.items():
            if key in scores:
                stage.setdefault(_NAMES[using], StageScore(None, scores[key]))
    for rank, (key, score) in enumerate(fused, start=1):
        if key in stages:
            stages[key]["fusion"] = StageScore(rank, score)
    return stages
