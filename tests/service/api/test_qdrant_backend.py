"""The service on the Qdrant server backend over real HTTP (the fake server of `tests.service.stores.fake_qdrant`):
a Qdrant outage answers 503 within a bounded time, turns readiness false, and heals by itself, whether it
happens while serving or before the first start."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.runtime import Components, qdrant_options
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.service.stores.fake_qdrant import FakeQdrantServer
from tests.waiting import until

DOC = {"id": "it/vpn", "title": "VPN", "text": "# VPN\n\nReconnect the VPN client when error 809 shows."}
QUERY = {"query": "vpn error 809", "rerank": False}


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        backend="qdrant",
        qdrant_url=url,
        qdrant_timeout=0.5,
        qdrant_connect_timeout=0.5,
        qdrant_retries=2,
    )


def test_an_outage_answers_503_in_bounded_time_turns_readiness_false_and_heals(
    tmp_path: Path, fake_qdrant: FakeQdrantServer
) -> None:
    settings = _settings(tmp_path, fake_qdrant.url)
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as client:
        assert app.state.runtime.wait(timeout=60)
        assert client.post("/documents", json={"documents": [DOC]}).status_code == 200
        before = client.post("/search", json=QUERY).json()["hits"]
        assert [h["doc_id"] for h in before] == ["it/vpn"]

        fake_qdrant.stop()
        started = time.monotonic()
        down = client.post("/search", json=QUERY)
        assert time.monotonic() - started < qdrant_options(settings).worst_case_seconds
        assert down.status_code == 503
        assert "the Qdrant server could not" in down.json()["detail"]
        assert down.headers["retry-after"] == "5"
        ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert "Qdrant server is unavailable" in ready.json()["detail"]
        assert client.post("/documents", json={"documents": [DOC]}).status_code == 503

        fake_qdrant.start()
        assert until(lambda: client.get("/health/ready").status_code == 200, 10)
        after = client.post("/search", json=QUERY)
        assert after.status_code == 200
        assert after.json()["hits"] == before


def test_a_server_away_at_start_up_is_waited_for(tmp_path: Path) -> None:
    server = FakeQdrantServer()  # its port, with nothing listening yet
    app = create_app(_settings(tmp_path, server.url), components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as client:
        assert until(lambda: "waiting for the vector store" in (client.get("/health/ready").json()["detail"] or ""), 30)
        assert client.post("/search", json=QUERY).status_code == 503
        server.start()
        try:
            assert app.state.runtime.wait(timeout=30)
            assert client.get("/health/ready").status_code == 200
            assert client.post("/search", json=QUERY).json()["hits"] == []
        finally:
            server.stop()


def test_stopping_while_waiting_for_the_server_stops_at_once(tmp_path: Path) -> None:
    server = FakeQdrantServer()  # its port, with nothing listening: never there
    app = create_app(_settings(tmp_path, server.url), components=Components(embedder=lambda _: FakeEmbedder()))
    client = TestClient(app)
    client.__enter__()
    assert until(lambda: "waiting for the vector store" in (client.get("/health/ready").json()["detail"] or ""), 30)
    stopping = threading.Thread(target=client.__exit__, args=(None, None, None), daemon=True)
    stopping.start()
    stopping.join(timeout=15)  # the warm-up waits up to 30 s between attempts: it must give up, not finish its wait
    assert not stopping.is_alive()
    assert not app.state.runtime.ready
