"""Trust, round two: every list a request may carry is bounded in the schema, so a body under the byte limit cannot
carry millions of entries: one over the bound is a 422 naming the field, before anything runs; at the bound it is
accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.schemas import MAX_GATED_METRICS, MAX_KS, EvalRunRequest, IngestRequest
from service.domain import DocStatus
from service.inputs import MAX_FILTER_DOC_IDS, MAX_FILTER_TAGS, FiltersIn
from service.settings import MAX_BATCH_DOCUMENTS, Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Room in the body for a list one over its bound (the API tests' default is 200 KB)."""
    return Settings(data_dir=tmp_path / "data", index_copies=1, max_batch_documents=20, max_request_bytes=2_000_000)


def _names(answer: Any, field: str) -> None:
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert field in detail, detail


@pytest.mark.parametrize(("field", "bound"), [("tags", MAX_FILTER_TAGS), ("doc_ids", MAX_FILTER_DOC_IDS)])
def test_a_search_filter_list_one_over_its_bound_is_a_422_naming_it(client: TestClient, field: str, bound: int) -> None:
    values = [f"v{i}" for i in range(bound + 1)]
    _names(client.post("/search", json={"query": "vpn", "filters": {field: values}}), field)
    assert client.post("/search", json={"query": "vpn", "filters": {field: values[:bound]}}).status_code == 200


def test_statuses_are_bounded_by_how_many_there_are(client: TestClient) -> None:
    every = [s.value for s in DocStatus]
    over = {"query": "vpn", "fresh_only": False, "filters": {"status": [*every, "current"]}}
    _names(client.post("/search", json=over), "status")
    accepted = client.post("/search", json={"query": "vpn", "fresh_only": False, "filters": {"status": every}})
    assert accepted.status_code == 200, accepted.text
    assert FiltersIn.model_validate({"status": every}).status == list(DocStatus)


def test_an_eval_runs_metrics_are_bounded_by_the_names_a_run_reports(client: TestClient) -> None:
    metrics = [f"hit@{k}" for k in range(1, MAX_GATED_METRICS + 2)]
    _names(client.post("/eval/run", json={"set": "handbook", "metrics": metrics}), "metrics")
    assert len(EvalRunRequest(set="handbook", metrics=metrics[:MAX_GATED_METRICS]).metrics) == MAX_GATED_METRICS
    with pytest.raises(ValidationError, match="k"):
        EvalRunRequest(set="handbook", k=list(range(1, MAX_KS + 2)))


def test_an_ingest_batch_is_bounded_before_a_model_is_built_of_each_document(client: TestClient) -> None:
    tiny = [{"id": f"d{i}", "text": "x"} for i in range(MAX_BATCH_DOCUMENTS + 1)]
    _names(client.post("/documents", json={"documents": tiny}), "documents")
    assert len(IngestRequest.model_validate({"documents": tiny[:MAX_BATCH_DOCUMENTS]}).documents) == MAX_BATCH_DOCUMENTS
    with pytest.raises(ValidationError, match="less than or equal to 10000"):
        Settings(max_batch_documents=MAX_BATCH_DOCUMENTS + 1)
