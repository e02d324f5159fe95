"""The gate's verdict as a value (`eval.verdict`): stored and read back without loss, whatever its vintage."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eval.errors import EvalError
from eval.gate import GateConfig, compare
from eval.runner import Run
from eval.storage import dump_run, load_run, run_digest, run_from_json, run_to_json
from eval.verdict import BaselineRef, GateResult

from .helpers import doc_case, docs, filler, run_with


def gated_run(baseline: BaselineRef | None) -> tuple[Run, GateResult]:
    cases = [doc_case(f"c{i}", "d1") for i in range(6)]
    base = run_with(cases, lambda _: docs("d1"))
    worse = run_with(cases, lambda c: [*filler(c.id, 3), *docs("d1")] if c.id < "c3" else docs("d1"))
    gate = dataclasses.replace(compare(worse, base, GateConfig(min_category_cases=1)), baseline=baseline)
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
