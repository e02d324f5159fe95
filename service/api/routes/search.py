"""POST /search."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import anyio
from fastapi import APIRouter

from service.access.principals import confine
from service.api.auth import AUTH_RESPONSES, Searcher
from service.api.convert import describe, to_params
from service.api.deps import PipelineDep, SettingsDep
from service.api.schemas import HitOut, SearchRequest, SearchResponse
from service.errors import TimedOut

router = APIRouter(tags=["search"], responses=AUTH_RESPONSES)


@router.post("/search", response_model=SearchResponse)
async def search(body: SearchRequest, pipeline: PipelineDep, settings: SettingsDep, caller: Searcher) -> SearchResponse:
    """Hybrid retrieval; `explain: true` adds each hit's rank and score per stage, `highlight: true` where the
    query's keyword terms occur in its text. Past
    `search_timeout_seconds` the caller gets a 504 (the search itself cannot be interrupted mid-engine-call).
    A tenant-bound key searches its own tenant only."""
    params = to_params(
        body,
        settings,
        reranker_configured=pipeline.reranker is not None,
        k=body.k,
        explain=body.explain,
        distinct_docs=body.distinct_docs,
    )
    params = replace(params, filters=confine(caller, params.filters))
    now = dt.datetime.now(dt.UTC)  # before the search's own clock: a hit its freshness filter let through is current
    try:
        with anyio.fail_after(settings.search_timeout_seconds):
            result = await anyio.to_thread.run_sync(pipeline.search, body.query, params, abandon_on_cancel=True)
    except TimeoutError:
        raise TimedOut(
            f"the search took longer than {settings.search_timeout_seconds:g} s (PLUMBLINE_SEARCH_TIMEOUT_SECONDS)"
        ) from None
    effective = describe(params, body)
    if caller.tenant is not None:  # what the search was confined to, whatever the request said
        effective["filters"]["tenant"] = caller.tenant
    effective["rerank_model"] = pipeline.reranker.name if pipeline.reranker else None
    tokenizer = pipeline.encoder.tokenizer
    terms = set(tokenizer.tokens(body.query)) if body.highlight else set()
    return SearchResponse(
        hits=[
            HitOut.of(h, params.explain, now, tokenizer.spans(h.chunk.text, terms) if body.highlight else None)
            for h in result.hits
        ],
        timings_ms=dict(result.timings_ms),
        params=effective,
        reranked=result.reranked,
        warnings=list(result.warnings),
    )
