"""The search pipeline, composed of the stage modules; `/search` and `/eval/run` both call it.

    query ─► filter tree (request filters ∧ freshness ∧ tenant) ─► query embedding, keyword terms (IDF over the tenant)
          ─► the engine's half, where the index lives (`service.retrieval.gather.gather` through `VectorStore.run`):
             dense top-N ∥ keyword top-N ─► committed generations ─► [weighted: rescore the union] ─► fusion
             ─► payloads of the top k (or the rerank depth)
          ─► [rerank top-M] ─► hits + per-stage ranks + timings

`search_batch` runs many queries at once (one embedding batch, one engine call per phase, one `run` for all): the
eval runner uses it, so a set is replayed through exactly the code that serves `/search`.
"""

from __future__ import annotations

import copy
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from service.domain import FusionMethod, Hit, Mode, StageScore
from service.errors import InvalidRequest
from service.filters import FilterSpec, build_filter, keyword_corpus
from service.options import SearchOverrides
from service.retrieval import fusion
from service.retrieval.candidates import TIE_MARGIN
from service.retrieval.embedding import Embedder
from service.retrieval.gather import Ask, Found, Timer, gather
from service.retrieval.rerank import Reranker
from service.retrieval.sparse import Bm25Encoder
from service.settings import Settings, declared
from service.stores.base import DENSE, SPARSE, VectorQuery, VectorStore
from service.stores.payload import hit_from_payload

RERANK_OFF = "rerank was requested but no cross-encoder is configured (set PLUMBLINE_RERANK_MODEL); not reranked"


@dataclass(frozen=True)
class SearchParams:
    """Effective parameters of one search; the defaults are those `Settings` declares, for a service without a
    cross-encoder (`search_params` applies the configured ones).

    Example:
        >>> SearchParams(k=5, mode=Mode.KEYWORD).fresh_only
        True
    """

    k: int = declared("default_k")
    mode: Mode = declared("default_mode")
    fusion: FusionMethod = declared("default_fusion")
    alpha: float = declared("default_alpha")
    rrf_k: int = declared("default_rrf_k")
    candidates: int = declared("default_candidates")
    rerank: bool = False  # `Settings.default_rerank` applies only where a cross-encoder is configured
    rerank_depth: int = declared("default_rerank_depth")
    filters: FilterSpec = field(default_factory=FilterSpec)
    fresh_only: bool = True
    explain: bool = False
    distinct_docs: bool = False  # at most one hit per document (its best chunk)
    drop_filler: bool = declared("keyword_drop_filler")  # the keyword query without a question's topicless words


def search_params(
    s: Settings,
    asked: SearchOverrides,
    *,
    reranker_configured: bool,
    k: int | None = None,
    explain: bool = False,
    distinct_docs: bool = False,
) -> SearchParams:
    """The search `asked` for, each knob it leaves out taking the service's default."""
    return SearchParams(
        k=k if k is not None else s.default_k,
        mode=asked.mode or s.default_mode,
        fusion=asked.fusion or s.default_fusion,
        alpha=asked.alpha if asked.alpha is not None else s.default_alpha,
        rrf_k=asked.rrf_k if asked.rrf_k is not None else s.default_rrf_k,
        candidates=asked.candidates if asked.candidates is not None else s.default_candidates,
        rerank=asked.rerank if asked.rerank is not None else (s.default_rerank and reranker_configured),
        rerank_depth=asked.rerank_depth if asked.rerank_depth is not None else s.default_rerank_depth,
        filters=asked.filters,
        fresh_only=asked.fresh_only,
        explain=explain,
        distinct_docs=distinct_docs,
        drop_filler=s.keyword_drop_filler,
    )


def describe(params: SearchParams, asked: SearchOverrides) -> dict[str, Any]:
    """Effective parameters as JSON (filters as the caller wrote them), for responses and run records."""
    out = asdict(params)
    out["filters"] = copy.deepcopy(dict(asked.given.get("filters", {})))
    return out


@dataclass(frozen=True)
class Limits:
    """What one search may ask for; the defaults are those `Settings` declares."""

    max_k: int = declared("max_k")
    max_candidates: int = declared("max_candidates")
    max_rerank_depth: int = declared("max_rerank_depth")
    max_query_chars: int = declared("max_query_chars")


@dataclass(frozen=True)
class SearchResult:
    """Hits best first, stage timings (ms), the parameters used, and warnings.

    A hit's `score` is its last stage's: the cross-encoder's within `rerank_depth`, the fusion score for
    hits beyond it (when k > rerank_depth), so compare scores only between hits of the same stage.
    """

    hits: tuple[Hit, ...]
    timings_ms: Mapping[str, float]
    params: SearchParams
    reranked: bool
    warnings: tuple[str, ...] = ()


class SearchPipeline:
    """Hybrid retrieval over a `VectorStore`.

    Example:
        >>> pipeline = SearchPipeline(store, embedder, encoder, reranker=None)  # doctest: +SKIP
        >>> pipeline.search("refund window annual plan", SearchParams(k=5)).hits[0].chunk.doc_id  # doctest: +SKIP
        'billing/refunds'
    """

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        encoder: Bm25Encoder,
        reranker: Reranker | None,
        limits: Limits | None = None,
        observe_stage: Callable[[str, float], None] | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.encoder = encoder
        self.reranker = reranker
        self.limits = limits or Limits()
        self._observe = observe_stage
        self._clock = clock

    def search(self, query: str, params: SearchParams) -> SearchResult:
        return self.search_batch([query], [params])[0]

    def search_batch(
        self, queries: Sequence[str], params: Sequence[SearchParams], *, observe: bool = True
    ) -> list[SearchResult]:
        """One result per query. `observe=False` keeps the stage timings out of the serving metrics (the
        eval runner's batches would skew the latency histograms of `/search`)."""
        if len(queries) != len(params):
            raise ValueError("one SearchParams per query")
        for query, p in zip(queries, params, strict=True):
            self._validate(query, p)
        timer = Timer(self._observe if observe else None)
        total_start = time.perf_counter()
        now = self._clock()
        filters = [build_filter(p.filters, fresh_only=p.fresh_only, now=now) for p in params]
        dense_at = [i for i, p in enumerate(params) if p.mode is not Mode.KEYWORD]
        with timer("embed"):
            vectors = dict(zip(dense_at, self.embedder.embed_queries([queries[i] for i in dense_at]), strict=True))
        with timer("sparse"):
            sparse = {
                i: self.encoder.encode_query(q, params[i].drop_filler)
                for i, q in enumerate(queries)
                if params[i].mode is not Mode.DENSE
            }
        warnings: list[list[str]] = [[] for _ in queries]
        asks = []
        for i, p in enumerate(params):
            depth = p.candidates + TIE_MARGIN
            dense = VectorQuery(DENSE, vectors[i].tolist(), filters[i], depth) if i in vectors else None
            keyword = None
            if i in sparse and sparse[i].is_empty:
                warnings[i].append("the query has no keyword terms after analysis (only stopwords?)")
            elif i in sparse:
                keyword = VectorQuery(SPARSE, sparse[i], filters[i], depth, corpus=keyword_corpus(p.filters))
            show = max(p.k, p.rerank_depth if p.rerank else 0)
            asks.append(Ask(dense, keyword, p.candidates, show, p.mode, p.fusion, p.alpha, p.rrf_k, p.distinct_docs))
        start = time.perf_counter()
        found, engine_ms = self.store.run(gather, asks)
        for stage, ms in engine_ms.items():
            timer.record(stage, ms / 1000)
        # the rest of that call: handing the work to the engine process and its answer back (two copies of the index)
        timer.record("transfer", max(0.0, time.perf_counter() - start - sum(engine_ms.values()) / 1000))
        out = [
            self._finish(query, p, f, timer, warnings[i])
            for i, (query, p, f) in enumerate(zip(queries, params, found, strict=True))
        ]
        timer.ms["total"] = round((time.perf_counter() - total_start) * 1000, 3)
        return [SearchResult(r.hits, dict(timer.ms), r.params, r.reranked, r.warnings) for r in out]

    def _finish(self, query: str, p: SearchParams, f: Found, timer: Timer, warnings: list[str]) -> SearchResult:
        """Rerank the shown chunks when asked, and make them hits."""
        top, payloads, stages = f.top, f.payloads, f.stages
        reranked = False
        if p.rerank and self.reranker is None:
            warnings.append(RERANK_OFF)
        elif p.rerank and self.reranker is not None and top:
            with timer("rerank"):
                top = _rerank(self.reranker, query, top[: p.rerank_depth], payloads, stages) + top[p.rerank_depth :]
            reranked = True
        final = "rerank" if reranked else "fusion"
        hits = tuple(
            hit_from_payload(payloads[k], stages[k].get(final, stages[k]["fusion"]).score, stages[k])
            for k in top[: p.k]
        )
        return SearchResult(hits, {}, p, reranked, tuple(warnings))

    def _validate(self, query: str, p: SearchParams) -> None:
        lim = self.limits
        if not query.strip():
            raise InvalidRequest("query is empty: send the question text in 'query'")
        if len(query) > lim.max_query_chars:
            raise InvalidRequest(f"query is {len(query)} characters long; the limit is {lim.max_query_chars}")
        if not 1 <= p.k <= lim.max_k:
            raise InvalidRequest(f"k must be between 1 and {lim.max_k}, got {p.k}")
        if not 1 <= p.candidates <= lim.max_candidates:
            raise InvalidRequest(f"candidates must be between 1 and {lim.max_candidates}, got {p.candidates}")
        if p.candidates < p.k:
            raise InvalidRequest(f"candidates ({p.candidates}) must be at least k ({p.k})")
        if not 1 <= p.rerank_depth <= lim.max_rerank_depth:
            raise InvalidRequest(f"rerank_depth must be between 1 and {lim.max_rerank_depth}, got {p.rerank_depth}")
        if not 0.0 <= p.alpha <= 1.0:
            raise InvalidRequest(f"alpha must be within 0..1, got {p.alpha}")
        if p.rrf_k < 1:
            raise InvalidRequest(f"rrf_k must be at least 1, got {p.rrf_k}")


def _rerank(
    reranker: Reranker,
    query: str,
    top: list[str],
    payloads: Mapping[str, Mapping[str, object]],
    stages: dict[str, dict[str, StageScore]],
) -> list[str]:
    """Cross-encoder scores for the top chunks (title and heading path included), best first."""
    texts = [hit_from_payload(payloads[k], 0.0, {}).chunk.embed_text for k in top]
    scores = dict(zip(top, reranker.score(query, texts), strict=True))
    for key, rank in fusion.ranks(scores).items():
        stages[key]["rerank"] = StageScore(rank, scores[key])
    return sorted(top, key=lambda k: (-scores[k], k))
