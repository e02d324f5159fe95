"""Two replicas as a cluster runs them: one Qdrant server (the fake of `tests.service.stores.fake_qdrant`, over real
HTTP) and one PostgreSQL server (real). What one replica writes, the other serves; a scheduled monitoring run
both replicas are due for runs on exactly one of them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.postgres import fresh_postgres_database
from tests.service.stores.fake_qdrant import FakeQdrantServer

DOCS = [
    {"id": "it/vpn", "title": "VPN", "text": "VPN error LC-419 means the token expired."},
    {"id": "billing/refunds", "title": "Refunds", "text": "Annual plans are refundable within 30 days."},
]
CASES = [{"id": "c1", "question": "LC-419 vpn", "relevant": [{"doc_id": "it/vpn"}], "category": "it"}]


@pytest.fixture
def replicas(tmp_path: Path, postgres_url: str) -> Iterator[tuple[list[FastAPI], TestClient, TestClient]]:
    qdrant = FakeQdrantServer()
    qdrant.start()
    state = fresh_postgres_database(postgres_url)
    apps = [
        create_app(
            Settings(
                data_dir=tmp_path / name,  # each replica's own (its lock file only): nothing shared lives there
                backend="qdrant",
                qdrant_url=qdrant.url,
                state_url=state,
                eval_schedule={"mini": 3600},
                incident_set="mini",
            ),
            components=Components(embedder=lambda _: FakeEmbedder()),
        )
        for name in ("a", "b")
    ]
    try:
        with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
            assert all(app.state.runtime.wait(timeout=60) for app in apps)
            yield apps, a, b
    finally:
        qdrant.stop()


def test_what_one_replica_writes_the_other_serves(replicas: tuple[list[FastAPI], TestClient, TestClient]) -> None:
    _, a, b = replicas
    assert a.post("/documents", json={"documents": DOCS}).status_code == 200
    assert [h["doc_id"] for h in b.post("/search", json={"query": "LC-419 vpn", "k": 1}).json()["hits"]] == ["it/vpn"]
    assert b.put("/eval/sets/mini", content="".join(json.dumps(c) + "\n" for c in CASES)).status_code == 200
    posted = b.post(
        "/eval/incidents",
        json={"question": "refund window", "doc_id": "billing/refunds", "category": "billing", "reporter": "sam"},
    ).json()
    assert posted["triage"]["verdict"] in {"retrieved", "ranked_low"}  # B triaged it on the shared index
    seen = a.get(f"/eval/incidents/{posted['incident_id']}").json()
    assert seen["question"] == "refund window"
    assert (
        a.patch(
            f"/eval/incidents/{posted['incident_id']}",
            json={"status": "accepted", "reason": "confirmed", "reviewer": "rev"},
        ).status_code
        == 200
    )
    assert b.get("/eval/incidents", params={"status": "accepted"}).json()["incidents"][0]["reviewer"] == "rev"
    assert b.delete("/documents/billing/refunds").status_code == 200
    assert a.get("/documents/billing/refunds").status_code == 404


def test_a_scheduled_run_due_on_both_replicas_runs_on_one(
    replicas: tuple[list[FastAPI], TestClient, TestClient],
) -> None:
    apps, a, _ = replicas
    assert a.post("/documents", json={"documents": DOCS}).status_code == 200
    assert a.put("/eval/sets/mini", content="".join(json.dumps(c) + "\n" for c in CASES)).status_code == 200
    ran: dict[str, list[str]] = {}
    start = threading.Barrier(2)

    def tick(name: str, app: FastAPI) -> None:
        start.wait()
        ran[name] = app.state.runtime.scheduler.tick()

    threads = [threading.Thread(target=tick, args=(n, app)) for n, app in zip("ab", apps, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(ran["a"] + ran["b"]) == ["mini"]  # one replica ran it; the other found it taken or done
    runs = a.get("/eval/runs").json()
    assert [r["kind"] for r in runs] == ["monitoring"]
    assert apps[0].state.runtime.scheduler.tick() == apps[1].state.runtime.scheduler.tick() == []  # not due again
