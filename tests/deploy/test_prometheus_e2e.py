"""End to end: a real Prometheus scrapes a real `plumbline serve` on loopback with the repository's alert rules
loaded; the eval gauges and latency histograms arrive, every dashboard query returns data, and a degraded
monitoring run fires the quality alert. Then a second Prometheus, wired to a real Alertmanager (Debian's
`prometheus-alertmanager`), delivers the quality alert to a webhook the test serves, firing and then resolved."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from deploy.local_stack import (
    DASHBOARD,
    SET,
    TOPICS,
    Stack,
    degrade,
    drive,
    free_port,
    panel_queries,
    running,
    stop,
    wait_for,
    write_corpus,
)
from tests.deploy.helpers import ALERTMANAGER_EXAMPLE, RULES, load_yaml, require_alertmanager, require_binary

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


# The quality alert's waits, cut from `for: 5m` and `keep_firing_for: 30m` for the delivery test (see shortened_rules).
SHORT_FOR, SHORT_KEEP_FIRING_FOR = "2s", "2s"
BROKEN = [f"hr/{name}" for name, _, _ in TOPICS["hr"][:3]]  # the documents degrade() deletes


@dataclass
class Webhook:
    """An Alertmanager webhook receiver on loopback: every POSTed JSON body, in arrival order."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def alerts(self, name: str, status: str, since: int = 0) -> list[dict[str, Any]]:
        """The alerts `name` with `status` (firing, resolved) in the notifications from the `since`-th on."""
        with self.lock:
            notifications = self.received[since:]
        return [
            a for n in notifications for a in n["alerts"] if a["labels"]["alertname"] == name and a["status"] == status
        ]

    def count(self) -> int:
        with self.lock:
            return len(self.received)


@contextmanager
def webhook() -> Iterator[Webhook]:
    hook = Webhook("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with hook.lock:
                hook.received.append(body)
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/plumbline"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def started(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=out)
        try:
            yield child
        finally:
            stop(child)


def shortened_rules(folder: Path) -> Path:
    """The repository's rules with QualityBelowBaseline's `for` and `keep_firing_for` cut to seconds: the real ones
    (5m, 30m) would make this test wait 35 minutes. Everything else, its expression and labels and the other rules,
    is the file's own; promtool's unit tests (test_prometheus_rules.py) check the real durations."""
    rules = load_yaml(RULES)
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "QualityBelowBaseline"]
    assert {"for", "keep_firing_for"} <= rule.keys()  # both waits are exercised, shortened
    rule["for"], rule["keep_firing_for"] = SHORT_FOR, SHORT_KEEP_FIRING_FOR
    path = folder / "plumbline.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    return path


def alertmanager_config(hook: Webhook) -> dict[str, Any]:
    """deploy/prometheus/alertmanager.example.yml with the test's webhook as its receiver and intervals of seconds
    (its 30s/5m/4h would hold the resolved notification back 5 minutes)."""
    config: dict[str, Any] = load_yaml(ALERTMANAGER_EXAMPLE)
    (receiver,) = config["receivers"]
    (target,) = receiver["webhook_configs"]
    target["url"] = hook.url
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    return config


@contextmanager
def alerting(stack: Stack, client: httpx.Client, folder: Path) -> Iterator[tuple[Webhook, str, list[Path]]]:
    """A webhook, a real Alertmanager routing to it, and a second real Prometheus (the stack's has no `alerting`
    section) scraping the stack's service every second with shortened_rules() and sending to that Alertmanager.
    (the webhook, that Prometheus's URL, the two processes' logs)."""
    alertmanager = require_alertmanager()
    prometheus = require_binary("prometheus")
    am_port, prom_port = free_port(), free_port()
    key = client.post("/admin/keys", json={"name": "e2e-alerting", "roles": ["metrics"]})
    key.raise_for_status()
    logs = [folder / "alertmanager.log", folder / "prometheus.log"]
    with ExitStack() as stack_of:
        hook = stack_of.enter_context(webhook())
        (folder / "alertmanager.yml").write_text(json.dumps(alertmanager_config(hook)), encoding="utf-8")
        am_argv = [
            alertmanager,
            f"--config.file={folder / 'alertmanager.yml'}",
            f"--storage.path={folder / 'alertmanager'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",  # no gossip port: a lone Alertmanager
            "--log.level=warn",
        ]
        stack_of.enter_context(started(am_argv, logs[0]))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(shortened_rules(folder))],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [
                {
                    "job_name": "plumbline",
                    "authorization": {"type": "Bearer", "credentials": key.json()["key"]},
                    "static_configs": [{"targets": [stack.url.removeprefix("http://")]}],
                }
            ],
        }
        (folder / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
        prom_argv = [
            prometheus,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ]
        stack_of.enter_context(started(prom_argv, logs[1]))
        url = f"http://127.0.0.1:{prom_port}"
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{am_port}/-/ready").is_success, 60, "Alertmanager")
        wait_for(lambda: httpx.get(f"{url}/-/ready").is_success, 60, "the second Prometheus")
        yield hook, url, logs


def restore(client: httpx.Client, folder: Path) -> None:
    """Ingest again the documents degrade() deletes, from the same files the service preloaded at start-up."""
    corpus = folder / "corpus"
    write_corpus(corpus)
    documents = [{"id": doc_id, "text": (corpus / f"{doc_id}.md").read_text(encoding="utf-8")} for doc_id in BROKEN]
    client.post("/documents", json={"documents": documents}).raise_for_status()


def test_the_quality_alert_reaches_a_webhook_through_alertmanager_and_resolves(
    stack: Stack, client: httpx.Client, gated: dict[str, Any], tmp_path: Path
) -> None:
    del gated  # the baseline the monitoring runs are gated against
    with alerting(stack, client, tmp_path) as (hook, prometheus, logs):

        def diagnosis() -> str:
            alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
            states = [(a["state"], a["labels"]) for a in alerts]
            tails = "\n".join(f"{log.name}: {log.read_text(encoding='utf-8')[-1500:]}" for log in logs)
            return f"the webhook got {hook.received}; Prometheus's alerts: {states}\n{tails}"

        def alerted(status: str, since: int = 0) -> set[tuple[str, ...]]:
            """(set, category, metric, k) of each QualityBelowBaseline `status` notification from the since-th on."""
            return {
                (a["labels"]["set"], a["labels"]["category"], a["labels"]["metric"], a["labels"]["k"])
                for a in hook.alerts("QualityBelowBaseline", status, since)
            }

        # Break quality: the documents may already be gone (the test above deleted them), then the run fails as well.
        for doc_id in BROKEN:
            assert client.delete(f"/documents/{doc_id}").status_code in (200, 204, 404)
        assert stack.monitoring_run(client)["gate"]["verdict"] == "fail"
        try:
            wait_for(lambda: (SET, "hr", "hit", "5") in alerted("firing"), 90, "a firing notification")
        except TimeoutError as exc:
            pytest.fail(f"{exc}: {diagnosis()}")
        firing = hook.alerts("QualityBelowBaseline", "firing")
        assert all(a["labels"]["category"] != "it" for a in firing)  # the category that held stays quiet
        (hit, *_) = [a for a in firing if a["labels"]["category"] == "hr" and a["labels"]["metric"] == "hit"]
        assert (hit["labels"]["set"], hit["labels"]["severity"]) == (SET, "warning")
        assert hit["annotations"]["runbook_url"] == "docs/runbooks.md#qualitybelowbaseline"

        # Repair: the same documents again, and a monitoring run back at the baseline resolves every alert that fired.
        repaired_from = hook.count()
        restore(client, tmp_path)
        assert stack.monitoring_run(client)["gate"]["verdict"] == "pass"
        fired = alerted("firing")
        try:
            wait_for(lambda: fired <= alerted("resolved", repaired_from), 90, "resolved notifications")
        except TimeoutError as exc:
            pytest.fail(f"{exc} for {sorted(fired - alerted('resolved', repaired_from))}: {diagnosis()}")
