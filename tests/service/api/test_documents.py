from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.filters import Clause, Match
from service.runtime import Components
from service.settings import Settings
from service.stores.base import StorePoint
from service.stores.payload import document_point_id
from tests.fakes import FakeEmbedder

DOC = {
    "id": "billing/refunds",
    "title": "Refunds",
    "text": "# Refunds\n\n## Annual plans\n\nRefunds within 30 days.\n",
    "tags": ["billing"],
    "tenant": "acme",
    "updated_at": "2026-09-01T00:00:00Z",
    "metadata": {"owner": "Ana"},
}


def test_ingest_get_delete(client: TestClient) -> None:
    r = client.post("/documents", json={"documents": [DOC]})
    assert r.status_code == 200
    assert r.json() == {"documents": 1, "chunks": 1, "unchanged": 0}
    got = client.get("/documents/billing/refunds").json()
    assert got["text"] == DOC["text"]
    assert got["tenant"] == "acme"
    assert got["metadata"] == {"owner": "Ana"}
    start = DOC["text"].index("Refunds within")
    assert got["chunks"] == [
        {
            "chunk_id": "billing/refunds#0",
            "heading_path": "Annual plans",
            "start": start,
            "end": start + 23,
            "text": "Refunds within 30 days.",
        }
    ]
    assert client.post("/documents", json={"documents": [DOC]}).json()["unchanged"] == 1
    assert client.delete("/documents/billing/refunds").json() == {"id": "billing/refunds", "deleted_chunks": 1}
    assert client.get("/documents/billing/refunds").status_code == 404
    assert client.delete("/documents/billing/refunds").status_code == 404


def test_a_bad_document_rejects_the_whole_batch(client: TestClient) -> None:
    client.post("/documents", json={"documents": [DOC]})
    changed = {**DOC, "text": "# Refunds\n\nNo refunds at all.\n"}
    r = client.post("/documents", json={"documents": [changed, {"id": "x", "text": "  "}]})
    assert r.status_code == 422
    assert "documents[1]" in r.json()["detail"]
    assert "empty" in r.json()["detail"]
    assert client.get("/documents/billing/refunds").json()["text"] == DOC["text"]


def test_missing_fields_name_the_field(client: TestClient) -> None:
    r = client.post("/documents", json={"documents": [{"title": "no id", "text": "t"}, {"id": "a"}]})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "documents[0].id: Field required" in detail
    assert "documents[1].text: Field required" in detail


def test_unknown_document_field_and_bad_enum(client: TestClient) -> None:
    r = client.post("/documents", json={"documents": [{**DOC, "colour": "red"}]})
    assert r.status_code == 422
    assert "documents[0].colour: unknown field" in r.json()["detail"]
    r = client.post("/documents", json={"documents": [{**DOC, "status": "old"}]})
    assert r.status_code == 422
    assert "documents[0].status" in r.json()["detail"]
    r = client.post("/documents", json={"documents": [{**DOC, "updated_at": "2026-09-01T00:00:00"}]})
    assert r.status_code == 422
    assert "timezone" in r.json()["detail"]


def test_oversized_batches_and_bodies(client: TestClient) -> None:
    many = [{**DOC, "id": f"d{i}"} for i in range(21)]
    r = client.post("/documents", json={"documents": many})
    assert r.status_code == 413
    assert "limit is 20" in r.json()["detail"]
    big = {**DOC, "text": "word " * 50_000}
    r = client.post("/documents", json={"documents": [big]})
    assert r.status_code == 413
    assert "send smaller batches" in r.json()["detail"]
    assert client.get("/documents/d0").status_code == 404


JSON = {"content-type": "application/json"}
DEEP = 100_000


def test_malformed_json_is_a_4xx(client: TestClient) -> None:
    r = client.post("/documents", content=b"{not json", headers=JSON)
    assert r.status_code == 422


@pytest.fixture
def roomy_client(settings: Settings) -> Iterator[TestClient]:
    """The real app with a request size limit that lets the deep bodies below reach the JSON parser."""
    roomy = settings.model_copy(update={"max_request_bytes": 1_000_000})
    app = create_app(roomy, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        yield c


@pytest.mark.parametrize(
    "body",
    [
        "[" * DEEP + "]" * DEEP,
        '{"documents": ' + "[" * DEEP + "]" * DEEP + "}",
        '{"documents": [' + '{"a": ' * DEEP + "1" + "}" * DEEP + "]}",
    ],
    ids=["bare-lists", "lists-in-documents", "objects-in-documents"],
)
def test_json_nested_too_deep_to_parse_is_a_4xx_not_a_500(roomy_client: TestClient, body: str) -> None:
    assert len(body.encode()) < 1_000_000  # under the size limit: the parser, not the size check, must refuse it
    r = roomy_client.post("/documents", content=body, headers=JSON)
    assert r.status_code in (400, 422), r.text[:500]
    assert r.json()["detail"]
    assert roomy_client.post("/documents", json={"documents": [DOC]}).status_code == 200  # the service lives on


def _nested(depth: int, shape: str) -> str:
    """A JSON object `depth` levels deep (the object itself is level 1), nesting objects or lists."""
    if shape == "objects":
        return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


@pytest.mark.parametrize("shape", ["objects", "lists"])
@pytest.mark.parametrize("depth", [200, 600])
def test_metadata_nested_past_the_limit_is_a_422_naming_it(client: TestClient, depth: int, shape: str) -> None:
    metadata = _nested(depth, shape)
    assert json.loads(metadata)  # valid JSON: only its depth is wrong
    body = json.dumps({"documents": [{**DOC, "metadata": "METADATA"}]}).replace('"METADATA"', metadata)
    r = client.post("/documents", content=body, headers=JSON)
    assert r.status_code == 422, r.text[:500]
    detail = r.json()["detail"]
    assert "documents[0].metadata" in detail
    assert "deep" in detail
    assert client.get("/documents/billing/refunds").status_code == 404


@pytest.mark.parametrize(
    "body",
    ['{"documents": [', '{"documents": [{"id": "a", "text": "t"}', '{"documents": [{"id": "a", "text": "t'],
)
def test_truncated_json_is_a_422_saying_where_it_stops(client: TestClient, body: str) -> None:
    r = client.post("/documents", content=body, headers=JSON)
    assert r.status_code == 422, r.text[:500]
    detail = r.json()["detail"]
    assert "line 1" in detail
    assert "column" in detail


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"valid_until": "0001-01-01T00:30:00+01:00"}, "documents[0].valid_until"),
        ({"updated_at": "9999-12-31T23:30:00-01:00"}, "out of range"),
        ({"metadata": {"n": 10**30}}, "does not fit in 64 bits"),
        ({"metadata": {"x": {"y": [1, float("inf")]}}}, "not a finite number"),
        ({"text": "bad \ud800 text"}, "documents[0].text"),  # a lone surrogate: not text
    ],
)
def test_values_the_engine_cannot_hold_are_4xx(client: TestClient, change: dict, message: str) -> None:
    body = json.dumps({"documents": [{**DOC, **change}]})  # json.dumps writes Infinity, as some clients do
    r = client.post("/documents", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"]
    assert client.get("/documents/billing/refunds").status_code == 404


def _listed(client: TestClient, **params: object) -> list[str]:
    """Every id the listing returns, page by page (3 at a time), in order."""
    ids: list[str] = []
    cursor = None
    for _ in range(50):
        page = client.get("/documents", params={**params, "limit": 3, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        ids += [d["id"] for d in page.json()["documents"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return ids
    raise AssertionError("the listing never ended")


@pytest.mark.parametrize("index_copies", [1, pytest.param(2, marks=pytest.mark.engine)])  # crosses to the engine
def test_list_documents_pages_and_filters(client: TestClient) -> None:
    many = [
        {**DOC, "id": f"doc/{n}", "tags": ["even" if n % 2 == 0 else "odd"], "updated_at": f"2026-0{1 + n % 9}-01"}
        for n in range(8)
    ]
    many[1]["tenant"] = "globex"
    newer = {**DOC, "id": "doc/new", "supersedes": "doc/2", "tags": ["even"]}
    assert client.post("/documents", json={"documents": [*many, newer]}).status_code == 200
    everything = _listed(client)
    assert sorted(everything) == sorted([*(d["id"] for d in many), "doc/new"])  # each once, across pages
    assert sorted(_listed(client, tags="odd")) == ["doc/1", "doc/3", "doc/5", "doc/7"]
    assert _listed(client, tenant="globex") == ["doc/1"]
    assert _listed(client, status="superseded") == ["doc/2"]
    assert _listed(client, updated_after="2026-02-01", updated_before="2026-03-01") == ["doc/1"]
    assert sorted(_listed(client, updated_after="2026-07-01")) == ["doc/6", "doc/7", "doc/new"]  # 2026-09-01
    assert sorted(_listed(client, tags=["odd", "even"], tenant="acme")) == sorted(set(everything) - {"doc/1"})
    first = client.get("/documents", params={"status": "superseded"}).json()
    assert first["total"] == 1
    [old] = first["documents"]
    assert (old["status"], old["declared_status"], old["superseded_by"], old["current"]) == (
        "superseded",
        "current",
        "doc/new",
        False,
    )
    assert old["chunks"] == 1
    assert "text" not in old
    new = client.get("/documents", params={"tags": "even", "limit": 500}).json()["documents"]
    assert {d["id"]: d["current"] for d in new}["doc/new"] is True


def test_list_documents_skips_a_record_no_head_commits(client: TestClient) -> None:
    """A generation in flight (or a crash's leftover) has its record written before its head: never listed."""
    assert client.post("/documents", json={"documents": [DOC]}).status_code == 200
    store = client.app.state.runtime.index.store  # type: ignore[attr-defined]
    [record] = store.scroll(Clause(must=(Match("kind", "document"),)), 10)
    leftover = {**record.payload, "gen": record.payload["gen"] + 1, "title": "uncommitted"}
    store.upsert([StorePoint(document_point_id(DOC["id"], leftover["gen"]), leftover)])
    listed = client.get("/documents").json()["documents"]
    assert [(d["id"], d["title"]) for d in listed] == [("billing/refunds", "Refunds")]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"status": "gone"}, "status"),
        ({"limit": 0}, "limit"),
        ({"updated_after": "yesterday"}, "updated_after"),
    ],
)
def test_list_documents_rejects_bad_parameters(client: TestClient, params: dict[str, object], message: str) -> None:
    response = client.get("/documents", params=params)
    assert response.status_code == 422
    assert message in response.json()["detail"]
