"""Logs: JSON lines with the request id, one line per request, and progress while the first start ingests."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.infra import logs
from service.infra.logs import JsonFormatter, new_request_id, request_id, stamp_request_ids
from service.retrieval.embedding import Matrix
from service.runtime import Components, Runtime
from service.settings import Settings
from tests.fakes import FakeEmbedder


def test_a_json_line_carries_the_request_id_and_the_request_fields() -> None:
    stamp_request_ids()
    token = request_id.set("abc-123")
    try:
        record = logging.getLogRecordFactory()("plumbline.access", logging.INFO, "", 0, "request", (), None)
    finally:
        request_id.reset(token)
    record.status, record.endpoint, record.duration_ms = 422, "/search", 1.5
    line = JsonFormatter().format(record)
    assert "\n" not in line
    obj = json.loads(line)
    assert {k: obj[k] for k in ("level", "logger", "message", "request_id", "status", "endpoint", "duration_ms")} == {
        "level": "info",
        "logger": "plumbline.access",
        "message": "request",
        "request_id": "abc-123",
        "status": 422,
        "endpoint": "/search",
        "duration_ms": 1.5,
    }
    assert obj["time"].endswith("Z")


@pytest.mark.parametrize(
    ("sent", "kept"),
    [("req-42.a:b_C", True), (None, False), ("", False), ("x" * 129, False), ("a b", False), ("a\nfake log", False)],
)
def test_a_callers_request_id_is_kept_only_when_it_is_a_plain_token(sent: str | None, kept: bool) -> None:
    rid = new_request_id(sent)
    assert (rid == sent) is kept
    assert kept or len(rid) == 32


@pytest.mark.engine
def test_every_request_is_logged_once_with_its_id_which_the_response_echoes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"), components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        with caplog.at_level(logging.INFO, logger="plumbline.access"):
            echoed = c.post("/search", json={"query": "x", "k": 0}, headers={"X-Request-ID": "trace-7"})
            fresh = c.get("/health/live")
    assert echoed.status_code == 422
    assert echoed.headers["x-request-id"] == "trace-7"
    assert len(fresh.headers["x-request-id"]) == 32
    lines = [r for r in caplog.records if r.name == "plumbline.access"]
    assert [(r.request_id, r.endpoint, r.status, r.method) for r in lines] == [  # type: ignore[attr-defined]
        ("trace-7", "/search", 422, "POST"),
        (fresh.headers["x-request-id"], "/health/live", 200, "GET"),
    ]


@pytest.mark.engine
def test_the_start_up_ingest_logs_its_progress(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(20):
        (folder / f"d{n}.md").write_text(f"# Doc {n}\n\nword{n} text")
    runtime = Runtime(
        Settings(data_dir=tmp_path / "data"), Components(embedder=lambda _: FakeEmbedder()), preload=(folder,)
    )
    with caplog.at_level(logging.INFO, logger="plumbline"):
        runtime.warm_up()
    runtime.close()
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("preloading")]
    assert [line.split(": ")[1].split(",")[0] for line in progress] == ["16/20 documents", "20/20 documents"]
    assert "chunks/s" in progress[-1]


class ExplodingFakeEmbedder(FakeEmbedder):
    """Raises an error nothing maps for one query: the service's last line of defence."""

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        if "explode" in texts:
            raise RuntimeError("kaboom")
        return super().embed_queries(texts)


@pytest.mark.engine
def test_an_unhandled_error_is_a_500_that_carries_the_request_id_in_its_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(
        Settings(data_dir=tmp_path / "data"), components=Components(embedder=lambda _: ExplodingFakeEmbedder())
    )
    with TestClient(app, raise_server_exceptions=False) as c:
        assert app.state.runtime.wait(timeout=60)
        with caplog.at_level(logging.INFO):
            response = c.post("/search", json={"query": "explode", "k": 1}, headers={"X-Request-ID": "boom-1"})
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "boom-1"
    assert "log line" in response.json()["detail"]
    assert "kaboom" not in response.text
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.request_id == "boom-1"  # type: ignore[attr-defined]
    assert error.exc_info is not None
    assert "kaboom" in str(error.exc_info[1])
    [line] = [r for r in caplog.records if r.name == "plumbline.access"]
    assert (line.status, line.request_id) == (500, "boom-1")  # type: ignore[attr-defined]


@pytest.fixture
def root_logger_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("root_logger_restored")
def test_lines_go_to_stderr_as_it_is_when_written(monkeypatch: pytest.MonkeyPatch) -> None:
    logs.configure("text")
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logging.getLogger("plumbline").warning("one")
    assert first.getvalue().endswith("WARNING plumbline: one\n")
    first.close()  # as a test runner closes the capture of a test that ran a command in-process
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("plumbline").warning("two")
    assert second.getvalue().endswith("WARNING plumbline: two\n")
    assert "one" not in second.getvalue()
