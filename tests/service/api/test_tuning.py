"""`/eval/tunes` and `/eval/model`: the embedding model tuned on the labels, into a new index generation, promoted only
through the gate, rolled back; vectors of two models never in one index.

A tiny random model (`tiny_embedding_model`, trained in seconds) over ten short documents, each on its own topic, and
forty questions (two per topic to train on, two held out). Searches are dense (`default_mode`), so the model is what
is measured.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.errors import IndexMismatch, NotReady
from service.evaluation.tuning import INDEX_FACTOR, MODEL_BYTES
from service.index.generations import Generation
from service.retrieval.finetune import TrainStats
from service.runtime import Components, Runtime
from service.settings import Settings
from service.stores.mirrored import single_copy
from tests.service.api.access_helpers import auth, make_key, secured_client
from tests.service.api.test_work import follow

TOPICS = {
    "vpn": "vpn tunnel client connect remote network session expired reconnect token",
    "password": "password reset expire length rotate account locked unlock",
    "refund": "refund money return purchase cash credit card days receipt",
    "laptop": "laptop computer hardware replacement broken screen battery model",
    "leave": "leave vacation holiday days annual pto allowance carry over",
    "parking": "parking car garage spot permit bicycle bike rack",
    "payroll": "payroll salary paid monthly payslip bank transfer tax",
    "badge": "badge door access card lost office entrance visitor",
    "printer": "printer print paper toner jam scanner queue",
    "wifi": "wifi wireless guest network internet visitor code daily",
}
TUNE_EPOCHS = {"epochs": 10, "learning_rate": 1e-3, "batch_size": 8}


def documents() -> list[dict[str, Any]]:
    out = []
    for topic, words in TOPICS.items():
        w = words.split()
        text = f"# {topic}\n\n" + " ".join(f"the {a} and the {b} of it." for a, b in itertools.pairwise(w))
        out.append({"id": f"kb/{topic}", "title": topic, "text": text})
    return out


def cases() -> list[dict[str, Any]]:
    out = []
    for topic, words in TOPICS.items():
        w = words.split()
        asks = [f"how do i {w[1]} {w[2]}", f"what is my {w[-1]}", f"where can i get {w[3]} {w[0]}", f"who does {w[-2]}"]
        for n, question in enumerate(asks):
            split = "tune" if n % 2 == 0 else "test"
            out.append(
                {"id": f"{topic}-{n}", "question": question, "relevant": [{"doc_id": f"kb/{topic}"}], "split": split}
            )
    return out


def blind_trainer(base: str, examples: Any, out_dir: Path, config: Any, **_: Any) -> TrainStats:
    """A fake trainer: the base model saved with its word embeddings zeroed, so that it cannot tell one word from
    another (a model known to be worse, whatever the data)."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(base)
    with torch.no_grad():
        model[0].auto_model.embeddings.word_embeddings.weight.zero_()
    model.save(str(out_dir))
    return TrainStats(len(examples), 0, 0.0, 0.0, 0.0, "cpu", config)


def settings(tmp_path: Path, model: Path, **extra: Any) -> Settings:
    return Settings(
        data_dir=tmp_path / "data", index_copies=1, embedding_model=str(model), default_mode="dense", **extra
    )


@pytest.fixture
def client(tmp_path: Path, tiny_embedding_model: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path, tiny_embedding_model))) as c:
        yield _ready(c)


def _ready(c: TestClient) -> TestClient:
    assert c.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
    assert c.post("/documents", json={"documents": documents()}).status_code == 200
    body = "".join(json.dumps(case) + "\n" for case in cases())
    assert c.put("/eval/sets/kb", content=body).status_code == 200
    run = c.post("/eval/run", json={"set": "kb"}).json()
    assert c.post("/eval/baselines", json={"run_id": run["run_id"], "name": "kb"}).status_code == 201
    return c


def tune(client: TestClient, **asked: Any) -> dict[str, Any]:
    started = client.post("/eval/tunes", json={"sets": ["kb"], **TUNE_EPOCHS, **asked})
    assert started.status_code == 202, started.text
    view = follow(client, started.headers["Location"], timeout=180)
    assert view["status"] == "done", view
    return view


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined, no-any-return]


def test_a_tuned_model_is_promoted_through_the_gate_and_rolled_back(client: TestClient) -> None:
    learned = client.post("/eval/no-answer/calibrate", json={"sets": ["kb"], "k": 3})
    assert learned.status_code == 200, learned.text
    base_model = learned.json()["model"]
    view = tune(client)
    record = view["result"]
    assert record["mined"]["examples"] == 20  # every training question found its document
    assert record["split"]["kb"] == {"origin": "case", "held_out": 20, "tune split": 20}
    pooled = record["held_out"]["pooled"]
    assert pooled["cases"] == 20
    assert pooled["delta"] > 0, pooled  # better on questions it never saw
    assert record["promotable"] is True
    gen = record["generation"]
    assert client.get("/eval/model").json()["serving"]["name"] == "base"  # a tune switches nothing

    promoted = client.post(f"/eval/tunes/{view['id']}/promote", json={})
    assert promoted.status_code == 200, promoted.text
    body = promoted.json()
    assert body["promoted"] is True, body
    assert body["copied"] == {
        "before_gate": 0,
        "deleted_before_gate": 0,
        "copied_before": 0,
        "copied_held": 0,
        "deleted": 0,
    }
    assert body["runs"][0]["run"]["gate"]["verdict"] == "pass"
    assert body["runs"][0]["run"]["params"]["model"] == gen["model"]  # the gated run was the new generation's
    # the "nothing matches" threshold, learned under the old model, is learned again for the new one
    assert body["no_answer"]["model"] == gen["model"]
    assert client.get("/eval/no-answer").json()["model"] == gen["model"]
    signal = client.post("/search", json={"query": "how do i reset my password"}).json()["no_answer"]
    assert signal["why"] is None
    assert signal["nothing_matches"] is not None
    model = client.get("/eval/model").json()
    assert model["serving"]["name"] == gen["name"]
    assert model["previous"]["name"] == "base"
    assert runtime(client).pipeline.embedder.name == gen["model"]
    served = client.post("/eval/run", json={"set": "kb"}).json()
    assert served["params"]["model"] == gen["model"]
    assert served["metrics"]["ndcg@10"] > record["held_out"]["pooled"]["current_metrics"]["ndcg@10"] - 0.2

    # a write after the switch lands in the new generation, and a rollback carries it back
    doc = {"id": "kb/canteen", "title": "canteen", "text": "# canteen\n\nthe lunch menu of the canteen"}
    assert client.post("/documents", json={"documents": [doc]}).status_code == 200
    rolled = client.post("/eval/model/rollback")
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["generation"] == "base"
    assert rolled.json()["copied"]["copied_before"] == 1
    assert rolled.json()["no_answer"]["model"] == base_model
    assert client.get("/documents/kb/canteen").status_code == 200
    assert runtime(client).pipeline.embedder.name == str(runtime(client).base_settings.embedding_model)
    model = client.get("/eval/model").json()
    assert model["serving"]["name"] == "base"
    assert model["previous"]["name"] == gen["name"]
    assert [h["reason"] for h in model["history"]] == [f"tune {view['id']} promoted", "rollback"]
    # and forth again: the canteen, gone from the live index meanwhile, is gone from the generation before its gate
    assert client.delete("/documents/kb/canteen").status_code == 200
    again = client.post(f"/eval/tunes/{view['id']}/promote", json={}).json()
    assert again["promoted"] is True, again
    assert again["copied"]["deleted_before_gate"] == 1
    assert client.get("/documents/kb/canteen").status_code == 404


def test_a_worse_model_is_refused(tmp_path: Path, tiny_embedding_model: Path) -> None:
    app = create_app(settings(tmp_path, tiny_embedding_model), components=Components(trainer=blind_trainer))
    with TestClient(app) as client:
        _ready(client)
        view = tune(client)
        record = view["result"]
        assert record["held_out"]["pooled"]["delta"] < 0
        assert record["promotable"] is False
        assert "worse on the held-out cases" in record["refusal"]
        body = client.post(f"/eval/tunes/{view['id']}/promote", json={}).json()
        assert body["promoted"] is False
        assert body["refusal"] == record["refusal"]
        assert body["runs"] == []  # refused before any gate
        assert client.get("/eval/model").json()["serving"]["name"] == "base"
        assert client.post("/eval/model/rollback").status_code == 409  # nothing to roll back to


def test_a_failing_gate_promotes_nothing(client: TestClient) -> None:
    view = tune(client)
    assert view["result"]["promotable"] is True
    # a baseline no dense search reaches: keyword search, whose questions reuse their documents' words, with no slack
    keyword = client.post("/eval/run", json={"set": "kb", "overrides": {"mode": "keyword"}}).json()
    assert keyword["metrics"]["ndcg@10"] > view["result"]["held_out"]["pooled"]["winner_metrics"]["ndcg@10"]
    policy = {"tolerance": 0.0, "require_significance": False}
    baseline = {"run_id": keyword["run_id"], "name": "kb", "replace": True, "policy": policy}
    assert client.post("/eval/baselines", json=baseline).status_code == 201
    body = client.post(f"/eval/tunes/{view['id']}/promote", json={}).json()
    assert body["promoted"] is False, body
    assert body["refusal"] == "the gate failed on set(s) ['kb']"
    assert body["runs"][0]["run"]["gate"]["verdict"] == "fail"
    assert client.get("/eval/model").json()["serving"]["name"] == "base"


def test_a_tune_checks_the_disk_first_and_leaves_nothing(client: TestClient) -> None:
    rt = runtime(client)
    full = rt.settings.model_copy(update={"min_free_disk_mb": 10**9})  # no disk could keep that much free
    rt.base_settings = rt.settings = full
    started = client.post("/eval/tunes", json={"sets": ["kb"], **TUNE_EPOCHS})
    view = follow(client, started.headers["Location"], timeout=180)
    assert view["status"] == "failed", view
    assert "must stay free" in view["error"]
    data = rt.settings.data_dir
    assert not list(data.glob("generations/*")), "a tune refused for disk built a generation"
    assert not list(data.glob("models/tuned/*")), "a tune refused for disk trained a model"
    assert client.get("/eval/model").json()["serving"]["name"] == "base"


@pytest.mark.engine
def test_a_tune_reserves_room_for_every_copy_of_the_index(tmp_path: Path, tiny_embedding_model: Path) -> None:
    two = Settings(
        data_dir=tmp_path / "data", index_copies=2, embedding_model=str(tiny_embedding_model), default_mode="dense"
    )
    with TestClient(create_app(two)) as client:
        _ready(client)
        rt = runtime(client)
        asked: list[int] = []
        check = rt.reserve_space

        def reserve(needed: int) -> None:
            asked.append(needed)
            check(needed)

        rt.reserve_space = reserve  # type: ignore[method-assign]
        tune(client)
        data = two.data_dir
        copies = [
            sum(f.stat().st_size for f in (data / name).rglob("*") if f.is_file()) for name in ("index", "index-copy")
        ]
        assert min(copies) > 0
        index_share = asked[0] - MODEL_BYTES  # the first reservation: the model and the new generation's index
        assert index_share == pytest.approx(INDEX_FACTOR * sum(copies), rel=0.1)  # both copies, not the first alone


def test_vectors_of_two_models_never_mix(client: TestClient) -> None:
    rt = runtime(client)
    gen = Generation.of(tune(client)["result"]["generation"])
    # the new generation's index refuses the served model, and the served one the tuned model
    store = single_copy(rt.generations.index_path(gen))
    try:
        with pytest.raises(IndexMismatch, match="tuned:"):
            rt._build_index(store, rt.pipeline.embedder, rt.settings)
    finally:
        store.close()
    tuned, pipeline = rt.open_generation(gen)
    pipeline.store.close()
    live = rt.index
    with pytest.raises(IndexMismatch, match="tuned:"):
        rt._build_index(live.store, tuned.embedder, rt.settings)
    # once switched away from, the old index takes no write: one that waited is refused, never written there
    assert client.post(f"/eval/tunes/{gen.tune}/promote", json={}).json()["promoted"] is True
    with pytest.raises(NotReady, match="send it again"):
        live.ingest([rt.index.get("kb/vpn").document])


def test_who_may_tune_and_what_is_refused(tmp_path: Path) -> None:
    with secured_client(Settings(data_dir=tmp_path / "data", index_copies=1)) as client:
        admin, runner = make_key(client, "admin"), make_key(client, "eval:run")
        assert client.post("/eval/tunes", json={"sets": ["kb"]}, headers=auth(runner)).status_code == 403
        assert client.post("/eval/tunes", json={"sets": []}, headers=auth(admin)).status_code == 422
        assert client.post("/eval/tunes", json={"sets": ["kb"], "epochs": 0}, headers=auth(admin)).status_code == 422
        for metric in ("ndcg", "ndcg@0", "ndcg@1000", "f1@10"):
            bad = client.post("/eval/tunes", json={"sets": ["kb"], "metric": metric}, headers=auth(admin))
            assert bad.status_code == 422, metric
            assert "metric must be" in bad.json()["detail"]
        missing = client.post("/eval/tunes", json={"sets": ["nope"]}, headers=auth(admin))
        assert missing.status_code == 404
        assert "nope" in missing.json()["detail"]
        assert client.post("/eval/model/rollback", headers=auth(runner)).status_code == 403
        assert client.get("/eval/model", headers=auth(runner)).json()["serving"]["name"] == "base"


def test_a_qdrant_server_backend_says_it_cannot_tune_yet(tmp_path: Path) -> None:
    from tests.fakes import FakeEmbedder

    rt = Runtime(
        Settings(data_dir=tmp_path / "d", backend="qdrant", qdrant_url="http://localhost:1"),
        Components(embedder=lambda _: FakeEmbedder()),
    )
    rt._ready.set()
    rt._pipeline = object()  # type: ignore[assignment]
    with pytest.raises(Exception, match="not supported yet"):
        rt.tuner()
