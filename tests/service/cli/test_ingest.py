"""An ingest that fails midway says which documents are committed, which are not, and which may be either: the
index's own report of a failed batch, over HTTP, and the CLI's over several batches (the Qdrant server backend
over real HTTP, with failures injected into the fake server of `tests.service.stores.fake_qdrant`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import Request

from service.api.app import create_app
from service.cli.ingest import _remote_failure
from service.cli.main import EXIT_ERROR, main
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.service.stores.fake_qdrant import FakeQdrantServer
from tests.threaded import ThreadedServer

IDS = [f"doc-{n}" for n in range(6)]


@pytest.fixture
def service(tmp_path: Path, fake_qdrant: FakeQdrantServer) -> Iterator[str]:
    """Plumbline on the Qdrant backend behind uvicorn on a real socket (fake embedder: this is about writes)."""
    settings = Settings(data_dir=tmp_path / "srv", backend="qdrant", qdrant_url=fake_qdrant.url, qdrant_retries=0)
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    app.state.runtime.warm_up()
    with ThreadedServer(app) as url:
        yield url
    app.state.runtime.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for n, doc_id in enumerate(IDS):
        (root / f"{doc_id}.md").write_text(f"# Topic {n}\n\nParagraph {n} about subject number {n}.\n")
    return root


def _fail_point_writes(fake_qdrant: FakeQdrantServer, first: int, status: int, *, once: bool) -> None:
    """Answer the `first`-th point write (PUT .../points) with `status`, and every later one too unless `once`."""
    seen = {"puts": 0}

    def fail(request: Request) -> int | None:
        if request.method != "PUT" or not request.url.path.endswith("/points"):
            return status if not once and seen["puts"] >= first else None
        seen["puts"] += 1
        hit = seen["puts"] == first if once else seen["puts"] >= first
        return status if hit else None

    fake_qdrant.app.state.fail_when = fail


def _ingest(service: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = main(["ingest", str(folder), "--url", service, "--batch-size", "2"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _present(service: str) -> Callable[[str], bool]:
    import httpx

    return lambda doc_id: httpx.get(f"{service}/documents/{doc_id}").status_code == 200


def test_a_batch_refused_midway_is_undone_and_the_report_lists_each_document(
    service: str, fake_qdrant: FakeQdrantServer, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each batch writes its points three times (chunks, records, heads): the 5th write is batch 2's records.
    _fail_point_writes(fake_qdrant, 5, 400, once=True)
    code, report = _ingest(service, folder, capsys)
    assert code == EXIT_ERROR
    assert report["committed"] == IDS[:2]
    assert report["not_committed"] == IDS[2:]
    assert report["unknown"] == []
    assert "None of the 2 document(s) of this batch was committed" in str(report["error"])
    present = _present(service)
    assert [present(i) for i in IDS] == [True, True, False, False, False, False]


def test_when_undoing_fails_too_the_batch_is_reported_unknown(
    service: str, fake_qdrant: FakeQdrantServer, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # From batch 2's commit markers (the 6th point write) on, the server refuses everything: the undo fails.
    _fail_point_writes(fake_qdrant, 6, 503, once=False)
    code, report = _ingest(service, folder, capsys)
    assert code == EXIT_ERROR
    assert report["committed"] == IDS[:2]
    assert report["unknown"] == IDS[2:4]
    assert report["not_committed"] == IDS[4:]
    assert "which is not known" in str(report["error"])


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (422, {"detail": "documents[0]: text is empty"}, {"not_committed": ["a", "b"], "unknown": []}),
        (502, {}, {"not_committed": [], "unknown": ["a", "b"]}),  # a proxy's: the batch may have been applied
        (503, {"detail": "x", "not_committed": ["a"], "unknown": ["b"]}, {"not_committed": ["a"], "unknown": ["b"]}),
    ],
)
def test_a_refused_batch_is_reported_from_what_the_answer_can_tell(
    status: int, body: dict[str, object], outcome: dict[str, list[str]]
) -> None:
    import httpx

    failure = _remote_failure("http://x", httpx.Response(status, json=body), ["a", "b"])
    assert {"not_committed": failure.not_committed, "unknown": failure.unknown} == outcome
