"""POST /search."""

from __future__ import annotations

import datetime as dt
import functools

import anyio
from fastapi import APIRouter

from service.api.auth import AUTH_RESPONSES, Searcher
from service.api.deps import SearchesDep, SettingsDep
from service.api.schemas import HitOut, NoAnswerOut, SearchRequest, SearchResponse
from service.errors import TimedOut
from service.options import SearchOverrides

router = APIRouter(tags=["search"], responses=AUTH_RESPONSES)


@router.post("/search", response_model=SearchResponse)
async def search(body: SearchRequest, searches: SearchesDep, settings: SettingsDep, caller: Searcher) -> SearchResponse:
    """Hybrid retrieval; `explain: true` adds each hit's rank and score per stage, `highlight: true` where the
    query's keyword terms occur in its text; `no_answer` says whether the hits probably hold no answer (a threshold
    learned on the labelled sets). Past
    `search_timeout_seconds` the caller gets a 504 (the search itself cannot be interrupted mid-engine-call).
    A tenant-bound key searches its own tenant only."""
    asked = SearchOverrides.of(body)
    search = functools.partial(
        searches.search, caller, body.query, asked, k=body.k, explain=body.explain, distinct_docs=body.distinct_docs
    )
    now = dt.datetime.now(dt.UTC)  # before the search's own clock: a hit its freshness filter let through is current
    try:
        with anyio.fail_after(settings.search_timeout_seconds):
            found = await anyio.to_thread.run_sync(search, abandon_on_cancel=True)
    except TimeoutError:
        raise TimedOut(
            f"the search took longer than {settings.search_timeout_seconds:g} s (PLUMBLINE_SEARCH_TIMEOUT_SECONDS)"
        ) from None
    result = found.result
    tokenizer = searches.pipeline.encoder.tokenizer
    terms = set(tokenizer.tokens(body.query)) if body.highlight else set()
    return SearchResponse(
        hits=[
            HitOut.of(h, found.params.explain, now, tokenizer.spans(h.chunk.text, terms) if body.highlight else None)
            for h in result.hits
        ],
        timings_ms=dict(result.timings_ms),
        params=found.effective,
        reranked=result.reranked,
        warnings=list(result.warnings),
        no_answer=NoAnswerOut.model_validate(found.no_answer),
    )
