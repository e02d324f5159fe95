"""The app over HTTP for the API tests, on one copy of the index unless a test asks for two (`index_copies`).

The service's default is two copies, each in an engine process of its own (`service/stores/mirrored.py`). These tests
are about HTTP, so they run on one copy in the test's own process: no engine process to start, and a test takes about
half the time. The two copies have tests of their own (tests/service/stores/test_mirrored.py); over HTTP, a test whose
request must cross to an engine process and back (its filters or documents pickled there, the answer pickled back)
runs on both, by parametrizing `index_copies` (two copies marked `engine`, which `make test-fast` leaves out):

    @pytest.mark.parametrize("index_copies", [1, pytest.param(2, marks=pytest.mark.engine)])
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder


@pytest.fixture
def index_copies() -> int:
    """One copy of the index, in the test's process; a test parametrizes it to run on two (see above)."""
    return 1


@pytest.fixture
def settings(tmp_path: Path, index_copies: int) -> Settings:
    return Settings(
        data_dir=tmp_path / "data", index_copies=index_copies, max_batch_documents=20, max_request_bytes=200_000
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The real app on a temp data dir, with the fake embedder (these tests are about HTTP, not semantics)."""
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        yield c
