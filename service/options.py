"""What a search or an eval run is asked for, as plain values: the API converts its request bodies into them, the CLI
and the scheduler build them directly. `service.retrieval.pipeline.search_params` applies the defaults of
`Settings` to them; `service.evaluation.runs.run_spec` resolves a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eval.matching import Unit
from eval.verdict import GateRequest
from service.domain import FusionMethod, Mode
from service.filters import FilterSpec, to_filters
from service.inputs import SearchOptions


@dataclass(frozen=True)
class SearchOverrides:
    """A search as asked: each knob left None takes the service's default (`Settings.default_*`). `given` is what the
    caller wrote, as JSON with the defaults left out: the filters a response shows, the overrides a run records."""

    mode: Mode | None = None
    fusion: FusionMethod | None = None
    alpha: float | None = None
    rrf_k: int | None = None
    candidates: int | None = None
    rerank: bool | None = None
    rerank_depth: int | None = None
    filters: FilterSpec = field(default_factory=FilterSpec)
    fresh_only: bool = True
    given: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, options: SearchOptions) -> SearchOverrides:
        """Validated options (a request's, an eval run's, `plumbline eval run --override`'s) as plain values."""
        return cls(
            mode=options.mode,
            fusion=options.fusion,
            alpha=options.alpha,
            rrf_k=options.rrf_k,
            candidates=options.candidates,
            rerank=options.rerank,
            rerank_depth=options.rerank_depth,
            filters=to_filters(options.filters),
            fresh_only=options.fresh_only,
            given=options.model_dump(mode="json", exclude_defaults=True, include=set(SearchOptions.model_fields)),
        )


@dataclass(frozen=True)
class RunOptions:
    """An eval run of set `set_name` over the served configuration, as asked: an experiment when `search` overrides
    anything, else a monitoring run if asked, else a manual one. `gate`: what the caller asks of the gate besides
    the baseline's policy (only ever stricter: `eval.verdict.GatePolicy.tightened`). `tenant`: a tenant-bound
    caller's, whose run sees that tenant's cases and documents only."""

    set_name: str
    search: SearchOverrides = field(default_factory=SearchOverrides)
    ks: tuple[int, ...] = (1, 5, 10)
    unit: Unit = "chunk"
    gate: GateRequest = field(default_factory=GateRequest)
    monitoring: bool = False
    baseline: str | None = None
    tenant: str | None = None
