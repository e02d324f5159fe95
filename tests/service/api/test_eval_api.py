from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from eval.cases import parse_jsonl

DOCS = [
    {
        "id": "it/vpn",
        "title": "VPN",
        "text": "# VPN\n\n## Errors\n\nError LC-419 means the token expired; sign in again.",
    },
    {"id": "hr/leave", "title": "Leave", "text": "# Leave\n\n## Parental\n\nParents get 16 weeks of paid leave."},
    {"id": "billing/refunds", "title": "Refunds", "text": "# Refunds\n\nAnnual plans are refundable within 30 days."},
]
CASES = [
    {
        "id": "c1",
        "question": "LC-419 vpn",
        "relevant": [{"doc_id": "it/vpn", "evidence": "token expired"}],
        "category": "it",
        "source": "log",
    },
    {
        "id": "c2",
        "question": "parental leave weeks",
        "relevant": [{"doc_id": "hr/leave", "evidence": "16 weeks"}],
        "category": "hr",
        "source": "handwritten",
    },
    {"id": "c3", "question": "refund annual", "relevant": [{"chunk_id": "billing/refunds#0"}], "category": "billing"},
]
ONLY_REFUNDS = {"doc_ids": ["billing/refunds"]}  # an override that hides two cases' answers
JSONL = "".join(json.dumps(c) + "\n" for c in CASES)


@pytest.fixture
def ready(client: TestClient) -> TestClient:
    assert client.post("/documents", json={"documents": DOCS}).status_code == 200
    assert client.put("/eval/sets/mini", content=JSONL).json() == {
        "name": "mini",
        "cases": 3,
        "warnings": [],
        "source": "stored",
    }
    return client


def test_run_report_store_and_gate(ready: TestClient) -> None:
    r = ready.post("/eval/run", json={"set": "mini", "k": [1, 3]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metrics"]["hit@3"] == 1.0
    assert body["cases_total"] == 3
    assert {g["name"]: g["cases"] for g in body["by_category"]} == {"it": 1, "hr": 1, "billing": 1}
    assert {g["name"] for g in body["by_source"]} == {"log", "handwritten", "unknown"}
    assert body["gate"] is None
    assert body["diagnosis"]
    assert len(body["cases"]) == 3
    run_id = body["run_id"]
    assert [r["run_id"] for r in ready.get("/eval/runs").json()] == [run_id]
    assert ready.get(f"/eval/runs/{run_id}").json()["metrics"] == body["metrics"]
    trec = ready.get(f"/eval/runs/{run_id}/trec").text.splitlines()
    assert trec[0].startswith("c1 Q0 ")
    assert trec[0].endswith(" plumbline")
    assert ready.post("/eval/baselines", json={"run_id": run_id, "name": "mini-base"}).status_code == 201
    same = ready.post("/eval/run", json={"set": "mini", "k": [1, 3], "baseline": "mini-base"}).json()
    assert same["gate"]["verdict"] == "pass"
    worse = ready.post(
        "/eval/run",
        json={
            "set": "mini",
            "k": [1, 3],
            "baseline": "mini-base",
            "overrides": {"filters": {"doc_ids": ["billing/refunds"]}},
        },
    ).json()
    assert worse["gate"]["verdict"] == "fail"
    assert any("hit@3 (overall) fell" in reason for reason in worse["gate"]["reasons"])
    assert {w["case_id"] for w in worse["gate"]["worse_cases"]} == {"c1", "c2"}
    stored = ready.get(f"/eval/runs/{run_id}").json()
    assert {k: worse["gate"]["baseline"][k] for k in ("name", "run_id", "source")} == {
        "name": "mini-base",
        "run_id": run_id,
        "source": "stored",
    }
    assert len(worse["gate"]["baseline"]["sha256"]) == 64
    assert stored["run_id"] == run_id
    assert "plumbline_eval_metric{" not in ready.get("/metrics").text  # no monitoring run yet
    monitoring = ready.post("/eval/run", json={"set": "mini", "k": [1, 3], "monitoring": True, "baseline": "mini-base"})
    assert monitoring.json()["kind"] == "monitoring"
    metrics = ready.get("/metrics").text
    assert 'plumbline_eval_metric{category="all",k="3",metric="hit",set="mini"} 1.0' in metrics
    assert 'plumbline_eval_metric{category="all",k="3",metric="stale",set="mini"} 0.0' in metrics  # all current
    assert 'plumbline_eval_baseline_metric{category="all",k="3",metric="hit",set="mini"} 1.0' in metrics
    assert 'plumbline_eval_gate_passed{set="mini"} 1.0' in metrics


def eval_gauges(client: TestClient) -> list[str]:
    return [line for line in client.get("/metrics").text.splitlines() if line.startswith("plumbline_eval_")]


def test_an_experiment_run_leaves_the_gauges_unchanged(ready: TestClient) -> None:
    first = ready.post("/eval/run", json={"set": "mini", "k": [1, 3], "monitoring": True}).json()
    assert ready.post("/eval/baselines", json={"run_id": first["run_id"], "name": "mini"}).status_code == 201
    ready.post("/eval/run", json={"set": "mini", "k": [1, 3], "monitoring": True})  # gated against "mini" now
    before = eval_gauges(ready)
    assert 'plumbline_eval_gate_passed{set="mini"} 1.0' in before
    experiment = ready.post(
        "/eval/run",
        json={"set": "mini", "k": [1, 3], "baseline": "mini", "overrides": {"alpha": 0, "filters": ONLY_REFUNDS}},
    ).json()
    assert experiment["kind"] == "experiment"
    assert experiment["gate"]["verdict"] == "fail"
    manual = ready.post("/eval/run", json={"set": "mini", "k": [1, 3], "baseline": "mini"}).json()
    assert manual["kind"] == "manual"
    assert eval_gauges(ready) == before
    listed = ready.get("/eval/runs", params={"kind": "experiment"}).json()
    assert [(r["run_id"], r["overrides"]) for r in listed] == [
        (experiment["run_id"], {"alpha": 0.0, "filters": ONLY_REFUNDS})
    ]
    assert [r["kind"] for r in ready.get("/eval/runs").json()] == ["manual", "experiment", "monitoring", "monitoring"]
    refused = ready.post("/eval/run", json={"set": "mini", "monitoring": True, "overrides": {"alpha": 0}})
    assert refused.status_code == 422
    assert "served configuration" in refused.json()["detail"]


def test_set_export_and_rejected_upload_keeps_the_old_set(ready: TestClient) -> None:
    assert parse_jsonl(ready.get("/eval/sets/mini").text) == parse_jsonl(JSONL)
    bad = (
        JSONL
        + '{"id": "c4", "question": "x"}\nnot json\n{"id": "c1", "question": "dup", "relevant": [{"doc_id": "a"}]}\n'
    )
    r = ready.put("/eval/sets/mini", content=bad)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "mini:4: missing 'relevant'" in detail
    assert "mini:5: not valid JSON" in detail
    assert "mini:6: duplicate id" in detail
    assert len(ready.get("/eval/sets/mini").text.splitlines()) == 3
    assert {s["name"] for s in ready.get("/eval/sets").json()} >= {"mini", "handbook"}


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"set": "nope"}, 404, "no labelled set named 'nope'"),
        ({"set": "mini", "baseline": "nope"}, 404, "no baseline named 'nope'"),
        ({"set": "mini", "k": [0]}, 422, "k values must be between"),
        ({"set": "mini", "unit": "page"}, 422, "unit"),
        ({"set": "mini", "overrides": {"mode": "fuzzy"}}, 422, "overrides.mode"),
        ({"set": "../etc/passwd"}, 422, "invalid"),
        ({"set": "mini", "baseline": "/etc/some.json"}, 422, "baseline name"),  # names only: no file reads
        ({"set": "mini", "k": [1, 5], "metrics": ["ndgc@5"]}, 422, "unknown metric(s) ['ndgc@5'] for k=[1, 5]"),
        ({"set": "mini", "metrics": ["hit@20"]}, 422, "known: hit@1, recall@1"),
    ],
)
def test_bad_eval_requests(ready: TestClient, body: dict, status: int, message: str) -> None:
    r = ready.post("/eval/run", json=body)
    assert r.status_code == status, r.text
    assert message in r.json()["detail"]


def test_unknown_run(ready: TestClient) -> None:
    assert ready.get("/eval/runs/20260101T000000-abcdef").status_code == 404
    assert ready.post("/eval/baselines", json={"run_id": "20260101T000000-abcdef", "name": "x"}).status_code == 404


def test_a_gated_run_reads_back_with_its_verdict_and_its_diagnosis_agrees(ready: TestClient) -> None:
    run_id = ready.post("/eval/run", json={"set": "mini", "k": [1, 3]}).json()["run_id"]
    assert ready.post("/eval/baselines", json={"run_id": run_id, "name": "b"}).status_code == 201
    body = {"set": "mini", "k": [1, 3], "baseline": "b", "overrides": {"filters": {"doc_ids": ["billing/refunds"]}}}
    worse = ready.post("/eval/run", json=body).json()
    assert worse["gate"]["verdict"] == "fail"
    stored = ready.get(f"/eval/runs/{worse['run_id']}").json()
    assert stored["gate"] == worse["gate"]  # was null
    assert "healthy" not in str(stored["diagnosis"])


def test_the_freshness_guard_fails_a_run_that_serves_superseded_documents(ready: TestClient) -> None:
    old = [{"id": f"{d['id']}-2024", "title": d["title"], "text": d["text"], "status": "superseded"} for d in DOCS]
    assert ready.post("/documents", json={"documents": old}).status_code == 200
    fresh = ready.post("/eval/run", json={"set": "mini", "k": [1, 3]}).json()
    assert fresh["metrics"]["stale@3"] == 0.0
    assert ready.post("/eval/baselines", json={"run_id": fresh["run_id"], "name": "fresh"}).status_code == 201
    body = {"set": "mini", "k": [1, 3], "baseline": "fresh", "overrides": {"fresh_only": False}}
    stale = ready.post("/eval/run", json=body).json()
    assert stale["metrics"]["stale@3"] == 1.0  # every old copy is as good a match as its current one
    assert stale["gate"]["verdict"] == "fail"
    assert any(r.startswith("stale@3 (overall) rose 1.000 from 0.000 to 1.000") for r in stale["gate"]["reasons"])
    assert {(w["case_id"], w["metric"]) for w in stale["gate"]["worse_cases"] if w["metric"] == "stale@3"} == {
        ("c1", "stale@3"),
        ("c2", "stale@3"),
        ("c3", "stale@3"),
    }


def test_a_baseline_is_replaced_only_when_asked_and_the_old_one_is_kept(ready: TestClient) -> None:
    first = ready.post("/eval/run", json={"set": "mini", "k": [1, 3]}).json()["run_id"]
    second = ready.post("/eval/run", json={"set": "mini", "k": [1, 3]}).json()["run_id"]
    assert ready.post("/eval/baselines", json={"run_id": first, "name": "b"}).json()["replaced"] is None
    r = ready.post("/eval/baselines", json={"run_id": second, "name": "b"})
    assert r.status_code == 409
    assert "send replace: true" in r.json()["detail"]
    r = ready.post("/eval/baselines", json={"run_id": second, "name": "b", "replace": True})
    assert {k: r.json()[k] for k in ("name", "run_id", "replaced")} == {
        "name": "b",
        "run_id": second,
        "replaced": first,
    }
    r = ready.post("/eval/baselines", json={"run_id": second, "name": "handbook"})  # would shadow the packaged one
    assert r.status_code == 409


def test_cases_naming_documents_not_in_the_index_are_kept_with_a_warning(ready: TestClient) -> None:
    typo = {"id": "c9", "question": "vpn", "relevant": [{"doc_id": "it/vnp"}, {"chunk_id": "hr/leave#0"}]}
    r = ready.put("/eval/sets/typo", content=JSONL + json.dumps(typo) + "\n")
    assert r.status_code == 200
    assert r.json()["cases"] == 4
    assert r.json()["warnings"] == [
        "1 case(s) name documents the index does not hold, so they can never pass: c9: it/vnp"
    ]
    assert ready.put("/eval/sets/mini", content=JSONL).json()["warnings"] == []
    body = ready.post("/eval/run", json={"set": "typo"}).json()
    assert body["warnings"] == r.json()["warnings"]
