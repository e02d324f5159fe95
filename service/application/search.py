"""Searches as a caller may make them: a tenant-bound key's is confined to its tenant."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from service.access.principals import Principal, confine
from service.options import SearchOverrides
from service.retrieval.no_answer import Calibration, assess
from service.retrieval.pipeline import SearchParams, SearchPipeline, SearchResult, describe, search_params
from service.settings import Settings


@dataclass(frozen=True)
class Searched:
    result: SearchResult
    params: SearchParams
    effective: dict[str, Any]  # as a response shows them: the filters as asked, the tenant it was confined to
    no_answer: dict[str, Any]  # whether the top k probably holds no answer (`service.retrieval.no_answer.assess`)


class Searches:
    def __init__(self, settings: Settings, pipeline: SearchPipeline, no_answer: Calibration | None = None) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.no_answer = no_answer

    def search(
        self,
        caller: Principal,
        query: str,
        asked: SearchOverrides,
        *,
        k: int | None = None,
        explain: bool = False,
        distinct_docs: bool = False,
    ) -> Searched:
        """`query` searched with the service's defaults for what `asked` leaves out; naming another tenant than a
        bound key's is `Forbidden`."""
        pipeline = self.pipeline
        params = search_params(
            self.settings,
            asked,
            reranker_configured=pipeline.reranker is not None,
            k=k,
            explain=explain,
            distinct_docs=distinct_docs,
        )
        params = replace(params, filters=confine(caller, params.filters))
        result = pipeline.search(query, params)
        effective = describe(params, asked)
        if caller.tenant is not None:  # what the search was confined to, whatever the request said
            effective["filters"]["tenant"] = caller.tenant
        effective["rerank_model"] = pipeline.reranker.name if pipeline.reranker else None
        return Searched(result, params, effective, assess(result.hits, self.no_answer, pipeline.embedder.name))
