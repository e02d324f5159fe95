"""Corpus hygiene over HTTP: a batch of near-topic documents that answer nothing starts a monitoring run by itself,
precision falls, the distractor report names them, a what-if run without them recovers it (the paired test says so),
and archiving one is a call with an undo; duplicates grouped; a tenant's report names its documents only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.runtime import Components, Runtime
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.service.api.access_helpers import auth, make_key, secured_client

TOPICS = {
    "parking": ("parking permit", "Staff parking permits cost 40 euros per month"),
    "laptop": ("laptop replacement", "Laptops are replaced every four years"),
    "expenses": ("expense claim", "Expense claims are paid within ten working days"),
    "visitors": ("visitor badge", "Visitor badges are issued at the north reception"),
    "printing": ("colour printing", "Colour printing needs a cost centre code"),
    "lockers": ("gym locker", "Gym lockers are emptied every Friday evening"),
    "bikes": ("bike storage", "Bike storage is in the basement behind gate B"),
    "canteen": ("canteen menu", "The canteen menu changes every Monday"),
}


def answer_docs() -> list[dict[str, Any]]:
    return [
        {"id": f"policy/{t}", "title": f"{t.title()} policy", "text": f"# {words.title()}\n\n{answer}.\n"}
        for t, (words, answer) in TOPICS.items()
    ]


def near_topic_docs() -> list[dict[str, Any]]:
    """Plausible documents about each topic that answer none of its questions (they repeat its words)."""
    return [
        {
            "id": f"news/{t}",
            "title": f"{words.title()} news",
            "text": f"# {words.title()} update\n\nThe {words} team met about the {words} process; {words} questions "
            f"and {words} feedback go to the {words} mailbox.\n",
            "tags": ["news"],
        }
        for t, (words, _) in TOPICS.items()
    ]


def cases() -> list[dict[str, Any]]:
    out = []
    for t, (words, answer) in TOPICS.items():
        evidence = " ".join(answer.split()[-3:])
        for n, question in enumerate((f"{words} rules", f"what about the {words}")):
            out.append(
                {
                    "id": f"{t}-{n}",
                    "question": question,
                    "relevant": [{"doc_id": f"policy/{t}", "evidence": evidence}],
                    "category": "facilities" if t in ("parking", "lockers", "bikes", "canteen") else "office",
                }
            )
    return out


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data", index_copies=1, eval_schedule={"hyg": 86_400}, eval_on_corpus_change=0.25
    )
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        assert c.post("/documents", json={"documents": answer_docs()}).status_code == 200
        body = "".join(json.dumps(x) + "\n" for x in cases())
        assert c.put("/eval/sets/hyg", content=body).status_code == 200
        yield c


def runtime_of(client: TestClient) -> Runtime:
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def test_near_topic_growth_is_caught_named_and_pruned_in_a_what_if(client: TestClient) -> None:
    before = client.post("/eval/run", json={"set": "hyg", "k": [1, 3], "monitoring": True}).json()
    assert before["metrics"]["precision@1"] == 1.0

    assert client.post("/documents", json={"documents": near_topic_docs()}).status_code == 200
    scheduler = runtime_of(client).scheduler
    assert scheduler.tick() == []  # the corpus just changed: it must settle first (a bulk load may go on)
    assert scheduler.tick() == ["hyg"]  # doubled, and settled: the set's monitoring run starts by itself
    assert scheduler.tick() == []  # and only once

    runs = client.get("/eval/runs", params={"set": "hyg", "kind": "monitoring"}).json()
    after = runs[0]
    assert after["trigger"] == "corpus change"
    assert after["corpus"]["documents"] == 16
    assert runs[1]["corpus"]["documents"] == 8  # the history shows the corpus beside each run
    assert after["metrics"]["precision@1"] < before["metrics"]["precision@1"] - 0.3

    report = client.get(f"/eval/runs/{after['run_id']}/distractors", params={"k": 1}).json()
    named = [row["doc_id"] for row in report["distractors"]]
    assert named
    assert all(d.startswith("news/") for d in named)  # the added documents, and only they, crowd the top 1
    assert report["freshness"][named[0]]["status"] == "current"
    assert 'plumbline_eval_corpus_documents{set="hyg"} 16.0' in client.get("/metrics").text

    excluded = [d["id"] for d in near_topic_docs()]
    what_if = client.post("/eval/run", json={"set": "hyg", "k": [1, 3], "exclude": {"doc_ids": excluded}})
    assert what_if.status_code == 200, what_if.text
    compared = {m["metric"]: m for m in what_if.json()["what_if"]["metrics"]}
    assert compared["precision@1"]["pruned"] == before["metrics"]["precision@1"]  # recovered
    assert compared["precision@1"]["significant"] is True
    assert what_if.json()["kind"] == "experiment"
    assert what_if.json()["gate"] is None

    archived = client.post("/documents/news/parking/archive")
    assert archived.json() == {"id": "news/parking", "status": "archived"}
    hits = client.post("/search", json={"query": "parking permit rules"}).json()["hits"]
    assert "news/parking" not in {h["doc_id"] for h in hits}
    assert client.post("/documents/news/parking/restore").json() == {"id": "news/parking", "status": "current"}
    audited = client.get("/admin/audit", params={"action": "documents.archive"}).json()["entries"]
    assert [(e["target"], e["detail"]) for e in audited] == [("news/parking", {"from": "current"})]
    assert client.post("/documents/news/parking/restore").status_code == 409  # not archived any more


def test_a_what_if_is_never_gated_nor_a_monitoring_run(client: TestClient) -> None:
    for extra in ({"baseline": "hyg"}, {"monitoring": True}, {"async": True}):
        body = {"set": "hyg", "exclude": {"doc_ids": ["policy/parking"]}, **extra}
        assert client.post("/eval/run", json=body).status_code == 422


def test_near_duplicates_among_distractors_are_grouped(client: TestClient) -> None:
    text = "# Parking permit update\n\nThe parking permit team met about the parking permit process and fees.\n"
    pair = [
        {"id": "news/parking-a", "title": "Parking news", "text": text},
        {"id": "news/parking-b", "title": "Parking news (copy)", "text": text.replace("fees", "costs")},
    ]
    client.post("/documents", json={"documents": pair})
    run = client.post("/eval/run", json={"set": "hyg", "k": [1, 3]}).json()
    report = client.get(f"/eval/runs/{run['run_id']}/distractors").json()
    assert ["news/parking-a", "news/parking-b"] in report["duplicate_groups"]


def test_a_tenant_sees_its_own_documents_in_its_reports_only(tmp_path: Path) -> None:
    with secured_client(Settings(data_dir=tmp_path / "data", index_copies=1)) as c:
        admin = auth(make_key(c, "admin"))
        acme = auth(make_key(c, "eval:run", tenant="acme"))
        docs = [{**d, "tenant": "acme"} for d in answer_docs()]
        docs += [{**d, "tenant": "globex"} for d in near_topic_docs()]
        assert c.post("/documents", headers=admin, json={"documents": docs}).status_code == 200
        filed = [{**x, "filters": {"tenant": "acme"}} for x in cases()]
        c.put("/eval/sets/hyg", headers=admin, content="".join(json.dumps(x) + "\n" for x in filed))
        everyone = c.post("/eval/run", headers=admin, json={"set": "hyg", "k": [1, 3]}).json()
        mine = c.post("/eval/run", headers=acme, json={"set": "hyg", "k": [1, 3]}).json()
        seen = c.get(f"/eval/runs/{mine['run_id']}/distractors", headers=acme).json()
        assert all(row["doc_id"].startswith("policy/") for row in seen["distractors"])  # acme's own documents only
        assert c.get(f"/eval/runs/{everyone['run_id']}/distractors", headers=acme).status_code == 404
        assert c.get("/eval/sets/hyg/distractors", headers=acme).status_code == 200
