"""Syntheses, sweeps and answer gradings over HTTP, with a fake OpenAI-compatible LLM on loopback that reads the
prompt it is sent (tests/service/infra/openai_fake.py): 202 and a Location, progress, the stored result, review into
the set, cancel and resume, and a clear error without an LLM."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.runtime import Components
from service.settings import Settings
from tests.fake_llm import brain
from tests.fakes import FakeEmbedder
from tests.service.api.access_helpers import auth, docs, make_key, secured_client
from tests.service.infra.openai_fake import FakeOpenAI, Refusal, Reply

DOCS = [
    {
        "id": "hr/leave",
        "title": "Leave policy",
        "text": "# Annual leave\n\nStaff in Portugal receive 25 working days of paid leave each calendar year. "
        "Unused days lapse at the end of March.\n\n# Sick leave\n\nA doctor's note is needed from the third "
        "consecutive day of absence.",
        "tags": ["hr"],
    },
    {
        "id": "it/vpn",
        "title": "VPN",
        "text": "# Connecting\n\nThe VPN client reports error 809 when UDP port 500 is blocked by a hotel network. "
        "Switch to the TCP profile to get around it.",
        "tags": ["it"],
    },
]


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=brain) as fake:
        yield fake


def make_client(tmp_path: Path, **settings: Any) -> TestClient:
    app = create_app(
        Settings(data_dir=tmp_path / "data", index_copies=1, **settings),
        components=Components(embedder=lambda _: FakeEmbedder()),
    )
    return TestClient(app)


@pytest.fixture
def client(tmp_path: Path, llm: FakeOpenAI) -> Iterator[TestClient]:
    with make_client(tmp_path, llm_base_url=llm.base_url, llm_model="fake-model") as c:
        assert c.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
        assert c.post("/documents", json={"documents": DOCS}).status_code == 200
        yield c


def follow(
    client: TestClient, location: str, timeout: float = 60, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = client.get(location, headers=headers).json()
        if view["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return view
        client.app.state.runtime.evals.wait(0.2)  # type: ignore[attr-defined]


def test_a_synthesis_proposes_checked_questions_and_a_review_adds_them_to_the_set(client: TestClient) -> None:
    started = client.post("/eval/sets/day0/synthesize", json={"passages": 10, "per_passage": 2, "seed": 3})
    assert started.status_code == 202, started.text
    view = follow(client, started.headers["Location"])
    assert view["status"] == "done", view
    summary = view["result"]
    assert summary["passages"] == 3  # every chunk of the two documents (one a section): fewer than asked for
    assert summary["by_status"] == {"proposed": 3, "discarded": 3}
    assert summary["discarded_by_reason"]["copied"] == 3
    assert summary["discarded_by_reason"]["pronoun_led"] == 3
    assert summary["overlap"]["count"] == 6
    assert summary["overlap"]["max"] >= 0.8
    assert summary["generator"] == {"model": "fake-model", "prompt_version": "synth-v1"}
    assert summary["usage"]["requests"] == 6  # a generation per chunk, a check per question that passed the rules

    listed = client.get("/eval/sets/day0/proposals").json()
    assert listed["counts"] == {"proposed": 3, "discarded": 3}
    first = listed["proposals"][0]
    assert first["case"]["source"] == "synthetic"
    assert first["case"]["relevant"][0]["evidence"]
    assert client.get("/eval/sets/day0").status_code == 404  # nothing in the set before review

    reviewed = client.post("/eval/sets/day0/proposals/review", json={"status": "accepted", "ids": [first["id"]]})
    assert reviewed.json()["changed"] == [first["id"]]
    rejected = client.post("/eval/sets/day0/proposals/review", json={"status": "rejected", "all": True})
    assert len(rejected.json()["changed"]) == 2
    cases = [json.loads(line) for line in client.get("/eval/sets/day0").text.splitlines()]
    assert [c["id"] for c in cases] == [first["case_id"]]
    assert cases[0]["generator"] == {"model": "fake-model", "prompt_version": "synth-v1"}

    run = client.post("/eval/run", json={"set": "day0"}).json()
    assert [(g["name"], g["cases"]) for g in run["by_origin"]] == [("synthetic", 1)]


def test_without_an_llm_a_synthesis_says_what_to_set(tmp_path: Path) -> None:
    with make_client(tmp_path) as client:
        assert client.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
        client.post("/documents", json={"documents": DOCS})
        answer = client.post("/eval/sets/day0/synthesize", json={})
        assert answer.status_code == 409
        assert "PLUMBLINE_LLM_BASE_URL" in answer.json()["detail"]


def test_a_sweep_chooses_on_tune_and_reports_on_held_out(client: TestClient) -> None:
    cases = [
        {"id": f"c{n}", "question": q, "relevant": [{"doc_id": d}]}
        for n, (q, d) in enumerate(
            [("paid leave Portugal", "hr/leave"), ("error 809 VPN", "it/vpn"), ("doctor note absence", "hr/leave")] * 4
        )
    ]
    client.put("/eval/sets/small", content="".join(json.dumps(c) + "\n" for c in cases))
    body = {"set": "small", "space": {"mode": ["keyword", "hybrid"], "chunk_size": [200, 1000]}, "metric": "mrr"}
    started = client.post("/eval/sweeps", json=body)
    assert started.status_code == 202, started.text
    view = follow(client, started.headers["Location"], timeout=120)
    assert view["status"] == "done", view
    result = view["result"]
    assert len(result["rows"]) == 4
    assert result["split"]["tune"] + result["split"]["test"] == 12
    assert any(r["pareto"] for r in result["rows"])
    assert result["held_out"]["cases"] == result["split"]["test"]
    assert not list((Path(client.app.state.runtime.settings.data_dir) / "scratch").glob("*/*"))  # type: ignore[attr-defined]


def test_answers_are_graded_with_median_and_spread_and_never_gate(client: TestClient, llm: FakeOpenAI) -> None:
    items = [
        {"id": "a1", "question": "How many leave days?", "answer": "25 days.", "contexts": ["25 working days"]},
        {"id": "a2", "question": "VPN error 809?", "answer": "Use TCP.", "contexts": ["Switch to TCP"]},
    ]
    started = client.post("/eval/answers", json={"set": "day0", "items": items, "samples": 3})
    assert started.status_code == 202, started.text
    view = follow(client, started.headers["Location"])
    assert view["status"] == "done", view
    report = view["result"]
    assert report["overall"]["faithfulness"] == pytest.approx(0.75)
    assert report["overall"]["completeness"] == pytest.approx(0.25)
    assert report["graded"] == 2
    assert report["samples_per_item"] == 3
    assert len(llm.requests) == 6
    assert client.get("/eval/runs").json() == []  # a grading is not a retrieval run
    assert report["retrieval"]["note"] is None  # the set has no retrieval run to judge by
    metrics = client.get("/metrics").text
    assert 'plumbline_answer_grade{criterion="faithfulness",set="day0"} 0.75' in metrics
    assert 'plumbline_answer_items{set="day0",state="graded"} 2.0' in metrics


def test_a_grading_says_to_fix_retrieval_first_when_recall_is_low(client: TestClient, llm: FakeOpenAI) -> None:
    cases = [{"id": f"c{n}", "question": "leave days", "relevant": [{"doc_id": "hr/archived"}]} for n in range(3)]
    client.put("/eval/sets/weak", content="".join(json.dumps(c) + "\n" for c in cases))
    run = client.post("/eval/run", json={"set": "weak", "k": [10]}).json()
    assert run["metrics"]["recall@10"] < 0.8
    items = [{"id": "c0", "question": "leave days", "answer": "25 days"}]  # contexts from the run's retrieval
    started = client.post("/eval/answers", json={"set": "weak", "items": items, "run_id": run["run_id"], "samples": 1})
    assert started.status_code == 202, started.text
    report = follow(client, started.headers["Location"])["result"]
    assert report["retrieval"]["run_id"] == run["run_id"]
    assert report["retrieval"]["note"].startswith("fix retrieval first")
    judged = llm.requests[-1].body["messages"][-1]["content"]
    assert "Staff in Portugal receive 25 working days" in judged  # the run's chunk, its full text from the index


def small_set(client: TestClient) -> None:
    cases = [
        {"id": f"c{n}", "question": q, "relevant": [{"doc_id": d}]}
        for n, (q, d) in enumerate(
            [("paid leave Portugal", "hr/leave"), ("error 809 VPN", "it/vpn"), ("doctor note absence", "hr/leave")] * 4
        )
    ]
    assert client.put("/eval/sets/small", content="".join(json.dumps(c) + "\n" for c in cases)).status_code == 200


def test_a_winner_is_promoted_to_the_served_defaults_only_through_the_gate(client: TestClient) -> None:
    small_set(client)
    run = client.post("/eval/run", json={"set": "small"}).json()
    assert client.post("/eval/baselines", json={"run_id": run["run_id"], "name": "small"}).status_code == 201
    assert len(client.post("/search", json={"query": "leave"}).json()["hits"]) == 3  # every chunk: k 10 by default

    started = client.post("/eval/sweeps", json={"set": "small", "space": {"k": [2]}, "metric": "hit@1"})
    assert follow(client, started.headers["Location"])["status"] == "done"
    promoted = client.post(f"{started.headers['Location']}/promote", json={})
    assert promoted.status_code == 200, promoted.text
    body = promoted.json()
    assert body["promoted"] is True
    assert body["served"] == {"k": 2}
    assert body["run"]["gate"]["verdict"] == "pass"
    assert len(client.post("/search", json={"query": "leave"}).json()["hits"]) == 2  # served at once

    chunking = client.post("/eval/sweeps", json={"set": "small", "space": {"chunk_size": [300]}, "metric": "hit@1"})
    assert follow(client, chunking.headers["Location"])["status"] == "done"
    refused = client.post(f"{chunking.headers['Location']}/promote", json={})
    assert refused.status_code == 409
    assert "PLUMBLINE_CHUNK_SIZE=300" in refused.json()["detail"]


def test_a_failing_gate_promotes_nothing(client: TestClient) -> None:
    small_set(client)
    run = client.post("/eval/run", json={"set": "small"}).json()
    client.post("/eval/baselines", json={"run_id": run["run_id"], "name": "small"})
    assert client.delete("/documents/it/vpn").status_code == 200  # a third of the cases can no longer pass
    started = client.post("/eval/sweeps", json={"set": "small", "space": {"k": [2]}, "metric": "hit@1"})
    assert follow(client, started.headers["Location"])["status"] == "done"
    body = client.post(f"{started.headers['Location']}/promote", json={}).json()
    assert body["run"]["gate"]["verdict"] == "fail"
    assert body["promoted"] is False
    assert client.post("/search", json={"query": "leave"}).json()["params"]["k"] == 10  # the defaults unchanged


def test_quality_control_discards_malformed_refused_unanswered_and_duplicate_questions(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    same = "How many paid leave days do Portuguese employees receive per year?"
    reordered = "Portuguese employees receive how many paid leave days per year?"
    unanswered = "Which network port must be open for the corporate VPN client to connect?"
    questions = [{"question": q, "evidence": "25 working days"} for q in (same, reordered, unanswered)]
    llm.script(
        Reply(content="{questions: [oops"),  # the first passage's reply holds no JSON that parses
        Refusal("I can't help with that"),  # the second's is a refusal
        Reply(json={"questions": questions}),  # the third's: three questions, each checked
        Reply(json={"answerable": True, "reason": "stated"}),
        Reply(json={"answerable": True, "reason": "stated"}),
        Reply(json={"answerable": False, "reason": "the passage does not say"}),
    )
    with make_client(tmp_path, llm_base_url=llm.base_url, llm_model="fake-model", llm_max_concurrency=1) as client:
        assert client.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
        client.post("/documents", json={"documents": DOCS})
        started = client.post("/eval/sets/day0/synthesize", json={"passages": 3, "per_passage": 3})
        summary = follow(client, started.headers["Location"])["result"]
        assert summary["discarded_by_reason"] == {
            "malformed": 1,
            "near_duplicate": 1,
            "not_answered": 1,
            "refused": 1,
        }
        (kept,) = client.get("/eval/sets/day0/proposals").json()["proposals"]
        assert kept["question"] == same  # the first of two near-duplicates stays
        assert kept["check"] == "stated"


def test_a_sweep_checks_the_disk_before_it_builds_an_index_and_leaves_nothing(client: TestClient) -> None:
    small_set(client)
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    full = runtime.settings.model_copy(update={"min_free_disk_mb": 10**9})  # no disk could keep that much free
    runtime.base_settings = runtime.settings = full
    started = client.post("/eval/sweeps", json={"set": "small", "space": {"chunk_size": [300, 1000]}})
    view = follow(client, started.headers["Location"])
    assert view["status"] == "failed"
    assert "must stay free" in view["error"]
    assert not list((runtime.settings.data_dir / "scratch").glob("*/*"))


def test_a_synthesis_of_one_tenant_drafts_from_its_documents_and_its_key_sees_only_those(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    settings = Settings(data_dir=tmp_path / "data", index_copies=1, llm_base_url=llm.base_url, llm_model="fake-model")
    with secured_client(settings) as c:
        admin = auth(make_key(c, "admin"))
        acme = auth(make_key(c, "eval:run", tenant="acme"))  # sets are shared: drafting them takes an unbound key
        body = docs(
            ("acme/leave", "acme", "Staff receive 25 working days of paid leave each calendar year."),
            ("other/vpn", "other", "The VPN client reports error 809 when UDP port 500 is blocked."),
        )
        assert c.post("/documents", headers=admin, json=body).status_code == 200
        assert c.post("/eval/sets/day0/synthesize", headers=acme, json={}).status_code == 403
        only = c.post("/eval/sets/day0/synthesize", headers=admin, json={"passages": 5, "tenant": "acme"})
        assert follow(c, only.headers["Location"], headers=admin)["result"]["strata"] == {"acme/-": 1}
        every = c.post("/eval/sets/day0/synthesize", headers=admin, json={"passages": 5, "seed": 1})
        assert follow(c, every.headers["Location"], headers=admin)["status"] == "done"

        assert c.get(only.headers["Location"], headers=acme).status_code == 404  # an unbound key's work
        assert c.get("/eval/syntheses", headers=acme).json() == []
        seen = c.get("/eval/sets/day0/proposals", headers=acme, params={"status": "discarded"}).json()
        assert {p["tenant"] for p in seen["proposals"]} == {"acme"}
        everything = c.get("/eval/sets/day0/proposals", headers=admin, params={"status": "discarded"}).json()
        assert {p["tenant"] for p in everything["proposals"]} == {"acme", "other"}


def test_a_rows_k_is_what_it_measures_with(client: TestClient) -> None:
    small_set(client)
    started = client.post("/eval/sweeps", json={"set": "small", "space": {"k": [1, 10]}, "metric": "recall@10"})
    rows = {r["config"]["k"]: r for r in follow(client, started.headers["Location"])["result"]["rows"]}
    # the generator of a k=1 row sees one result: its recall@10 is its recall@1, and its context one chunk's tokens
    assert rows[1]["metrics"]["recall@10"] == rows[1]["metrics"]["recall@1"]
    assert rows[1]["context_tokens"] < rows[10]["context_tokens"]
