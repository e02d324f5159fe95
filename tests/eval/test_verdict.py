"""The gate's verdict as a value (`eval.verdict`): stored and read back without loss, whatever its vintage."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eval.errors import EvalError, LooserThanPolicy
from eval.gate import compare
from eval.runner import Run
from eval.storage import dump_run, load_run, run_digest, run_from_json, run_to_json
from eval.verdict import BaselineRef, GatePolicy, GateRequest, GateResult

from .helpers import doc_case, docs, filler, run_with


def gated_run(baseline: BaselineRef | None) -> tuple[Run, GateResult]:
    cases = [doc_case(f"c{i}", "d1") for i in range(6)]
    base = run_with(cases, lambda _: docs("d1"))
    worse = run_with(cases, lambda c: [*filler(c.id, 3), *docs("d1")] if c.id < "c3" else docs("d1"))
    gate = dataclasses.replace(compare(worse, base, GatePolicy(min_category_cases=1)), baseline=baseline)
    return dataclasses.replace(worse, gate=gate), gate


@pytest.mark.parametrize(
    "baseline",
    [
        None,  # the CLI gating against a file
        BaselineRef("handbook", "r1", "ab" * 32, "packaged"),
        BaselineRef("handbook", "r1"),  # filed before the content hash existed: name and run id only
        BaselineRef(None, None),
    ],
)
def test_a_gated_run_reads_back_equal_and_hashes_the_same(baseline: BaselineRef | None, tmp_path: Path) -> None:
    run, gate = gated_run(baseline)
    assert not gate.passed
    assert gate.worse_cases
    path = tmp_path / "run.json"
    path.write_text(dump_run(run))
    again = load_run(path)
    assert again.gate == gate
    assert run_digest(again) == run_digest(run)
    assert run_to_json(again)["gate"] == json.loads(path.read_text())["gate"]


def test_an_older_baseline_record_keeps_exactly_its_keys() -> None:
    run, _ = gated_run(BaselineRef("handbook", "r1"))
    stored = run_to_json(run)
    assert stored["gate"]["baseline"] == {"name": "handbook", "run_id": "r1"}
    assert run_to_json(run_from_json(stored)) == stored


@pytest.mark.parametrize("damage", [{"verdict": "maybe"}, {"checks": [{"metric": "hit@10"}]}, {"reasons": None}])
def test_a_damaged_verdict_is_refused(damage: dict[str, object]) -> None:
    _, gate = gated_run(None)
    with pytest.raises(EvalError, match="not a gate verdict"):
        GateResult.from_json({**gate.to_json(), **damage})


def test_a_verdict_filed_before_policies_reads_back_without_one() -> None:
    _, gate = gated_run(BaselineRef("handbook", "r1"))
    assert gate.policy == GatePolicy(
        min_category_cases=1, metrics=("hit@10", "recall@10", "mrr@10", "ndcg@10", "stale@10")
    )
    older = {k: v for k, v in gate.to_json().items() if k != "policy"}
    again = GateResult.from_json(older)
    assert (again.policy, again.policy_origin, again.tightened) == (None, None, ())
    assert again.to_json() == older  # no key appears that the stored verdict did not have


POLICY = GatePolicy(
    metrics=("hit@10", "mrr@10"), tolerance=0.05, per_metric={"hit@10": 0.02}, require_significance=True
)


def test_a_policy_reads_back_equal_and_refuses_what_it_does_not_know() -> None:
    assert GatePolicy.from_json(POLICY.to_json()) == POLICY
    assert GatePolicy.from_json({}) == GatePolicy()  # every field has its default
    assert GatePolicy.from_json({"fail_on_regressed_incidents": False}).fail_on_regressed is False
    with pytest.raises(EvalError, match=r"unknown field\(s\) \['tolerence'\]"):
        GatePolicy.from_json({"tolerence": 0.5})
    for bad in ({"tolerance": 2}, {"alpha": 0}, {"min_category_cases": 0}, {"metrics": ["hit@1", "hit@1"]}):
        with pytest.raises(EvalError, match="invalid gate policy"):
            GatePolicy.from_json(bad)


def test_a_request_may_make_a_policy_stricter() -> None:
    same, made = POLICY.tightened(GateRequest())
    assert (same, made) == (POLICY, ())
    stricter, made = POLICY.tightened(
        GateRequest(metrics=("mrr@10", "recall@10"), tolerance=0.01, require_significance=False, fail_on_regressed=True)
    )
    assert stricter.metrics == ("hit@10", "mrr@10", "recall@10")  # added to the policy's, never replacing them
    assert {m: stricter.tolerance_for(m) for m in stricter.metrics} == {
        "hit@10": 0.01,
        "mrr@10": 0.01,
        "recall@10": 0.01,
    }
    assert not stricter.require_significance
    assert made == ("metrics + recall@10", "tolerance 0.01", "significance not required")  # fail_on_regressed: as is
    # a tolerance between the policy's per-metric values is looser for the stricter metric
    assert POLICY.tightened(GateRequest(tolerance=0.02))[0].tolerance == 0.02


@pytest.mark.parametrize(
    ("policy", "asked", "refusal"),
    [
        (POLICY, GateRequest(tolerance=0.03), "tolerance 0.03 is larger than the policy's for hit@10 (0.02)"),
        (POLICY, GateRequest(tolerance=1.0), "hit@10 (0.02), mrr@10 (0.05)"),
        (GatePolicy(metrics=("hit@10",)), GateRequest(require_significance=True), "require_significance"),
        (GatePolicy(metrics=("hit@10",)), GateRequest(fail_on_regressed=False), "fail_on_regressed_incidents false"),
    ],
)
def test_a_looser_request_is_refused_naming_it(policy: GatePolicy, asked: GateRequest, refusal: str) -> None:
    with pytest.raises(LooserThanPolicy, match="looser than the baseline's gate policy") as refused:
        policy.tightened(asked)
    assert refusal in str(refused.value)


def test_every_refusal_is_named_at_once() -> None:
    asked = GateRequest(tolerance=0.5, require_significance=True, fail_on_regressed=False)
    with pytest.raises(LooserThanPolicy) as refused:
        GatePolicy(metrics=("hit@10",)).tightened(asked)
    assert [p in str(refused.value) for p in ("tolerance 0.5", "require_significance", "fail_on_regressed")] == [
        True,
        True,
        True,
    ]
