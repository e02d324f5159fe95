from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

DOCS = [
    {
        "id": "pw-2024",
        "title": "Passwords 2024",
        "text": "# P\n\nMinimum password length is 12 characters.",
        "status": "superseded",
        "tags": ["security"],
        "tenant": "acme",
    },
    {
        "id": "pw",
        "title": "Passwords",
        "text": "# P\n\nMinimum password length is 16 characters.",
        "tags": ["security"],
        "tenant": "acme",
        "supersedes": "pw-2024",
        "metadata": {"review_days": 180},
    },
    {
        "id": "vpn",
        "title": "VPN",
        "text": "# VPN\n\nError LC-419 means the token expired.",
        "tags": ["it"],
        "tenant": "acme",
        "updated_at": "2026-10-01T00:00:00Z",
    },
    {
        "id": "promo",
        "title": "Promo",
        "text": "# Promo\n\nPassword length contest.",
        "tenant": "acme",
        "valid_until": "2020-01-01T00:00:00Z",
    },
]


@pytest.fixture
def loaded(client: TestClient) -> TestClient:
    assert client.post("/documents", json={"documents": DOCS}).status_code == 200
    return client


def test_search_response_shape(loaded: TestClient) -> None:
    r = loaded.post("/search", json={"query": "password length", "k": 5, "explain": True})
    assert r.status_code == 200
    body = r.json()
    # superseded and expired documents are excluded by default; the dense side still returns every other chunk
    assert [h["doc_id"] for h in body["hits"]] == ["pw", "vpn"]
    hit = body["hits"][0]
    assert set(hit["stages"]) >= {"dense", "keyword", "fusion"}
    assert hit["span"] == [5, len(DOCS[1]["text"])]
    assert hit["heading_path"] == "P"
    assert hit["metadata"] == {"review_days": 180}
    assert {"embed", "retrieve", "total"} <= set(body["timings_ms"])
    assert body["params"]["mode"] == "hybrid"
    assert body["params"]["fusion"] == "weighted"
    assert body["params"]["rerank"] is False
    assert body["reranked"] is False


@pytest.mark.parametrize("index_copies", [1, pytest.param(2, marks=pytest.mark.engine)])  # crosses to the engine
def test_filters_over_http(loaded: TestClient) -> None:
    old = loaded.post(
        "/search", json={"query": "password length", "fresh_only": False, "filters": {"status": ["superseded"]}}
    ).json()
    assert [h["doc_id"] for h in old["hits"]] == ["pw-2024"]
    recent = loaded.post("/search", json={"query": "error token", "filters": {"updated_after": "2026-09-01T00:00:00Z"}})
    assert [h["doc_id"] for h in recent.json()["hits"]] == ["vpn"]
    meta = loaded.post("/search", json={"query": "password", "filters": {"metadata": {"review_days": {"gte": 100}}}})
    assert [h["doc_id"] for h in meta.json()["hits"]] == ["pw"]
    other = loaded.post("/search", json={"query": "password", "filters": {"tenant": "globex"}})
    assert other.json()["hits"] == []
    pruned = loaded.post("/search", json={"query": "password length", "filters": {"exclude_doc_ids": ["pw"]}})
    assert [h["doc_id"] for h in pruned.json()["hits"]] == ["vpn"]  # left out inside the engine
    untagged = loaded.post("/search", json={"query": "password length", "filters": {"exclude_tags": ["security"]}})
    assert [h["doc_id"] for h in untagged.json()["hits"]] == ["vpn"]


def test_each_hit_says_whether_its_document_is_current(loaded: TestClient) -> None:
    more = [
        {"id": "draft", "title": "D", "text": "# D\n\nPassword length will be 20.", "status": "draft"},
        {"id": "later", "title": "L", "text": "# L\n\nPassword length rule.", "valid_until": "2999-01-01T00:00:00Z"},
        # declares itself current, but a current document supersedes it: its effective status is superseded
        {"id": "retired", "title": "R", "text": "# R\n\nPassword length was 8."},
        {"id": "successor", "title": "S", "text": "# S\n\nSee the password page.", "supersedes": "retired"},
    ]
    assert loaded.post("/documents", json={"documents": more}).status_code == 200
    body = {"query": "password length", "k": 20, "fresh_only": False}
    current = {h["doc_id"]: h["current"] for h in loaded.post("/search", json=body).json()["hits"]}
    assert current == {
        "pw": True,
        "vpn": True,
        "later": True,
        "successor": True,
        "pw-2024": False,  # superseded
        "promo": False,  # expired
        "draft": False,
        "retired": False,
    }
    fresh = loaded.post("/search", json={**body, "fresh_only": True}).json()["hits"]
    assert fresh
    assert all(h["current"] for h in fresh)


def test_rerank_request_without_model_is_reported(loaded: TestClient) -> None:
    body = loaded.post("/search", json={"query": "password", "rerank": True}).json()
    assert body["reranked"] is False
    assert any("no cross-encoder is configured" in w for w in body["warnings"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"query": "x", "k": 0}, "k must be between 1 and 100"),
        ({"query": "x", "k": 500}, "k must be between 1 and 100"),
        ({"query": ""}, "query is empty"),
        ({"query": "x" * 3000}, "the limit is 2000"),
        ({"query": "x", "filters": {"tennant": "acme"}}, "filters.tennant: unknown field"),
        ({"query": "x", "filters": {"updated_after": "last week"}}, "filters.updated_after"),
        ({"query": "x", "mode": "semantic"}, "mode: Input should be 'dense', 'keyword' or 'hybrid'"),
        ({"query": "x", "alpha": 1.5}, "alpha must be within 0..1"),
        ({"query": "x", "fusion": "max"}, "fusion"),
        ({"query": "x", "candidates": 5000}, "candidates must be between"),
        ({"query": "x", "filters": {"status": ["archived"]}}, "set fresh_only to false"),
        ({"query": "x", "filters": {"metadata": {"a b": 1}}}, "metadata filter key"),
        ({"k": 3}, "query: Field required"),
        ({"query": "x", "limit": 3}, "limit: unknown field"),
        ({"query": "x", "filters": {"metadata": {"n": {"gte": 10**400}}}}, "401 digits does not fit in 64 bits"),
        ({"query": "x", "filters": {"metadata": {"n": 10**30}}}, "does not fit in 64 bits"),
        ({"query": "x\ud800"}, "query: "),  # a lone surrogate: not text
        ({"query": "x", "filters": {"updated_after": "0001-01-01T00:30:00+01:00"}}, "out of range"),
    ],
)
def test_bad_requests_get_4xx_with_what_to_fix(loaded: TestClient, body: dict, message: str) -> None:
    r = loaded.post("/search", content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"]


def test_a_current_document_that_supersedes_another_retires_it(client: TestClient) -> None:
    old = {"id": "price-old", "title": "Prices", "text": "# Prices\n\nPro costs 59 euros a month."}
    new = {
        "id": "price-new",
        "title": "Prices",
        "text": "# Prices\n\nPro costs 69 euros a month.",
        "supersedes": "price-old",
    }

    def found() -> list[str]:
        return sorted({h["doc_id"] for h in client.post("/search", json={"query": "pro costs month"}).json()["hits"]})

    client.post("/documents", json={"documents": [old]})
    assert found() == ["price-old"]
    client.post("/documents", json={"documents": [new]})
    assert found() == ["price-new"]  # the old page still says "current" itself, but it is retired
    got = client.get("/documents/price-old").json()
    assert (got["status"], got["superseded_by"]) == ("current", "price-new")
    client.post("/documents", json={"documents": [old]})  # re-sent unchanged: still retired
    client.post("/documents", json={"documents": [{**old, "text": old["text"] + " VAT excluded."}]})  # changed
    assert found() == ["price-new"]
    client.post("/documents", json={"documents": [{**new, "supersedes": None}]})  # no longer names it
    assert found() == ["price-new", "price-old"]
    client.post("/documents", json={"documents": [new]})
    assert found() == ["price-new"]
    client.delete("/documents/price-new")
    assert found() == ["price-old"]
    assert client.get("/documents/price-old").json()["superseded_by"] is None


def test_a_draft_supersedes_nothing_yet(client: TestClient) -> None:
    old = {"id": "a", "title": "A", "text": "# A\n\nThe rule is ten."}
    draft = {"id": "b", "title": "B", "text": "# B\n\nThe rule will be twelve.", "supersedes": "a", "status": "draft"}
    client.post("/documents", json={"documents": [draft, old]})
    hits = client.post("/search", json={"query": "rule"}).json()["hits"]
    assert [h["doc_id"] for h in hits] == ["a"]


def test_highlights_are_the_keyword_matches_in_each_hits_text(loaded: TestClient) -> None:
    body = loaded.post("/search", json={"query": "passwords lengths", "k": 2, "highlight": True}).json()
    hit = body["hits"][0]
    assert [hit["text"][a:b] for a, b in hit["highlights"]] == ["password", "length"]
    plain = loaded.post("/search", json={"query": "passwords lengths", "k": 2}).json()
    assert plain["hits"][0]["highlights"] is None  # only when asked
