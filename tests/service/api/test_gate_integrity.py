"""A gate nobody can forge: the trial replaced the packaged `handbook` set with one case, promoted a degraded run
(hit@10 0.05) to baseline `handbook`, and the degraded configuration then gated "pass". Now the packaged set and
baseline are read-only, changing sets and baselines needs eval:admin, shadowing a packaged one needs admin and
shows in every report, and each verdict names the baseline's run id and content hash.

Then (issue 34) a CI key bought a pass for a broken configuration by choosing the gate's rules itself: `metrics:
["stale@10"]` against the packaged baseline with a filter that finds nothing. Now the rules are the baseline's policy,
stored and hashed with it; a run may only make them stricter, and every verdict records the policy it was judged by."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from eval.storage import PACKAGE_DIR, load_baseline, load_run, run_digest
from eval.verdict import GatePolicy
from service.index.loaders import iter_documents
from service.inputs import DocumentIn
from service.settings import Settings
from tests.conftest import HANDBOOK
from tests.service.api.access_helpers import auth, make_key, secured_client

ONE_CASE = (PACKAGE_DIR / "sets" / "handbook.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[0]
DEGRADED = {"filters": {"tags": ["no-such-tag"]}}  # finds nothing: hit@10 0


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with secured_client(settings.model_copy(update={"max_batch_documents": 100, "max_request_bytes": 64 * 2**20})) as c:
        operator = auth(make_key(c, "ingest"))
        documents = [DocumentIn.model_validate(asdict(d)).model_dump(mode="json") for d in iter_documents(HANDBOOK)]
        for at in range(0, len(documents), 50):
            assert (
                c.post("/documents", headers=operator, json={"documents": documents[at : at + 50]}).status_code == 200
            )
        yield c


def test_an_eval_runner_cannot_forge_the_gate(client: TestClient) -> None:
    runner = auth(make_key(client, "eval:run", name="ci"))
    assert client.put("/eval/sets/handbook", headers=runner, content=ONE_CASE).status_code == 403
    degraded = client.post("/eval/run", headers=runner, json={"set": "handbook", "overrides": DEGRADED})
    assert degraded.status_code == 200
    run_id = degraded.json()["run_id"]
    for name in ("handbook", "other"):
        body = {"run_id": run_id, "name": name, "replace": True}
        assert client.post("/eval/baselines", headers=runner, json=body).status_code == 403
    # nor feed the gauges a monitoring run gated on its own terms (a lenient tolerance, a weak baseline)
    lenient = {"set": "handbook", "monitoring": True, "tolerance": 1, "baseline": "handbook"}
    assert client.post("/eval/run", headers=runner, json=lenient).status_code == 403
    gated = client.post(
        "/eval/run", headers=runner, json={"set": "handbook", "overrides": DEGRADED, "baseline": "handbook"}
    ).json()
    assert gated["metrics"]["hit@10"] == 0.0
    assert gated["gate"]["verdict"] == "fail"
    packaged = load_baseline("handbook")
    assert gated["gate"]["baseline"] == {
        "name": "handbook",
        "run_id": packaged.run.run_id,
        "sha256": packaged.sha256,
        "source": "packaged",
    }
    assert gated["params"]["set_source"] == "packaged"


def test_a_ci_key_cannot_choose_a_gate_that_passes_a_broken_configuration(client: TestClient) -> None:
    runner = auth(make_key(client, "eval:run", name="ci"))
    packaged = load_baseline("handbook")
    assert packaged.policy is not None  # the packaged baseline ships with its policy
    broken = {"set": "handbook", "overrides": DEGRADED, "baseline": "handbook"}
    # the attack as it was: gate on stale@10 only. The policy's metrics are gated whatever the request names.
    only_stale = client.post("/eval/run", headers=runner, json={**broken, "metrics": ["stale@10"]})
    assert only_stale.status_code == 200, only_stale.text
    gate = only_stale.json()["gate"]
    assert gate["verdict"] == "fail"
    assert {c["metric"] for c in gate["checks"] if c["failed"]} >= {"hit@10", "recall@10", "mrr@10", "ndcg@10"}
    assert gate["policy"] == packaged.policy.to_json()
    assert gate["policy_origin"] == "baseline"
    # anything looser is refused before the run, naming what was refused
    for looser, named in (
        ({"tolerance": 1.0}, "tolerance 1 is larger than the policy's for hit@10 (0.02)"),
        ({"require_significance": True}, "require_significance"),
        ({"fail_on_regressed_incidents": False}, "fail_on_regressed_incidents false"),
    ):
        refused = client.post("/eval/run", headers=runner, json={**broken, **looser})
        assert refused.status_code == 403, looser
        assert named in refused.json()["detail"]
        assert "looser than the baseline's gate policy" in refused.json()["detail"]
    # stricter is allowed, and the verdict says what the request tightened
    strict = {"set": "handbook", "baseline": "handbook", "tolerance": 0.01, "metrics": ["hit@5"]}
    tightened = client.post("/eval/run", headers=runner, json=strict).json()["gate"]
    assert tightened["tightened"] == ["metrics + hit@5", "tolerance 0.01"]
    assert tightened["policy"]["metrics"] == [*packaged.policy.metrics, "hit@5"]
    assert {c["tolerance"] for c in tightened["checks"] if c["scope"] == "overall"} == {0.01}
    # the stored runs record the policy each was judged by; the baseline shows the one it imposes
    listed = {r["run_id"]: r for r in client.get("/eval/runs", headers=runner).json()}
    assert listed[only_stale.json()["run_id"]]["gate_policy"] == packaged.policy.to_json()
    shown = client.get("/eval/baselines/handbook", headers=runner).json()
    assert shown["policy"] == packaged.policy.to_json()
    assert (shown["sha256"], shown["source"], shown["policy_origin"]) == (packaged.sha256, "packaged", "baseline")


def test_an_eval_admin_sets_the_policy_when_promoting(client: TestClient) -> None:
    admin_of_evals = auth(make_key(client, "eval:admin", "eval:run"))
    run_id = client.post("/eval/run", headers=admin_of_evals, json={"set": "handbook"}).json()["run_id"]
    policy = {"metrics": ["hit@5", "mrr@10"], "tolerance": 0.05, "per_metric": {"hit@5": 0.03}}
    promoted = client.post(
        "/eval/baselines", headers=admin_of_evals, json={"run_id": run_id, "name": "mine", "policy": policy}
    )
    assert promoted.status_code == 201, promoted.text
    stored = GatePolicy(metrics=("hit@5", "mrr@10"), tolerance=0.05, per_metric={"hit@5": 0.03})
    assert promoted.json()["policy"] == stored.to_json()
    # the policy is in the baseline's hash: the same run under another policy is another baseline
    default = client.post("/eval/baselines", headers=admin_of_evals, json={"run_id": run_id, "name": "plain"}).json()
    assert default["policy"]["metrics"] == ["hit@10", "recall@10", "mrr@10", "ndcg@10", "stale@10"]
    assert default["sha256"] != promoted.json()["sha256"]
    gated = client.post("/eval/run", headers=admin_of_evals, json={"set": "handbook", "baseline": "mine"}).json()
    assert gated["gate"]["baseline"]["sha256"] == promoted.json()["sha256"]
    assert [c["metric"] for c in gated["gate"]["checks"] if c["scope"] == "overall"] == ["hit@5", "mrr@10"]
    assert {c["metric"]: c["tolerance"] for c in gated["gate"]["checks"] if c["scope"] == "overall"} == {
        "hit@5": 0.03,
        "mrr@10": 0.05,
    }
    # per metric, a request's tolerance must not exceed the policy's for any gated metric
    refused = client.post(
        "/eval/run", headers=admin_of_evals, json={"set": "handbook", "baseline": "mine", "tolerance": 0.04}
    )
    assert refused.status_code == 403
    assert "hit@5 (0.03)" in refused.json()["detail"]
    bad = {"run_id": run_id, "name": "bad", "policy": {"metrics": ["hit@3"]}}
    refused = client.post("/eval/baselines", headers=admin_of_evals, json=bad)
    assert refused.status_code == 422
    assert "unknown metric" in refused.json()["detail"]
    unknown = {"run_id": run_id, "name": "bad", "policy": {"tolerence": 0.1}}
    assert client.post("/eval/baselines", headers=admin_of_evals, json=unknown).status_code == 422


def test_the_packaged_set_and_baseline_are_read_only_even_for_eval_admins(client: TestClient) -> None:
    admin_of_evals = auth(make_key(client, "eval:admin", "eval:run"))
    refused = client.put("/eval/sets/handbook", headers=admin_of_evals, content=ONE_CASE)
    assert refused.status_code == 409
    assert "read-only" in refused.json()["detail"]
    run_id = client.post("/eval/run", headers=admin_of_evals, json={"set": "handbook", "overrides": DEGRADED}).json()[
        "run_id"
    ]
    body = {"run_id": run_id, "name": "handbook", "replace": True}
    assert client.post("/eval/baselines", headers=admin_of_evals, json=body).status_code == 409
    # shadowing is an admin's deliberate act
    assert client.put("/eval/sets/handbook?shadow=true", headers=admin_of_evals, content=ONE_CASE).status_code == 403
    assert client.post("/eval/baselines", headers=admin_of_evals, json={**body, "shadow": True}).status_code == 403
    # under its own name, an eval admin promotes and replaces, and the history keeps the old one
    mine = {"run_id": run_id, "name": "mine"}
    assert client.post("/eval/baselines", headers=admin_of_evals, json=mine).status_code == 201
    assert client.post("/eval/baselines", headers=admin_of_evals, json=mine).status_code == 409
    again = client.post("/eval/baselines", headers=admin_of_evals, json={**mine, "replace": True})
    assert again.status_code == 201
    assert again.json()["replaced"] == run_id


def test_an_admins_shadow_shows_in_every_report(client: TestClient) -> None:
    admin = auth(make_key(client, "admin"))
    shadowed = client.put("/eval/sets/handbook?shadow=true", headers=admin, content=ONE_CASE)
    assert shadowed.status_code == 200
    assert shadowed.json()["source"] == "stored, shadowing packaged"
    listed = {s["name"]: s["source"] for s in client.get("/eval/sets", headers=admin).json()}
    assert listed["handbook"] == "stored, shadowing packaged"
    report = client.post("/eval/run", headers=admin, json={"set": "handbook", "baseline": "handbook"}).json()
    assert report["params"]["set_source"] == "stored, shadowing packaged"
    assert any("shadowing the packaged one" in w for w in report["warnings"])
    assert report["gate"]["baseline"]["source"] == "packaged"
    run_id = report["run_id"]
    shadow = {"run_id": run_id, "name": "handbook", "replace": True, "shadow": True}
    assert client.post("/eval/baselines", headers=admin, json=shadow).status_code == 201
    again = client.post("/eval/run", headers=admin, json={"set": "handbook", "baseline": "handbook"}).json()
    assert again["gate"]["baseline"]["source"] == "stored, shadowing packaged"
    assert again["gate"]["baseline"]["run_id"] == run_id
    actions = [e["action"] for e in client.get("/admin/audit", headers=admin).json()["entries"]]
    assert actions.count("set.put") == 1
    assert actions.count("baseline.promote") == 1


def test_a_verdict_names_the_hash_of_what_it_compared_with(tmp_path: Path) -> None:
    baseline = load_baseline("handbook")
    assert baseline.policy is not None
    stricter = replace(baseline, policy=replace(baseline.policy, tolerance=0.01))
    assert stricter.sha256 != baseline.sha256  # the policy is hashed with the run
    packaged = baseline.run
    copy = tmp_path / "copy.json"
    copy.write_text((PACKAGE_DIR / "baselines" / "handbook.json").read_text(encoding="utf-8").replace("\n", "\n "))
    assert run_digest(load_run(copy)) == run_digest(packaged)  # the content, not the bytes of a file
    first = packaged.cases[0]
    edited = replace(packaged, cases=(replace(first, first_relevant_rank=99), *packaged.cases[1:]))
    assert run_digest(edited) != run_digest(packaged)
