"""Pydantic request models → domain values, applying the service's defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from eval.gate import GateConfig
from eval.matching import Unit
from service.api.schemas import DocumentIn, FiltersIn, SearchOptions
from service.domain import Document
from service.errors import InvalidRequest
from service.evaluation.runs import RunSpec
from service.filters import FilterSpec, parse_metadata_filters
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.settings import Settings


def to_document(d: DocumentIn) -> Document:
    return Document(**{**d.model_dump(), "tags": tuple(d.tags)})


def to_filters(f: FiltersIn) -> FilterSpec:
    return FilterSpec(
        tenant=f.tenant,
        tags=tuple(f.tags),
        doc_ids=tuple(f.doc_ids),
        status=tuple(f.status),
        updated_after=f.updated_after,
        updated_before=f.updated_before,
        metadata=parse_metadata_filters(f.metadata),
    )


def to_params(
    req: SearchOptions,
    s: Settings,
    reranker_configured: bool,
    *,
    k: int | None = None,
    explain: bool = False,
    distinct_docs: bool = False,
) -> SearchParams:
    return SearchParams(
        k=k if k is not None else s.default_k,
        mode=req.mode or s.default_mode,
        fusion=req.fusion or s.default_fusion,
        alpha=req.alpha if req.alpha is not None else s.default_alpha,
        rrf_k=req.rrf_k if req.rrf_k is not None else s.default_rrf_k,
        candidates=req.candidates if req.candidates is not None else s.default_candidates,
        rerank=req.rerank if req.rerank is not None else (s.default_rerank and reranker_configured),
        rerank_depth=req.rerank_depth if req.rerank_depth is not None else s.default_rerank_depth,
        filters=to_filters(req.filters),
        fresh_only=req.fresh_only,
        explain=explain,
        distinct_docs=distinct_docs,
    )


def describe(params: SearchParams, options: SearchOptions) -> dict[str, Any]:
    """Effective parameters as JSON (filters as the caller wrote them), for responses and run records."""
    out = asdict(params)
    out["filters"] = options.filters.model_dump(mode="json", exclude_defaults=True)
    return out


def parse_filters(raw: Mapping[str, Any]) -> FilterSpec:
    """A labelled case's `filters` object, validated exactly like a /search request's `filters`."""
    try:
        return to_filters(FiltersIn.model_validate(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(f"filters {dict(raw)} are invalid: {where}: {first['msg']}") from None


def run_params(params: SearchParams, options: SearchOptions) -> dict[str, Any]:
    """The search parameters an eval run records (per-query fields left out), and the overrides asked for."""
    out = describe(params, options)
    for per_query in ("k", "explain", "distinct_docs"):
        del out[per_query]
    overrides = options.model_dump(mode="json", exclude_defaults=True)
    if overrides:
        out["overrides"] = overrides
    return out


def run_spec(
    options: SearchOptions,
    s: Settings,
    pipeline: SearchPipeline,
    *,
    set_name: str,
    ks: Sequence[int] = (1, 5, 10),
    unit: Unit = "chunk",
    gate_config: GateConfig | None = None,
    monitoring: bool = False,
    baseline: str | None = None,
    tenant: str | None = None,
) -> RunSpec:
    """An eval run of `set_name` with `options` over the served configuration: an experiment when it overrides
    anything, else a monitoring run if asked, else a manual one."""
    overrides = bool(options.model_dump(exclude_defaults=True))
    if overrides and monitoring:
        raise InvalidRequest(
            "a monitoring run replays the served configuration: drop `overrides`, or run it as an experiment"
        )
    base = to_params(options, s, reranker_configured=pipeline.reranker is not None)
    return RunSpec(
        pipeline,
        base,
        set_name,
        tuple(ks),
        unit,
        run_params(base, options),
        gate_config or GateConfig(fail_on_regressed=s.fail_on_regressed_incidents),
        kind="experiment" if overrides else ("monitoring" if monitoring else "manual"),
        baseline=baseline,
        tenant=tenant,
    )
