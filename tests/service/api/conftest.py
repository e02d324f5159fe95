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
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", max_batch_documents=20, max_request_bytes=200_000)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The real app on a temp data dir, with the fake embedder (these tests are about HTTP, not semantics)."""
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        yield c
