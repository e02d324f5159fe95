"""Hostile and clumsy input over HTTP: each test here failed on the code before the robustness fixes.

The crash, lock and full-disk cases need real processes: `tests/service/infra/test_crash_points.py`,
`tests/service/infra/test_datadir.py`, `tests/service/test_full_disk.py`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.retrieval.embedding import Matrix
from service.runtime import Components
from service.settings import Settings
from service.stores.base import StorePoint
from tests.fakes import FakeEmbedder

DOC = {"id": "it/vpn", "title": "VPN", "text": "# VPN\n\n## Errors\n\nError LC-419 means the token expired."}


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


def deep(depth: int) -> str:
    """JSON text of objects nested `depth` deep (too deep for the test client to encode itself)."""
    return '{"a": ' * depth + "1" + "}" * depth


def post(client: TestClient, path: str, body: str) -> Any:
    return client.post(path, content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("index_copies", [1, pytest.param(2, marks=pytest.mark.engine)])  # crosses to the engine
def test_metadata_nesting_and_size_are_bounded(client: TestClient) -> None:
    # 126 levels made the engine unable to read the point back; 450-999 raised RecursionError (a 500)
    for depth in (9, 126, 450, 999):
        doc = json.dumps(DOC)[:-1] + f', "metadata": {deep(depth)}}}'
        r = post(client, "/documents", f'{{"documents": [{doc}]}}')
        # 999 levels are past what Python's JSON parser reads: a 400 before any field is looked at
        assert r.status_code == (400 if depth == 999 else 422), (depth, r.text)
        assert "nested too deep" in r.json()["detail"]
        assert "8 levels" in r.json()["detail"]
        assert depth == 999 or "documents[0].metadata" in r.json()["detail"]
    big = {"blob": "x" * 70_000}
    r = client.post("/documents", json={"documents": [{**DOC, "metadata": big}]})
    assert r.status_code == 422
    assert "the limit is 65536" in r.json()["detail"]
    ok = client.post("/documents", json={"documents": [{**DOC, "metadata": nested(7)}]})
    assert ok.status_code == 200
    assert client.get("/documents/it/vpn").json()["metadata"] == nested(7)


def test_filter_nesting_is_bounded(client: TestClient) -> None:
    for depth in (9, 500, 999):
        r = post(client, "/search", f'{{"query": "vpn", "filters": {{"metadata": {deep(depth)}}}}}')
        assert r.status_code == (400 if depth == 999 else 422), (depth, r.text)
        assert "nested too deep" in r.json()["detail"]
        overrides = f'{{"filters": {{"metadata": {deep(depth)}}}}}'
        r = post(client, "/eval/run", f'{{"set": "handbook", "overrides": {overrides}}}')
        assert r.status_code == (400 if depth == 999 else 422)
        assert "nested too deep" in r.json()["detail"]


def test_a_set_line_nested_100000_deep_is_a_422_with_its_line(client: TestClient) -> None:
    good = json.dumps({"id": "c1", "question": "vpn", "relevant": [{"doc_id": "it/vpn"}]})
    r = client.put("/eval/sets/x", content=good + "\n" + "[" * 90_000 + "]" * 90_000 + "\n")
    assert r.status_code == 422
    assert "x:2: nested too deep" in r.json()["detail"]
    deep_filters = '{"id": "c2", "question": "q", "relevant": [{"doc_id": "a"}], "filters": ' + deep(600) + "}"
    r = client.put("/eval/sets/x", content=deep_filters + "\n")
    assert r.status_code == 422
    assert "x:1:" in r.json()["detail"]


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"id": "   ", "text": "hello"}, "not all spaces"),
        ({"id": "a\x85b", "text": "hello"}, "control characters"),
        ({"id": "nul", "text": "\x00" * 50}, "no visible character"),
        ({"id": "t/s", "text": "hello", "supersedes": "t/s"}, "cannot supersede itself"),
    ],
)
def test_edge_case_documents_are_refused(client: TestClient, doc: dict[str, str], says: str) -> None:
    r = client.post("/documents", json={"documents": [doc]})
    assert r.status_code == 422
    assert says in r.json()["detail"]


def test_a_supersession_cycle_is_refused_in_a_batch_and_across_the_index(client: TestClient) -> None:
    a = {"id": "pol/a", "text": "# A\n\nold rule", "supersedes": "pol/b"}
    b = {"id": "pol/b", "text": "# B\n\nnew rule", "supersedes": "pol/a"}
    r = client.post("/documents", json={"documents": [a, b]})
    assert r.status_code == 422
    assert "cycle: 'pol/a' -> 'pol/b' -> 'pol/a'" in r.json()["detail"]
    assert client.post("/documents", json={"documents": [a]}).status_code == 200
    c = {"id": "pol/c", "text": "# C\n\nnewest", "supersedes": "pol/a"}
    assert client.post("/documents", json={"documents": [c]}).status_code == 200
    r = client.post("/documents", json={"documents": [{**b, "supersedes": "pol/c"}]})
    assert r.status_code == 422
    assert "'pol/b' -> 'pol/c' -> 'pol/a' -> 'pol/b'" in r.json()["detail"]


@pytest.mark.parametrize("index_copies", [1, pytest.param(2, marks=pytest.mark.engine)])  # crosses to the engine
def test_date_only_filters_mean_midnight_utc_like_front_matter(client: TestClient) -> None:
    docs = [
        {**DOC, "id": "old", "updated_at": "2025-12-31"},
        {**DOC, "id": "new", "updated_at": "2026-01-01T00:00:00Z"},
    ]
    assert client.post("/documents", json={"documents": docs}).status_code == 200
    assert client.get("/documents/old").json()["updated_at"] == "2025-12-31T00:00:00Z"
    r = client.post("/search", json={"query": "LC-419", "filters": {"updated_after": "2026-01-01"}})
    assert r.status_code == 200, r.text
    assert {h["doc_id"] for h in r.json()["hits"]} == {"new"}
    r = client.post("/search", json={"query": "LC-419", "filters": {"updated_before": "2026-01-01"}})
    assert {h["doc_id"] for h in r.json()["hits"]} == {"old"}


def test_malformed_json_says_where(client: TestClient) -> None:
    r = post(client, "/documents", '{"documents": [\n  {"id": "a" "text": "x"}]}')
    assert r.status_code == 422
    assert r.json()["detail"] == "the body is not valid JSON: Expecting ',' delimiter at line 2, column 14"
    r = client.post("/documents", content=b'{"documents": []}')  # no content type: FastAPI does not parse it
    assert r.status_code == 422
    assert r.json()["detail"] == "body: send a JSON object with the header Content-Type: application/json"


# --- an engine that refuses writes, and what it must not leak ---------------------------------------


@pytest.mark.engine
def test_readiness_turns_false_when_the_engine_refuses_writes_and_no_path_leaks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    factory = Components(embedder=lambda _: FakeEmbedder())
    with TestClient(create_app(Settings(data_dir=data), components=factory)) as c:
        assert c.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
        assert c.post("/documents", json={"documents": [{**DOC, "id": "p"}]}).status_code == 200
        # what an older version let in: a chunk of `p` whose metadata the engine cannot read back
        store = c.app.state.runtime.index.store  # type: ignore[attr-defined]
        chunk = store.scroll(_chunks_of("p"), limit=1)[0]
        store.upsert([StorePoint(chunk.id, {**chunk.payload, "metadata": nested(130)}, [0.1] * 64, None)])
        r = c.get("/documents/p")
        assert r.status_code == 503
        assert "failed to read from the index" in r.json()["detail"]
        assert c.get("/health/ready").status_code == 200  # reads of `p` fail, writes still work
        # re-ingesting `p` commits, then deleting the old generation makes the engine read the bad payload
        assert c.post("/documents", json={"documents": [{**DOC, "id": "p", "text": "v2"}]}).status_code == 200
        r = c.post("/documents", json={"documents": [{**DOC, "id": "other"}]})
        assert r.status_code == 503
        assert "restart the service" in r.json()["detail"]
        ready = c.get("/health/ready")
        assert (ready.status_code, ready.json()["status"]) == (503, "error")
        assert "restart the service" in ready.json()["detail"]
        live = c.get("/health/live")  # only a restart cures it: liveness says so, and the orchestrator restarts
        assert (live.status_code, live.json()["status"]) == (503, "failed")
        assert "restart the service" in live.json()["detail"]
        scraped = c.get("/metrics").text
        assert "plumbline_ready 0.0" in scraped
        assert "plumbline_live 0.0" in scraped
        assert c.get("/documents/p").json()["text"] == "v2"  # what was committed still reads
        for body in (r.json()["detail"], ready.json()["detail"]):
            assert str(tmp_path) not in body
            assert "/index" not in body
    # a restart recovers the engine (and the start-up check removes the old generation's leftovers)
    with TestClient(create_app(Settings(data_dir=data), components=factory)) as c:
        runtime = c.app.state.runtime  # type: ignore[attr-defined]
        assert runtime.wait(timeout=60)
        assert c.get("/health/ready").status_code == 200
        assert c.get("/health/live").status_code == 200
        assert "plumbline_live 1.0" in c.get("/metrics").text
        assert c.post("/documents", json={"documents": [{**DOC, "id": "other"}]}).status_code == 200
        assert c.get("/documents/p").json()["text"] == "v2"
        assert runtime.index.check()[0].clean


def _chunks_of(doc_id: str) -> Any:
    from service.filters import Clause, Match

    return Clause(must=(Match("kind", "chunk"), Match("doc_id", doc_id)))


# --- overload ----------------------------------------------------------------------------------------


class GatedEmbedder(FakeEmbedder):
    """A fake embedder whose query embedding waits until the test opens the gate: a search or eval run held
    in flight for as long as the test needs, without sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.waiting = threading.Semaphore(0)

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        if texts != ["warm-up"]:
            self.waiting.release()
            assert self.gate.wait(timeout=120)
        return super().embed_queries(texts)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[TestClient, GatedEmbedder]]:
    embedder = GatedEmbedder()
    # three slots: two runs of the same callers at once (the third is kept for monitoring runs)
    settings = Settings(data_dir=tmp_path / "data", index_copies=1, search_timeout_seconds=300, max_concurrent_evals=3)
    app = create_app(settings, components=Components(embedder=lambda _: embedder))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        assert c.post("/documents", json={"documents": [DOC]}).status_code == 200
        set_line = json.dumps({"id": "c1", "question": "LC-419", "relevant": [{"doc_id": "it/vpn"}]})
        assert c.put("/eval/sets/mini", content=set_line + "\n").status_code == 200
        yield c, embedder
        embedder.gate.set()


def test_eval_runs_are_bounded_and_health_answers_while_every_worker_is_busy(
    gated: tuple[TestClient, GatedEmbedder],
) -> None:
    client, embedder = gated
    with ThreadPoolExecutor(max_workers=100) as pool:
        evals = [pool.submit(client.post, "/eval/run", json={"set": "mini"}) for _ in range(45)]
        for _ in range(2):
            assert embedder.waiting.acquire(timeout=60)  # two runs are inside the model, held there
        # four more wait for a slot in their caller group's queue (PLUMBLINE_EVAL_QUEUE_PER_GROUP), the rest: 429
        refused = [f.result() for f in islice(as_completed(evals, timeout=120), 39)]
        # 45 searches: 34 take the remaining worker threads (40 in all) and wait in the model, 11 queue
        searches = [pool.submit(client.post, "/search", json={"query": "vpn"}) for _ in range(45)]
        for _ in range(34):
            assert embedder.waiting.acquire(timeout=60)
        live, ready = client.get("/health/live"), client.get("/health/ready")
        held = sum(not f.done() for f in [*evals, *searches])
        embedder.gate.set()
        statuses = sorted(f.result().status_code for f in evals)
        search_statuses = {f.result().status_code for f in searches}
    assert held == 2 + 4 + 45  # health answered while every eval run admitted or queued and every search was in flight
    assert (live.status_code, ready.status_code) == (200, 200)
    assert statuses == [200] * 6 + [429] * 39  # the queued ones ran in their turn
    assert {(r.status_code, r.headers["retry-after"]) for r in refused} == {(429, "10")}
    assert "already hold(s) 2 of the 3 evaluation slots" in refused[0].json()["detail"]
    assert "may queue at most 4 run(s) for a slot (PLUMBLINE_EVAL_QUEUE_PER_GROUP)" in refused[0].json()["detail"]
    assert search_statuses == {200}


@pytest.mark.engine
def test_an_eval_run_past_its_time_limit_stops_with_504(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", eval_timeout_seconds=1e-6)
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        assert c.post("/documents", json={"documents": [DOC]}).status_code == 200
        r = c.post("/eval/run", json={"set": "handbook"})
        assert r.status_code == 504
        assert "stopped after 0 of 78 cases" in r.json()["detail"]
        assert c.get("/eval/runs").json() == []


@pytest.mark.engine
def test_a_search_past_its_time_limit_answers_504(tmp_path: Path) -> None:
    embedder = GatedEmbedder()
    settings = Settings(data_dir=tmp_path / "data", search_timeout_seconds=0.5)
    app = create_app(settings, components=Components(embedder=lambda _: embedder))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        r = c.post("/search", json={"query": "vpn"})  # the embedder holds it until the gate opens
        embedder.gate.set()
    assert r.status_code == 504
    assert "longer than 0.5 s" in r.json()["detail"]


@pytest.mark.engine
def test_full_disk_is_a_507_and_writes_nothing(tmp_path: Path) -> None:
    """The reserve check as it runs everywhere (a data directory whose disk has less than the reserve free);
    `tests/service/test_full_disk.py` fills a real file system."""
    settings = Settings(data_dir=tmp_path / "data", min_free_disk_mb=10**9)  # more than any disk has
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        r = c.post("/documents", json={"documents": [DOC]})
        assert r.status_code == 507
        assert "MB free" in r.json()["detail"]
        assert "Nothing was written" in r.json()["detail"]
        assert str(tmp_path) not in r.json()["detail"]
        assert c.get("/documents/it/vpn").status_code == 404
        assert c.get("/health/ready").json()["chunks"] == 0
