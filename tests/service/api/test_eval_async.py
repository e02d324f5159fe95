"""Asynchronous eval runs: 202 with a run id, progress while it runs, cancel, and /search served meanwhile."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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
    """With two slots, a background run and a monitoring run go at once; the next background runs of the same caller
    group queue (`queued`, their place in the group's queue), up to PLUMBLINE_EVAL_QUEUE_PER_GROUP (4); one more is
    refused, naming the limit. Each queued run starts in its turn."""
    assert client.post("/eval/run", json={"set": "nope", "async": True}).status_code == 404
    embedder.hold()
    assert client.post("/eval/run", json={"set": "big", "async": True}).status_code == 202
    assert client.post("/eval/run", json={"set": "big", "monitoring": True, "async": True}).status_code == 202
    queued = [client.post("/eval/run", json={"set": "big", "async": True}) for _ in range(4)]
    assert [(r.status_code, r.json()["status"], r.json()["position"]) for r in queued] == [
        (202, "queued", n) for n in (1, 2, 3, 4)
    ]
    refused = client.post("/eval/run", json={"set": "big", "async": True})
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "10")
    detail = refused.json()["detail"]
    assert (
        "the keys bound to no tenant may queue at most 4 run(s) for a slot (PLUMBLINE_EVAL_QUEUE_PER_GROUP)" in detail
    )
    assert "no evaluation slot is free for it (all 2 evaluation slot(s) are in use by runs in progress)" in detail
    embedder.release()
    evals(client).wait(30)
    assert len(client.get("/eval/runs").json()) == 6


def test_a_tenant_hogging_background_runs_queues_and_another_tenant_gets_the_next_turn(
    tmp_path: Path, embedder: GatedFakeEmbedder
) -> None:
    """Two slots, so one for runs that are not monitoring runs. Tenant acme's background run holds it; its next runs
    queue, and so does tenant beta's; an `eval:admin` key's monitoring run starts at once in the slot kept for it. A
    queued run can be cancelled (nothing ran). When acme's run ends the slot goes to beta (the group served least
    recently), and only then to acme's next run: acme cannot take every turn by asking first."""
    tenants = ("acme", "beta")
    docs = [{**d, "id": f"{t}/{d['id']}", "tenant": t} for t in tenants for d in DOCS]
    cases = [
        {
            **c,
            "id": f"{t}-{c['id']}",
            "relevant": [{"doc_id": f"{t}/{c['relevant'][0]['doc_id']}"}],
            "filters": {"tenant": t},
        }
        for t in tenants
        for c in CASES
    ]
    with secured_client(Settings(data_dir=tmp_path / "data", index_copies=1), embedder=embedder) as client:
        acme, beta = (auth(make_key(client, "eval:run", tenant=t)) for t in tenants)
        admin = auth(make_key(client, "admin"))
        assert client.post("/documents", headers=admin, json={"documents": docs}).status_code == 200
        body = "".join(json.dumps(x) + "\n" for x in cases)
        assert client.put("/eval/sets/big", headers=admin, content=body).status_code == 200
        embedder.hold()  # every run waits at its first batch of questions
        try:
            asked = [
                client.post("/eval/run", headers=key, json={"set": "big", "async": True})
                for key in (acme, acme, beta, acme)
            ]
            assert [(r.status_code, r.json()["status"], r.json()["position"]) for r in asked] == [
                (202, "running", None),
                (202, "queued", 1),
                (202, "queued", 1),  # its place among beta's queued runs
                (202, "queued", 2),
            ]
            monitoring = client.post("/eval/run", headers=admin, json={"set": "big", "monitoring": True, "async": True})
            assert (monitoring.status_code, monitoring.json()["status"]) == (202, "running")
            first, cancelled, turn, last = (r.json()["run_id"] for r in asked)
            stopped = client.post(f"/eval/runs/{cancelled}/cancel", headers=acme)
            assert (stopped.status_code, stopped.json()["status"]) == (202, "cancelled")
            assert f"run {cancelled} was cancelled while it waited for an evaluation slot" in stopped.json()["error"]
            assert client.get(f"/eval/runs/{last}", headers=acme).json()["position"] == 1  # one fewer before it
            assert client.post(f"/eval/runs/{cancelled}/cancel", headers=acme).status_code == 409
        finally:
            embedder.release()
        evals(client).wait(30)
        jobs = client.app.state.runtime.state.jobs  # type: ignore[attr-defined]
        ended = {r: jobs.get(r) for r in (first, cancelled, turn, last, monitoring.json()["run_id"])}
        assert [j.status for j in ended.values()] == ["done", "cancelled", "done", "done", "done"]
        assert ended[first].finished_at < ended[turn].finished_at < ended[last].finished_at  # one ordinary slot
        assert ended[cancelled].done == 0


def test_a_run_waited_on_waits_for_its_turn_and_shutdown_ends_a_queued_run_saying_why(
    client: TestClient, embedder: GatedFakeEmbedder
) -> None:
    embedder.hold()
    assert client.post("/eval/run", json={"set": "big", "async": True}).status_code == 202
    admission = evals(client)._admission
    with ThreadPoolExecutor(1) as pool:
        waited = pool.submit(client.post, "/eval/run", json={"set": "big", "k": [1]})
        with admission.changed:  # queued behind the background run (today: a 429 at once)
            assert admission.changed.wait_for(lambda: admission.queued(None) == 1 or waited.done(), timeout=30)
        assert not waited.done()
        embedder.release()
        assert waited.result(timeout=60).status_code == 200
    evals(client).wait(30)
    embedder.hold()
    running = client.post("/eval/run", json={"set": "big", "async": True}).json()["run_id"]
    queued = client.post("/eval/run", json={"set": "big", "async": True}).json()["run_id"]
    evals(client).shutdown(timeout=0)  # as the server's shutdown does, without waiting here
    embedder.release()
    evals(client).wait(30)
    stopped = client.get(f"/eval/runs/{queued}").json()
    assert (stopped["status"], stopped["position"]) == ("cancelled", None)
    assert f"run {queued} did not start: the service is shutting down" in stopped["error"]
    assert "the service is shutting down" in client.get(f"/eval/runs/{running}").json()["error"]


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
    assert 'plumbline_eval_jobs_recent{kind="manual",status="lost"} 1.0' in client.get("/metrics").text
    refused = client.post("/eval/runs/20260101T000000000000-dead00/cancel")
    assert refused.status_code == 409
    assert "not running (lost)" in refused.json()["detail"]
    assert client.post("/eval/run", json={"set": "big", "async": "yes"}).status_code == 422
