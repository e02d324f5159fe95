"""The HTTP retriever against a fake Plumbline (an httpx MockTransport: no network, no patching)."""

from __future__ import annotations

import json

import httpx
import pytest

from eval.errors import EvalError
from eval.matching import Retrieved
from eval.runner import Query, run_set
from service.cli.remote import HttpRetriever
from tests.eval.helpers import doc_case


class FakeSearch:
    """Answers POST /search with two hits and records the request bodies."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict[str, object]] = []
        self.status = status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/search"
        self.bodies.append(json.loads(request.content))
        if self.status != 200:
            return httpx.Response(self.status, text="index not ready")
        hits = [
            {"chunk_id": "a#0", "doc_id": "a", "text": "first", "score": 2.5, "title": "A"},
            {"chunk_id": "b#1", "doc_id": "b", "current": False},
        ]
        return httpx.Response(200, json={"hits": hits, "timings_ms": {}})


def retriever(fake: FakeSearch, **overrides: object) -> HttpRetriever:
    client = httpx.Client(transport=httpx.MockTransport(fake))
    return HttpRetriever("http://plumbline.test/", overrides=overrides, client=client)


def test_hits_become_retrieved_results() -> None:
    fake = FakeSearch()
    (out,) = retriever(fake).retrieve([Query("refund window", k=10)])
    # `current` false is a stale result; no `current` (a server older than stale@k) counts as current
    assert out == [Retrieved("a#0", "a", "first", 2.5), Retrieved("b#1", "b", "", 0.0, stale=True)]
    assert fake.bodies == [{"query": "refund window", "k": 10, "filters": {}}]


def test_body_merges_overrides_filters_and_unit() -> None:
    fake = FakeSearch()
    r = retriever(fake, mode="keyword", filters={"tenant": "default", "tags": ["x"]})
    r.retrieve([Query("q", k=5, filters={"tenant": "acme"}, unit="doc")])
    assert fake.bodies == [
        {
            "mode": "keyword",
            "query": "q",
            "k": 5,
            "filters": {"tenant": "acme", "tags": ["x"]},  # the case's own filters win
            "distinct_docs": True,
        }
    ]


def test_an_error_status_is_an_eval_error() -> None:
    with pytest.raises(EvalError, match="answered 503: index not ready"):
        retriever(FakeSearch(status=503)).retrieve([Query("q", k=5)])


def test_an_unreachable_service_is_an_eval_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    r = HttpRetriever("http://plumbline.test", client=httpx.Client(transport=httpx.MockTransport(refuse)))
    with pytest.raises(EvalError, match=r"cannot reach http://plumbline\.test/search: connection refused"):
        r.retrieve([Query("q", k=5)])


def test_runs_a_set_end_to_end() -> None:
    fake = FakeSearch()
    run = run_set([doc_case("c1", "b"), doc_case("c2", "z")], retriever(fake), set_name="remote", ks=(1, 2))
    assert [c.metrics["mrr"] for c in run.cases] == [0.5, 0.0]
    assert [b["k"] for b in fake.bodies] == [2, 2]
    assert [(c.metrics["stale@1"], c.metrics["stale@2"]) for c in run.cases] == [(0.0, 1.0), (0.0, 1.0)]
