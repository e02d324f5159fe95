"""Plumbline and a real Prometheus (Debian's `prometheus` package) on loopback, with this repository's alert
rules loaded: the harness of the end-to-end monitoring test, and what renders the dashboard picture in
docs/evaluation.md.

    python -m deploy.local_stack --render docs/img/dashboard.png

starts both in a temp dir (the service with the packaged model, a small generated corpus and labelled set,
and a monitoring schedule), sends traffic, runs monitoring runs (one gated and passing, then one after
documents were deleted), and draws every panel of `deploy/grafana/dashboards/plumbline.json` from
Prometheus's answers with matplotlib (Grafana is not installed here; the queries are the dashboard's own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "prometheus" / "rules"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "plumbline.json"
SET = "ops"  # the labelled set the stack monitors
# The variables a dashboard query may use, as Grafana fills them for "all sets" (windows fit 1 s scrapes).
VARIABLES = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "5m", "$set": ".*"}
T = TypeVar("T")

# Two categories of six questions each (the quality alert needs five cases in a category), one document each.
TOPICS = {
    "it": [
        ("vpn", "VPN error LC-419", "Error LC-419 means the VPN token expired: sign in to the portal again."),
        ("laptop", "Laptop refresh", "Laptops are replaced every three years; order through the IT catalogue."),
        ("printer", "Printers", "Office printers need a badge tap before a job is released."),
        ("mfa", "Multi-factor sign-in", "Multi-factor sign-in uses the authenticator app; SMS codes are retired."),
        ("software", "Software requests", "Request new software through the helpdesk form; approval takes two days."),
        ("wifi", "Guest Wi-Fi", "The guest Wi-Fi password rotates every Monday and is shown at reception."),
    ],
    "hr": [
        ("leave", "Parental leave", "Parents get sixteen weeks of paid parental leave."),
        ("holidays", "Public holidays", "The office closes on public holidays of the country you work in."),
        ("expenses", "Expenses", "Expense claims need a receipt and are paid with the next salary."),
        ("remote", "Remote work", "Staff may work remotely up to three days a week with their manager's consent."),
        ("reviews", "Performance reviews", "Performance reviews happen twice a year, in March and September."),
        ("travel", "Business travel", "Book business travel through the travel desk at least two weeks ahead."),
    ],
}
QUESTIONS = {
    "vpn": "what does LC-419 mean on the VPN",
    "laptop": "when is my laptop replaced",
    "printer": "how do I release a print job",
    "mfa": "are SMS codes still allowed for sign-in",
    "software": "how do I request new software",
    "wifi": "what is the guest wifi password",
    "leave": "how many weeks of parental leave",
    "holidays": "is the office open on public holidays",
    "expenses": "what do I need for an expense claim",
    "remote": "how many days can I work remotely",
    "reviews": "when are performance reviews",
    "travel": "how early must I book business travel",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(check: Callable[[], T | None], timeout: float, what: str, every: float = 0.5) -> T:
    """Poll `check` until it returns something truthy (a non-empty result); TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(every)


def stop(*processes: subprocess.Popen[bytes], grace: float = 30) -> None:
    """Ask each process to end (SIGTERM), then wait up to `grace` seconds for each before killing it."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def write_corpus(folder: Path) -> None:
    for category, docs in TOPICS.items():
        (folder / category).mkdir(parents=True, exist_ok=True)
        for name, title, text in docs:
            (folder / category / f"{name}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")


def labelled_set() -> str:
    lines = [
        {"id": name, "question": QUESTIONS[name], "relevant": [{"doc_id": f"{category}/{name}"}], "category": category}
        for category, docs in TOPICS.items()
        for name, _, _ in docs
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


@dataclass
class Stack:
    url: str  # Plumbline
    prometheus: str
    service_log: Path  # the service's stderr: JSON lines
    api_key: str  # an admin key: the service runs with auth on, and /metrics needs the metrics role

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, headers={"X-API-Key": self.api_key})

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query through Prometheus's HTTP API; its result vector (or matrix)."""
        response = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise ValueError(f"Prometheus refused {expr!r}: {body.get('error')}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.prometheus}/api/v1/alerts", timeout=10).json()
        alerts: list[dict[str, Any]] = body["data"]["alerts"]
        return alerts

    def monitoring_run(self, client: httpx.Client) -> dict[str, Any]:
        """A monitoring run of the stack's set; waits out a scheduled one that holds the set's lease."""

        def attempt() -> dict[str, Any] | None:
            response = client.post("/eval/run", json={"set": SET, "monitoring": True, "include_cases": False})
            if response.status_code == 429:
                return None
            response.raise_for_status()
            body: dict[str, Any] = response.json()
            return body

        return wait_for(attempt, 120, "a monitoring run")


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


@contextmanager
def running(workdir: Path, *, schedule_seconds: float = 3600, scrape_seconds: float = 1) -> Iterator[Stack]:
    """Start Plumbline (the real CLI, packaged model, the generated corpus preloaded) and Prometheus scraping it
    every `scrape_seconds`, evaluating the repository's rules as often; stop both on exit."""
    binary = prometheus_binary()
    if binary is None:
        raise FileNotFoundError("prometheus is not installed (Debian: apt-get install prometheus)")
    corpus = workdir / "corpus"
    write_corpus(corpus)
    port, prom_port = free_port(), free_port()
    admin_key, metrics_key = _keys(workdir / "data")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PLUMBLINE_AUTH": "on",
        "PLUMBLINE_METRICS_AUTH": "true",
        "PLUMBLINE_EVAL_SCHEDULE": json.dumps({SET: schedule_seconds}),
        "PLUMBLINE_LOG_FORMAT": "json",
    }
    log_path = workdir / "service.log"
    serve_args = ["--port", str(port), "--ingest", str(corpus)]
    prom_args = [
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
        "--log.level=warn",
    ]
    config = {
        "global": {"scrape_interval": f"{scrape_seconds:g}s", "evaluation_interval": f"{scrape_seconds:g}s"},
        "rule_files": [str(RULES / "*.yml")],
        "scrape_configs": [
            {
                "job_name": "plumbline",
                "authorization": {"type": "Bearer", "credentials": metrics_key},
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    with open(log_path, "wb") as log, open(workdir / "prometheus.log", "wb") as prom_log:
        service = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", "serve", "--data-dir", str(workdir / "data"), *serve_args],
            cwd=REPO,
            env=env,
            stderr=log,
            stdout=log,
        )
        prometheus = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", *prom_args],
            stderr=prom_log,
            stdout=prom_log,
        )
        try:
            stack = Stack(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{prom_port}", log_path, admin_key)
            ready = f"{stack.url}/health/ready"
            wait_for(lambda: service.poll() is not None or httpx.get(ready).is_success, 300, "the service to be ready")
            if service.poll() is not None:
                raise RuntimeError(f"the service exited: {log_path.read_text()[-2000:]}")
            wait_for(lambda: httpx.get(f"{stack.prometheus}/-/ready").is_success, 60, "Prometheus")
            yield stack
        finally:
            stop(prometheus, service)


def _keys(data: Path) -> tuple[str, str]:
    """An admin key for the driver and a metrics key for Prometheus, in the data directory's state store."""
    from service.access.keys import create_key
    from service.access.principals import LOCAL
    from service.state import open_state

    data.mkdir(parents=True, exist_ok=True)
    state = open_state(f"sqlite:///{data / 'state.db'}")
    try:
        return (
            create_key(state.keys, "local-stack", ["admin"], None, LOCAL)[1],
            create_key(state.keys, "prometheus", ["metrics"], None, LOCAL)[1],
        )
    finally:
        state.close()


def drive(stack: Stack, client: httpx.Client) -> dict[str, Any]:
    """Traffic every panel needs: searches, a refused request, an ingest, an incident, the set, a monitoring run
    promoted to baseline and a second one gated against it. The gated run's report."""
    client.put(f"/eval/sets/{SET}", content=labelled_set()).raise_for_status()
    for question in QUESTIONS.values():
        client.post("/search", json={"query": question, "k": 5}).raise_for_status()
    if client.post("/search", json={"query": "", "k": 5}).status_code != 422:  # the errors panel's data
        raise RuntimeError("an empty query was not refused")
    extra = {"id": "it/printers-2", "title": "Printer queue", "text": "Print jobs wait in the queue for a day."}
    client.post("/documents", json={"documents": [extra]}).raise_for_status()
    incident = {"question": "how long do print jobs wait", "doc_id": "it/printers-2", "category": "it"}
    client.post("/eval/incidents", json={**incident, "reporter": "support", "set": "incidents"}).raise_for_status()
    first = stack.monitoring_run(client)
    client.post("/eval/baselines", json={"run_id": first["run_id"], "name": SET, "replace": True}).raise_for_status()
    return stack.monitoring_run(client)


def searches(client: httpx.Client, seconds: float) -> None:
    """Steady search traffic for `seconds`, for the latency panels."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for question in QUESTIONS.values():
            client.post("/search", json={"query": question, "k": 5})
        time.sleep(1)


def degrade(stack: Stack, client: httpx.Client) -> dict[str, Any]:
    """Delete half of the hr documents, then a monitoring run: hr's hit@5 falls by half."""
    for name, _, _ in TOPICS["hr"][:3]:
        client.delete(f"/documents/hr/{name}").raise_for_status()
    return stack.monitoring_run(client)


def substitute(expr: str) -> str:
    """A panel query with Grafana's variables filled in as Grafana would for "all sets"."""
    for variable in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(variable, VARIABLES[variable])
    return expr


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, variables filled in."""
    return [(panel["title"], substitute(t["expr"])) for panel in dashboard["panels"] for t in panel.get("targets", [])]


def render(stack: Stack, out: Path, minutes: float) -> None:
    """Draw every dashboard panel from Prometheus's range queries over the last `minutes`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = [p for p in dashboard["panels"] if p.get("targets")]
    end = time.time()
    columns = 3
    rows = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for target in panel["targets"]:
            response = httpx.get(
                f"{stack.prometheus}/api/v1/query_range",
                params={"query": substitute(target["expr"]), "start": end - minutes * 60, "end": end, "step": 2},
                timeout=30,
            ).json()
            for series in response["data"]["result"]:
                xs = [(float(t) - end) / 60 for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=_legend(target.get("legendFormat", ""), series["metric"]))
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel("minutes ago", fontsize=8)
        ax.tick_params(labelsize=7)
        entries = len(ax.get_legend_handles_labels()[0])
        if entries:
            ax.legend(fontsize=5 if entries > 8 else 6, ncol=2 if entries > 8 else 1, loc="best")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle("Plumbline dashboard panels, drawn with matplotlib from a real Prometheus (deploy/local_stack.py)")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)


def _legend(fmt: str, labels: dict[str, str]) -> str:
    """A series' name as Grafana's `legendFormat` writes it (`{{category}}` is the label's value)."""
    for name, value in labels.items():
        fmt = fmt.replace("{{" + name + "}}", value)
    return fmt or ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", type=Path, required=True, help="where to write the PNG")
    parser.add_argument("--minutes", type=float, default=4, help="how long to run traffic before drawing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, running(Path(tmp)) as stack:
        with stack.client() as client:
            drive(stack, client)
            searches(client, args.minutes * 30)
            degrade(stack, client)
            searches(client, args.minutes * 30)
        render(stack, args.render, args.minutes)
    print(f"wrote {args.render}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
