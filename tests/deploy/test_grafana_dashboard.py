"""The Grafana dashboard and its provisioning: structure, datasource, variables, and panel queries that
select only exported metrics and parse as PromQL once Grafana's variables are substituted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.local_stack import VARIABLES, substitute
from tests.deploy.helpers import DASHBOARD, KNOWN_METRICS, ROOT, load_yaml, metric_names, run_promtool

# Every panel and variable asks the Prometheus picked in the dashboard's datasource variable, never a fixed uid.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
# The eval gauges: read from the shared state store, exported identically by every replica.
EVAL_GAUGE = re.compile(r"\bplumbline_eval_\w+")


def _dashboard() -> dict[str, Any]:
    with DASHBOARD.open(encoding="utf-8") as f:
        dashboard: dict[str, Any] = json.load(f)
    return dashboard


def _panels() -> list[dict[str, Any]]:
    return list(_dashboard()["panels"])


def test_dashboard_identity() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "plumbline"
    assert 36 <= dashboard["schemaVersion"] <= 41


def _variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in _dashboard()["templating"]["list"]}


def test_datasource_variable_defaults_to_the_provisioned_prometheus() -> None:
    """A `datasource` variable of Prometheus datasources, first (the others' queries use it), whose default is the
    uid docker-compose provisions; a Grafana without that uid (kube-prometheus-stack's sidecar) falls back to its
    default datasource."""
    variables = _dashboard()["templating"]["list"]
    var = variables[0]
    assert (var["name"], var["type"], var["query"]) == ("datasource", "datasource", "prometheus")
    (provisioned,) = load_yaml(PROVISIONING / "datasources" / "prometheus.yml")["datasources"]
    assert provisioned["isDefault"] is True
    assert var["current"]["value"] == provisioned["uid"]
    assert not var["includeAll"]
    assert not var["multi"]


def test_no_fixed_datasource_uid_anywhere() -> None:
    """Every datasource reference but Grafana's own annotations asks the variable."""

    def references(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, dict):
            found = [node["datasource"]] if isinstance(node.get("datasource"), dict) else []
            return found + [r for v in node.values() for r in references(v)]
        if isinstance(node, list):
            return [r for v in node for r in references(v)]
        return []

    dashboard = _dashboard()
    refs = references({k: v for k, v in dashboard.items() if k != "annotations"})
    assert refs
    assert all(ref == DATASOURCE for ref in refs), [ref for ref in refs if ref != DATASOURCE]


def test_set_variable() -> None:
    variables = _variables()
    assert set(variables) == {"datasource", "set"}
    var = variables["set"]
    assert var["query"]["query"] == "label_values(plumbline_eval_metric, set)"
    assert var["includeAll"]
    assert var["multi"]
    assert var["allValue"] == ".*"
    assert var["datasource"] == DATASOURCE


def test_panel_ids_are_unique_and_every_panel_has_a_query() -> None:
    ids = [p["id"] for p in _panels()]
    assert len(ids) == len(set(ids)), ids
    for panel in _panels():
        assert panel.get("targets"), f"panel {panel['title']!r} has no targets"
        for target in panel["targets"]:
            assert str(target.get("expr", "")).strip(), f"panel {panel['title']!r}: a target has no expr"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_panels_use_the_provisioned_datasource() -> None:
    for panel in _panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", DATASOURCE) == DATASOURCE, panel["title"]


@pytest.mark.parametrize("panel", _panels(), ids=lambda p: str(p["title"]))
def test_panel_queries_select_only_exported_metrics(panel: dict[str, Any]) -> None:
    for target in panel["targets"]:
        expr = target["expr"]
        unknown_variables = set(re.findall(r"\$\{?\w+", expr)) - set(VARIABLES)
        assert not unknown_variables, f"{panel['title']!r}: variables {unknown_variables} in {expr!r}"
        names = metric_names(substitute(expr))
        assert names, f"{panel['title']!r}: no metric in {expr!r}"
        assert names <= KNOWN_METRICS, f"{panel['title']!r}: unknown metrics {sorted(names - KNOWN_METRICS)}"


def test_eval_panels_take_the_max_over_replicas() -> None:
    """Every replica exports the same eval gauges: a panel must collapse them with `max by (..., set, ...)` (as the
    alert rules do), or it shows one line per replica (no aggregation) or a multiple of the value (sum)."""
    checked = 0
    for panel in _panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for match in EVAL_GAUGE.finditer(expr):
                before = expr[: match.start()]
                grouping = re.search(r"max by \(([^()]*)\) \($", before)
                assert grouping, f"{panel['title']!r}: {match.group()} is not inside max by (...) in {expr!r}"
                labels = {label.strip() for label in grouping.group(1).split(",")}
                assert {"set", "namespace", "job"} <= labels, f"{panel['title']!r}: max by ({grouping.group(1)})"
                checked += 1
    assert checked >= 10


def test_panel_queries_parse(tmp_path: Path) -> None:
    """Every query, variables substituted, as a recording rule: `promtool check rules` parses them all."""
    rules = [
        {"record": f"panel_{panel['id']}_{target['refId']}", "expr": substitute(target["expr"])}
        for panel in _panels()
        for target in panel["targets"]
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}), encoding="utf-8")
    result = run_promtool("check", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout


def test_provisioning_points_at_the_dashboard_and_datasource() -> None:
    provisioning = PROVISIONING
    datasources = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert [(d["uid"], d["type"], d["url"]) for d in datasources] == [
        ("prometheus", "prometheus", "http://prometheus:9090")
    ]
    providers = load_yaml(provisioning / "dashboards" / "plumbline.yml")["providers"]
    assert [(p["type"], p["options"]["path"]) for p in providers] == [("file", "/var/lib/grafana/dashboards")]
