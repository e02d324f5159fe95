"""POST /search."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.convert import describe, to_params
from service.api.deps import PipelineDep, SettingsDep
from service.api.schemas import HitOut, SearchRequest, SearchResponse

router = APIRouter(tags=["search"])


@router.post("/search", response_model=SearchResponse)
def search(body: SearchRequest, pipeline: PipelineDep, settings: SettingsDep) -> SearchResponse:
    """Hybrid retrieval; `explain: true` adds each hit's rank and score per stage."""
    params = to_params(
        body,
        settings,
        reranker_configured=pipeline.reranker is not None,
        k=body.k,
        explain=body.explain,
        distinct_docs=body.distinct_docs,
    )
    result = pipeline.search(body.query, params)
    effective = describe(params, body)
    effective["rerank_model"] = pipeline.reranker.name if pipeline.reranker else None
    return SearchResponse(
        hits=[HitOut.of(h, params.explain) for h in result.hits],
        timings_ms=dict(result.timings_ms),
        params=effective,
        reranked=result.reranked,
        warnings=list(result.warnings),
    )
