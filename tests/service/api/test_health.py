from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.retrieval.embedding import Embedder
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.postgres import Server, fresh_postgres_database, stoppable_postgres_server
from tests.waiting import until


@pytest.mark.engine
def test_ready_only_after_warm_up(tmp_path: Path) -> None:
    release = threading.Event()

    def slow_model(_: Settings) -> Embedder:
        release.wait(timeout=30)  # the test holds the model "loading" until it has checked readiness
        return FakeEmbedder()

    app = create_app(Settings(data_dir=tmp_path), components=Components(embedder=slow_model))
    with TestClient(app) as client:
        assert client.get("/health/live").json() == {
            "status": "alive",
            "detail": None,
            "documents": None,
            "chunks": None,
        }
        loading = client.get("/health/ready")
        assert loading.status_code == 503
        assert loading.json()["status"] == "loading"
        assert loading.headers["retry-after"] == "5"
        assert client.post("/search", json={"query": "x"}).status_code == 503
        release.set()
        assert app.state.runtime.wait(timeout=30)
        ready = client.get("/health/ready")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        assert ready.json()["chunks"] == 0


@pytest.mark.parametrize("metrics_auth", [False, True])
def test_ready_shows_the_index_size_only_where_metrics_are_open(tmp_path: Path, metrics_auth: bool) -> None:
    # the counts are over every tenant, and the health checks need no key: with metrics_auth on, they are only
    # on /metrics (plumbline_index_points), for the metrics role
    settings = Settings(data_dir=tmp_path, index_copies=1, metrics_auth=metrics_auth)
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as client:
        assert app.state.runtime.wait(timeout=30)
        ready = client.get("/health/ready")
    assert ready.status_code == 200
    counts = {k: ready.json()[k] for k in ("documents", "chunks")}
    assert counts == ({"documents": None, "chunks": None} if metrics_auth else {"documents": 0, "chunks": 0})


def test_failed_warm_up_is_reported(tmp_path: Path) -> None:
    def broken(_: Settings) -> Embedder:
        raise OSError("model folder not found: /nowhere")

    app = create_app(Settings(data_dir=tmp_path), components=Components(embedder=broken))
    with TestClient(app) as client:
        app.state.runtime.wait(timeout=30)
        r = client.get("/health/ready")
        assert r.status_code == 503
        assert "model folder not found" in r.json()["detail"]
        assert "model folder not found" in client.post("/search", json={"query": "x"}).json()["detail"]


def test_metrics_cover_endpoints_stages_and_index_size(client: TestClient) -> None:
    client.post("/documents", json={"documents": [{"id": "a", "text": "# A\n\nSome text about vpn."}]})
    client.post("/search", json={"query": "vpn"})
    client.post("/search", json={"query": ""})
    text = client.get("/metrics").text
    assert 'plumbline_http_request_duration_seconds_count{endpoint="/search",method="POST"} 2.0' in text
    assert 'plumbline_http_requests_total{endpoint="/search",method="POST",status="422"} 1.0' in text
    assert 'plumbline_search_stage_duration_seconds_count{stage="embed"} 1.0' in text
    assert 'plumbline_index_points{kind="chunk"} 1.0' in text
    assert "plumbline_ready 1.0" in text
    assert "plumbline_eval_gauges_stale 0.0" in text
    assert 'backend="edge"' in text
    assert 'state="sqlite",version="0.1.0"} 1.0' in text  # plumbline_build_info
    assert "process_resident_memory_bytes " in text
    assert "process_start_time_seconds " in text


class BrokenStore:
    """A fake store whose every query fails: an internal error the API cannot turn into a 4xx."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def query(self, queries: object) -> object:  # noqa: ARG002
        raise RuntimeError("fake engine failure")

    def run(self, work: Callable[..., object], *args: object) -> object:
        return work(self, *args)


@pytest.mark.engine
def test_internal_errors_are_counted_as_500(tmp_path: Path) -> None:
    from service.runtime import build_store

    app = create_app(
        Settings(data_dir=tmp_path),
        components=Components(embedder=lambda _: FakeEmbedder(), store=lambda s: BrokenStore(build_store(s))),  # type: ignore[arg-type,return-value]
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        assert app.state.runtime.wait(timeout=30)
        r = client.post("/search", json={"query": "vpn"}, headers={"X-Request-ID": "req-7"})
        text = client.get("/metrics").text
    # answered by the service's own handler: its message, the request's id, and the headers every response carries
    assert r.status_code == 500
    assert r.json()["detail"].startswith("internal error: the service could not handle this request")
    assert r.headers["X-Request-ID"] == "req-7"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert 'plumbline_http_requests_total{endpoint="/search",method="POST",status="500"} 1.0' in text


@pytest.mark.engine
def test_a_killed_engine_process_fails_liveness_so_the_pod_is_restarted(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"), components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        runtime = c.app.state.runtime  # type: ignore[attr-defined]
        assert runtime.wait(timeout=60)
        assert c.get("/health/live").json() == {"status": "alive", "detail": None, "documents": None, "chunks": None}
        assert "plumbline_live 1.0" in c.get("/metrics").text
        engine = runtime.index.store._copies[0].process  # the default store: two copies, each in an engine process
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(10)
        live = c.get("/health/live")
        assert live.status_code == 503
        assert "engine process of index exited" in live.json()["detail"]
        assert c.get("/health/ready").status_code == 503
        scraped = c.get("/metrics").text
        assert "plumbline_live 0.0" in scraped
        assert "plumbline_ready 0.0" in scraped  # at the scrape, not as set at start-up


@contextmanager
def on_postgres(tmp_path: Path) -> Iterator[tuple[TestClient, Server]]:
    """The app, warmed up, over a real PostgreSQL state store that the test may stop and start."""
    with stoppable_postgres_server() as server:
        settings = Settings(data_dir=tmp_path / "data", index_copies=1, state_url=fresh_postgres_database(server.url))
        app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
        with TestClient(app) as c:
            assert app.state.runtime.wait(timeout=60)
            yield c, server


@pytest.mark.database  # a real PostgreSQL server, stopped (and started again) mid-test
def test_metrics_keep_answering_through_a_state_store_outage_and_say_the_eval_gauges_are_stale(tmp_path: Path) -> None:
    with on_postgres(tmp_path) as (c, server):
        c.post("/documents", json={"documents": [{"id": "a", "text": "# A\n\nSome text about vpn."}]})
        case = '{"id": "c", "question": "vpn", "relevant": [{"doc_id": "a"}]}\n'
        assert c.put("/eval/sets/mini", content=case).status_code == 200
        assert c.post("/eval/run", json={"set": "mini", "monitoring": True}).status_code == 200
        before = c.get("/metrics").text
        assert 'plumbline_eval_metric{category="all",k="10",metric="recall",set="mini"} 1.0' in before
        server.stop()  # PostgreSQL goes away, as an outage does
        during = c.get("/metrics")
        assert during.status_code == 200  # the scrape still answers
        assert "plumbline_eval_gauges_stale 1.0" in during.text
        assert 'plumbline_eval_metric{category="all",k="10",metric="recall",set="mini"} 1.0' in during.text
        assert "plumbline_http_requests_total" in during.text


def test_sets_run_from_outside_export_their_expected_interval(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", index_copies=1, eval_expected_intervals={"faq": 86400})
    with TestClient(create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))) as c:
        assert c.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
        assert 'plumbline_eval_schedule_interval_seconds{set="faq"} 86400.0' in c.get("/metrics").text


@pytest.mark.database  # a real PostgreSQL server, stopped (and started again) mid-test
def test_readiness_follows_a_shared_state_store_out_and_back(tmp_path: Path) -> None:
    with on_postgres(tmp_path) as (c, server):
        assert c.get("/health/ready").status_code == 200
        server.stop()
        assert until(lambda: c.get("/health/ready").status_code == 503, 30)  # asked every few seconds
        ready = c.get("/health/ready").json()
        assert ready["detail"] == "the state store is unavailable (the server log has the database driver's error)"
        assert "plumbline_ready 0.0" in c.get("/metrics").text
        assert c.get("/health/live").status_code == 200  # an outage passes: no restart
        server.start()
        assert until(lambda: c.get("/health/ready").status_code == 200, 30)  # and ready again by itself
