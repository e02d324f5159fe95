"""An app with auth on, and keys made the way `plumbline keys create` makes them (`service.access.keys.create_key`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient

from service.access.keys import create_key
from service.access.principals import LOCAL
from service.api.app import create_app
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder


@contextmanager
def secured_client(
    settings: Settings, *, embedder: FakeEmbedder | None = None, **overrides: Any
) -> Iterator[TestClient]:
    """The real app with auth on (and the fake embedder, or the one given: these tests are about who may do what)."""
    app = create_app(
        settings.model_copy(update={"auth": "on", **overrides}),
        components=Components(embedder=lambda _: embedder or FakeEmbedder()),
    )
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        yield c


def make_key(client: TestClient, *roles: str, tenant: str | None = None, name: str | None = None) -> str:
    state = client.app.state.runtime.state  # type: ignore[attr-defined]
    _, token = create_key(state.keys, name or "-".join(roles) or "none", roles, tenant, LOCAL)
    return token


def auth(token: str) -> dict[str, str]:
    return {"X-API-Key": token}


def docs(*specs: Sequence[str]) -> dict[str, Any]:
    """`{"documents": [...]}` from (id, tenant, text[, supersedes]) tuples."""
    out = []
    for spec in specs:
        doc: dict[str, Any] = {"id": spec[0], "tenant": spec[1], "title": spec[0], "text": spec[2]}
        if len(spec) > 3:
            doc["supersedes"] = spec[3]
        out.append(doc)
    return {"documents": out}


@contextmanager
def seeded_client(settings: Settings, documents: dict[str, Any]) -> Iterator[TestClient]:
    """`secured_client` with `documents` (a `POST /documents` body) ingested by an `ingest` key."""
    with secured_client(settings) as c:
        operator = auth(make_key(c, "ingest", name="operator"))
        assert c.post("/documents", headers=operator, json=documents).status_code == 200
        yield c
