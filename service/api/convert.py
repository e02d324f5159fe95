"""Pydantic request models → the domain's values and options (`service.options`)."""

from __future__ import annotations

from eval.present import GatePolicyBody
from eval.verdict import GatePolicy, GateRequest
from service.api.schemas import EvalRunRequest
from service.domain import Document
from service.inputs import DocumentIn
from service.options import RunOptions, SearchOverrides
from service.settings import Settings


def to_document(d: DocumentIn) -> Document:
    return Document(**{**d.model_dump(), "tags": tuple(d.tags)})


def run_options(body: EvalRunRequest) -> RunOptions:
    """The run a request asks for; its gate fields ask for a gate stricter than the baseline's policy."""
    return RunOptions(
        body.set,
        SearchOverrides.of(body.overrides),
        tuple(body.k),
        body.unit,
        GateRequest(
            metrics=tuple(body.metrics),
            tolerance=body.tolerance,
            require_significance=body.require_significance,
            fail_on_regressed=body.fail_on_regressed_incidents,
        ),
        monitoring=body.monitoring,
        baseline=body.baseline,
    )


def gate_policy(body: GatePolicyBody | None, s: Settings) -> GatePolicy:
    """The policy a promotion asks for: the defaults where it says nothing, failing on regressed incidents as the
    service's setting says unless it says otherwise."""
    given = body.model_dump(exclude_unset=True) if body is not None else {}
    if given.get("fail_on_regressed_incidents") is None:
        given["fail_on_regressed_incidents"] = s.fail_on_regressed_incidents
    return GatePolicy.from_json(given)


def policy_body(policy: GatePolicy) -> GatePolicyBody:
    return GatePolicyBody.model_validate(policy.to_json())
