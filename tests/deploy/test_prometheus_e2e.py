"""End to end: a real Prometheus scrapes a real `plumbline serve` on loopback with the repository's alert rules
loaded; the eval gauges and latency histograms arrive, every dashboard query returns data, and a degraded
monitoring run fires the quality alert."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import httpx
import pytest

from deploy.local_stack import DASHBOARD, SET, Stack, degrade, drive, panel_queries, running, wait_for
from tests.deploy.helpers import require_binary

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binary("prometheus")
    with running(tmp_path_factory.mktemp("stack")) as stack:
        yield stack


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    assert httpx.get(f"{stack.url}/metrics").status_code == 401  # Prometheus scrapes with its metrics key
    with stack.client() as client:
        yield client


@pytest.fixture(scope="module")
def gated(stack: Stack, client: httpx.Client) -> dict[str, Any]:
    return drive(stack, client)


def active_alert(stack: Stack, name: str) -> list[dict[str, Any]]:
    """The labels of each pending or firing alert `name`: the quality alerts wait 5 minutes (`for`) before firing,
    longer than this test waits; pending shows the expression matched (promtool's unit tests check the timing)."""
    active = {"pending", "firing"}
    return [a["labels"] for a in stack.alerts() if a["labels"]["alertname"] == name and a["state"] in active]


def test_prometheus_scrapes_the_eval_gauges_and_the_latency_histograms(stack: Stack, gated: dict[str, Any]) -> None:
    assert gated["gate"]["verdict"] == "pass"
    selector = f'plumbline_eval_metric{{set="{SET}",metric="hit",k="5",category="all"}}'
    hit = wait_for(lambda: stack.query(selector), 60, "the gauges")
    assert float(hit[0]["value"][1]) == gated["metrics"]["hit@5"]
    buckets = stack.query('plumbline_http_request_duration_seconds_bucket{endpoint="/search",le="+Inf"}')
    assert float(buckets[0]["value"][1]) >= 13  # the searches drive() sent
    passed = wait_for(lambda: stack.query(f'plumbline_eval_gate_passed{{set="{SET}"}}'), 60, "the gate gauge")
    assert passed[0]["value"][1] == "1"


def test_every_dashboard_query_returns_data(stack: Stack, gated: dict[str, Any]) -> None:
    del gated  # the traffic behind every panel
    pending = panel_queries(json.loads(DASHBOARD.read_text(encoding="utf-8")))
    assert len(pending) >= 15

    def answered() -> bool:
        """Drop the queries that have returned data; True once none is left."""
        nonlocal pending
        pending = [(title, expr) for title, expr in pending if not stack.query(expr)]
        return not pending

    # rates need two scrapes after the traffic: poll until every query has returned data once
    with suppress(TimeoutError):
        wait_for(answered, 60, "data for every panel")
    assert pending == []


def test_a_degraded_monitoring_run_fires_the_quality_alert(
    stack: Stack, client: httpx.Client, gated: dict[str, Any]
) -> None:
    del gated
    report = degrade(stack, client)
    assert report["gate"]["verdict"] == "fail"

    alerts = wait_for(lambda: active_alert(stack, "QualityBelowBaseline"), 60, "QualityBelowBaseline to match")
    assert {(a["set"], a["category"], a["metric"]) for a in alerts if a["k"] == "5"} >= {(SET, "hr", "hit")}
    assert all(a["category"] != "it" for a in alerts)  # the category that did not drop stays quiet
    assert wait_for(lambda: active_alert(stack, "EvalGateFailed"), 60, "EvalGateFailed")[0]["set"] == SET


def test_the_service_logs_one_json_line_per_request_with_its_id(stack: Stack, client: httpx.Client) -> None:
    response = client.get("/health/live", headers={"X-Request-ID": "e2e-probe-1"})
    assert response.headers["x-request-id"] == "e2e-probe-1"

    def logged() -> dict[str, Any] | None:
        lines = [json.loads(line) for line in stack.service_log.read_text(encoding="utf-8").splitlines()]
        return next((line for line in lines if line.get("request_id") == "e2e-probe-1"), None)

    line = wait_for(logged, 10, "the request's log line")
    assert (line["message"], line["endpoint"], line["status"]) == ("request", "/health/live", 200)
    messages = [json.loads(line)["message"] for line in stack.service_log.read_text(encoding="utf-8").splitlines()]
    assert any(m.startswith("preloading ") and "chunks/s" in m for m in messages)  # the start-up ingest's progress
