"""Asynchronous eval runs: 202 with a run id, progress while it runs, cancel, and /search served meanwhile."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.api.app import create_app
from service.evaluation.runs import EvalService
from service.runtime import Components
from service.settings import Settings
from tests.fakes import GatedFakeEmbedder
from tests.service.api.access_helpers import auth, make_key, secured_client

DOCS = [{"id": f"doc/{n}", "title": f"Doc {n}", "text": f"topic{n} lorem ipsum topic{n}"} for n in range(10)]
# 130 cases: three batches of questions (64, 64, 2), so a run can be looked at between them
CASES = [{"id": f"c{n}", "question": f"topic{n % 10}", "relevant": [{"doc_id": f"doc/{n % 10}"}]} for n in range(130)]


@pytest.fixture
def embedder() -> GatedFakeEmbedder:
    return GatedFakeEmbedder()


@pytest.fixture
def client(tmp_path: Path, embedder: GatedFakeEmbedder) -> Iterator[TestClient]:
    app = create_app(
        Settings(data_dir=tmp_path / "data", index_copies=1), components=Components(embedder=lambda _: embedder)
    )
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        assert c.post("/documents", json={"documents": DOCS}).status_code == 200
        assert c.put("/eval/sets/big", content="".join(json.dumps(x) + "\n" for x in CASES)).status_code == 200
        yield c
        embedder.release()


def evals(client: TestClient) -> EvalService:
    service: EvalService = client.app.state.runtime.evals  # type: ignore[attr-defined]
    return service


def test_an_async_run_answers_at_once_shows_its_progress_then_its_report(
    client: TestClient, embedder: GatedFakeEmbedder
) -> None:
    embedder.hold(let_through=1)  # the second batch waits
    started = client.post("/eval/run", json={"set": "big", "k": [1, 5], "async": True})
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    assert started.headers["location"] == f"/eval/runs/{run_id}"
    assert embedder.waiting.wait(30)
    running = client.get(f"/eval/runs/{run_id}").json()
    assert (running["status"], running["kind"]) == ("running", "manual")
    assert running["progress"] == {"done": 64, "total": 130}
    # a run in progress does not hold up searches
    assert client.post("/search", json={"query": "topic3", "k": 1}).json()["hits"][0]["doc_id"] == "doc/3"
    embedder.release()
    evals(client).wait(30)
    report = client.get(f"/eval/runs/{run_id}").json()
    assert (report["status"], report["run_id"], report["cases_total"]) == ("done", run_id, 130)
    assert report["metrics"]["hit@1"] == 1.0
    assert [r["run_id"] for r in client.get("/eval/runs").json()] == [run_id]


def test_a_run_can_be_cancelled_and_stops_at_its_next_batch(client: TestClient, embedder: GatedFakeEmbedder) -> None:
    embedder.hold()
    run_id = client.post("/eval/run", json={"set": "big", "async": True}).json()["run_id"]
    assert embedder.waiting.wait(30)
    cancelling = client.post(f"/eval/runs/{run_id}/cancel")
    assert cancelling.status_code == 202
    assert (cancelling.json()["status"], cancelling.json()["cancel_requested"]) == ("running", True)
    embedder.release()
    evals(client).wait(30)
    ended = client.get(f"/eval/runs/{run_id}").json()
    assert (ended["status"], ended["progress"]["done"]) == ("cancelled", 64)
    assert "cancelled after 64 of 130 cases" in ended["error"]
    assert client.get("/eval/runs").json() == []  # nothing stored
    again = client.post(f"/eval/runs/{run_id}/cancel")
    assert again.status_code == 409
    assert "not running (cancelled)" in again.json()["detail"]
    assert client.post("/eval/runs/20990101T000000000000-ffffff/cancel").status_code == 404


def test_async_runs_count_against_the_run_limit_and_a_bad_request_fails_before_it_starts(
    client: TestClient, embedder: GatedFakeEmbedder
) -> None:
    assert client.post("/eval/run", json={"set": "nope", "async": True}).status_code == 404
    embedder.hold()
    assert client.post("/eval/run", json={"set": "big", "async": True}).status_code == 202
    assert client.post("/eval/run", json={"set": "big", "monitoring": True, "async": True}).status_code == 202
    refused = client.post("/eval/run", json={"set": "big", "async": True})
    assert refused.status_code == 429
    assert "all 2 evaluation slot(s) are in use" in refused.json()["detail"]
    embedder.release()
    evals(client).wait(30)
    assert len(client.get("/eval/runs").json()) == 2


def test_one_tenant_cannot_take_every_eval_slot_and_a_monitoring_run_still_starts(
    tmp_path: Path, embedder: GatedFakeEmbedder
) -> None:
    """With two slots, a tenant-bound key's second background run at once is refused, naming the rule; an
    `eval:admin` key's monitoring run still gets the slot kept for it."""
    tenant_docs = [{**d, "tenant": "acme"} for d in DOCS]
    tenant_cases = [{**c, "filters": {"tenant": "acme"}} for c in CASES]
    with secured_client(Settings(data_dir=tmp_path / "data", index_copies=1), embedder=embedder) as client:
        acme, admin = auth(make_key(client, "eval:run", tenant="acme")), auth(make_key(client, "admin"))
        assert client.post("/documents", headers=admin, json={"documents": tenant_docs}).status_code == 200
        body = "".join(json.dumps(x) + "\n" for x in tenant_cases)
        assert client.put("/eval/sets/big", headers=admin, content=body).status_code == 200
        embedder.hold()  # every run waits at its first batch of questions
        try:
            first = client.post("/eval/run", headers=acme, json={"set": "big", "async": True})
            assert first.status_code == 202, first.text
            second = client.post("/eval/run", headers=acme, json={"set": "big", "async": True})
            assert (second.status_code, second.headers["retry-after"]) == (429, "10")
            assert "tenant 'acme' already hold(s) 1 of the 2 evaluation slots" in second.json()["detail"]
            assert "retry when a run in progress ends" in second.json()["detail"]
            monitoring = client.post("/eval/run", headers=admin, json={"set": "big", "monitoring": True, "async": True})
            assert monitoring.status_code == 202, monitoring.text
        finally:
            embedder.release()
        evals(client).wait(30)
        ended = [client.get(f"/eval/runs/{r.json()['run_id']}", headers=admin).json() for r in (first, monitoring)]
        assert [(e["status"], e["kind"]) for e in ended] == [("done", "manual"), ("done", "monitoring")]


def test_a_background_run_past_the_time_limit_ends_failed_naming_it(
    tmp_path: Path, embedder: GatedFakeEmbedder
) -> None:
    settings = Settings(data_dir=tmp_path / "data", index_copies=1, eval_timeout_seconds=0.2)
    app = create_app(settings, components=Components(embedder=lambda _: embedder))
    with TestClient(app) as client:
        assert app.state.runtime.wait(timeout=60)
        assert client.post("/documents", json={"documents": DOCS}).status_code == 200
        assert client.put("/eval/sets/big", content="".join(json.dumps(x) + "\n" for x in CASES)).status_code == 200
        embedder.hold(let_through=1)  # the second batch waits past the limit
        started = client.post("/eval/run", json={"set": "big", "async": True})
        assert started.status_code == 202, started.text
        assert embedder.waiting.wait(30)
        time.sleep(0.3)
        embedder.release()
        evals(client).wait(30)
        ended = client.get(f"/eval/runs/{started.json()['run_id']}").json()
        assert ended["status"] == "failed"
        assert "stopped after 128 of 130 cases" in ended["error"]
        assert "ran past its limit of 0.2 s (PLUMBLINE_EVAL_TIMEOUT_SECONDS)" in ended["error"]
        assert client.get("/eval/runs").json() == []  # nothing stored


def test_a_monitoring_run_in_progress_refuses_a_second_one(client: TestClient, embedder: GatedFakeEmbedder) -> None:
    embedder.hold()
    first = client.post("/eval/run", json={"set": "big", "monitoring": True, "async": True})
    assert first.status_code == 202
    second = client.post("/eval/run", json={"set": "big", "monitoring": True})
    assert second.status_code == 429
    assert "a monitoring run of set 'big' is already in progress" in second.json()["detail"]
    embedder.release()
    evals(client).wait(30)
    assert client.get(f"/eval/runs/{first.json()['run_id']}").json()["kind"] == "monitoring"
    assert 'plumbline_eval_cases{category="all",set="big"} 130.0' in client.get("/metrics").text


def test_a_lost_run_cannot_be_cancelled_and_async_takes_only_a_boolean(client: TestClient) -> None:
    state = client.app.state.runtime.state  # type: ignore[attr-defined]
    state.jobs.start("20260101T000000000000-dead00", "big", "manual", 130, "a replica that died")
    with state.engine.begin() as conn:
        conn.execute(text("UPDATE eval_jobs SET heartbeat_at = '2020-01-01T00:00:00.000000Z'"))
    assert client.get("/eval/runs/20260101T000000000000-dead00").json()["status"] == "lost"
    refused = client.post("/eval/runs/20260101T000000000000-dead00/cancel")
    assert refused.status_code == 409
    assert "not running (lost)" in refused.json()["detail"]
    assert client.post("/eval/run", json={"set": "big", "async": "yes"}).status_code == 422
