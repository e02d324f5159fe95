"""Pydantic request models → the domain's values and options (`service.options`)."""

from __future__ import annotations

from eval.gate import GateConfig
from service.api.schemas import EvalRunRequest
from service.domain import Document
from service.inputs import DocumentIn
from service.options import RunOptions, SearchOverrides
from service.settings import Settings


def to_document(d: DocumentIn) -> Document:
    return Document(**{**d.model_dump(), "tags": tuple(d.tags)})


def run_options(body: EvalRunRequest, s: Settings) -> RunOptions:
    """The run a request asks for; a gate left unsaid fails on regressed incidents as the service's setting says."""
    config = GateConfig(
        metrics=tuple(body.metrics),
        tolerance=body.tolerance if body.tolerance is not None else GateConfig().tolerance,
        require_significance=body.require_significance,
        fail_on_regressed=(
            body.fail_on_regressed_incidents
            if body.fail_on_regressed_incidents is not None
            else s.fail_on_regressed_incidents
        ),
    )
    return RunOptions(
        body.set,
        SearchOverrides.of(body.overrides),
        tuple(body.k),
        body.unit,
        config,
        monitoring=body.monitoring,
        baseline=body.baseline,
    )
