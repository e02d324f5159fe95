"""The chart's cluster-fit pieces (helm/plumbline): the optional NetworkPolicy, pinning the image by digest, the
default topology spread keyed on the release, the memory the service container asks for, and the Grafana dashboard
as a ConfigMap for Grafana's sidecar. Rendered offline with Helm's own engine, as test_helm.py does (its helpers are
reused); no cluster is involved.
"""

from __future__ import annotations

import copy
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.deploy.helpers import DASHBOARD, ROOT
from tests.deploy.test_helm import (
    CHART,
    LEADER,
    NAMESPACE,
    QDRANT,
    STATE,
    _production,
    _server,
    kube_versions,
    of_kind,
    one,
    pod_specs,
    render,
)
from tests.deploy.test_helm_day_one import notes

SEVERAL = {"replicaCount": 2, "settings": QDRANT, "secrets": STATE}
CHART_DASHBOARD = CHART / "files" / "plumbline-dashboard.json"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def render_as(release: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's manifests for a release of another name."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name=release, namespace=NAMESPACE, is_install=True)
    return [
        doc for path, text in sorted(out.items()) if path.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc
    ]


def _fails_schema(values: dict[str, Any], key: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(key)):
        render(values)


def _validate(docs: list[dict[str, Any]], kube: str) -> None:
    for doc in docs:
        if doc["kind"] in {"ServiceMonitor", "PrometheusRule"}:
            continue
        kubernetes_validate.validate(doc, kube, strict=True)


# --- NetworkPolicy ----------------------------------------------------------------------------------------------


def _policy(values: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = one(render(values), "NetworkPolicy")["spec"]
    return spec


def test_network_policy_admits_the_http_port_from_the_listed_peers_only() -> None:
    """Off by default; on, the serving pods' http port only, from the listed peers, Prometheus and the release's
    evaluation pods."""
    assert not of_kind(render(), "NetworkPolicy")
    assert not of_kind(render(copy.deepcopy(LEADER)), "NetworkPolicy")
    namespaces = [{"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}]
    pods = [{"matchLabels": {"app": "frontend"}}]
    values = {"networkPolicy": {"enabled": True, "ingress": {"namespaceSelectors": namespaces, "podSelectors": pods}}}
    docs = render(values)
    spec = one(docs, "NetworkPolicy")["spec"]
    # the serving pods, and only ingress is restricted while egress is off
    assert spec["podSelector"] == one(docs, "Deployment")["spec"]["selector"]
    assert spec["policyTypes"] == ["Ingress"]
    assert "egress" not in spec
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert {p["name"] for p in _server(docs)["ports"]} == {"http"}
    peers = rule["from"]
    assert {"namespaceSelector": namespaces[0]} in peers
    assert {"podSelector": pods[0]} in peers
    # Prometheus (kube-prometheus-stack's pods, any namespace) may scrape
    prometheus = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    assert prometheus in peers
    assert len(peers) == 4  # and the release's evaluation pods, below
    without = _policy({"networkPolicy": {"enabled": True, "prometheus": {"enabled": False}}})
    assert prometheus not in without["ingress"][0]["from"]


def test_network_policy_admits_the_release_evaluation_jobs() -> None:
    values = _production()
    values["networkPolicy"] = {"enabled": True}
    docs = render(values)
    peers = one(docs, "NetworkPolicy")["spec"]["ingress"][0]["from"]
    cronjobs = of_kind(docs, "CronJob")
    assert cronjobs
    for cronjob in cronjobs:
        labels = cronjob["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        assert any(
            set(p) == {"podSelector"} and p["podSelector"]["matchLabels"].items() <= labels.items() for p in peers
        ), "the CronJob's pods could not reach the service"


def test_network_policy_egress_to_dns_the_stores_and_extra() -> None:
    extra = [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 3128, "protocol": "TCP"}]}]
    values = {
        **SEVERAL,
        "settings": {**QDRANT, "llm_base_url": "https://llm.example.com/v1"},
        "networkPolicy": {"enabled": True, "egress": {"enabled": True, "extra": extra}},
    }
    spec = _policy(values)
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    dns, *rules = spec["egress"]
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    # the state store, Qdrant (the URL's port), the LLM server (https: 443), then extra
    assert [r["ports"] for r in rules[:3]] == [[{"port": p, "protocol": "TCP"}] for p in (5432, 6333, 443)]
    assert rules[3:] == extra


@pytest.mark.parametrize(
    ("url", "port"),
    [("http://qdrant:6333", 6333), ("https://qdrant.example.com:8443", 8443), ("https://qdrant.example.com", 6333)],
)
def test_network_policy_qdrant_port_follows_the_url(url: str, port: int) -> None:
    """qdrant-client uses 6333 for a URL without a port, https included."""
    to = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "qdrant"}}}]
    values = {
        "settings": {"backend": "qdrant", "qdrant_url": url},
        "networkPolicy": {"enabled": True, "egress": {"enabled": True, "qdrant": {"to": to}}},
    }
    (qdrant,) = _policy(values)["egress"][1:]  # no state URL: DNS and Qdrant only
    assert qdrant == {"ports": [{"port": port, "protocol": "TCP"}], "to": to}


def test_network_policy_egress_of_the_embedded_engine_is_dns_only() -> None:
    (dns,) = _policy({"networkPolicy": {"enabled": True, "egress": {"enabled": True}}})["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    spec = _policy({"networkPolicy": {"enabled": True, "egress": {"enabled": True, "dns": {"enabled": False}}}})
    assert spec["egress"] == []  # every outgoing connection refused


@pytest.mark.parametrize(
    ("values", "typo"),
    [
        ({"networkPolicy": {"enable": True}}, "enable"),
        ({"networkPolicy": {"ingress": {"namespaceSelector": {}}}}, "namespaceSelector"),
        ({"networkPolicy": {"ingress": {"podSelectors": [{"matchLabel": {"a": "b"}}]}}}, "matchLabel"),
        ({"networkPolicy": {"egress": {"stateStore": {"port": "postgres"}}}}, "port"),
    ],
)
def test_misspelled_network_policy_values_fail(values: dict[str, Any], typo: str) -> None:
    _fails_schema(values, typo)


# --- Image digest -----------------------------------------------------------------------------------------------


def test_digest_wins_over_the_tag() -> None:
    values = _production()
    values["image"] = {**values["image"], "tag": "9.9.9", "digest": DIGEST}
    docs = render(values)
    images = {c["image"] for _, spec in pod_specs(docs) for c in spec["containers"]}
    assert images == {f"registry.example.com/plumbline@{DIGEST}"}  # the CronJobs' too
    assert _server(render({"image": {"tag": "9.9.9"}}))["image"] == "plumbline:9.9.9"


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", DIGEST.upper(), "sha512:" + "0" * 64, DIGEST + "0"])
def test_a_malformed_digest_fails(digest: str) -> None:
    _fails_schema({"image": {"digest": digest}}, "at '/image/digest': ")
    _fails_schema({"image": {"digest": digest}}, "does not match pattern")


# --- Topology spread --------------------------------------------------------------------------------------------


def _spread(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    constraints: list[dict[str, Any]] = one(docs, "Deployment")["spec"]["template"]["spec"].get(
        "topologySpreadConstraints", []
    )
    return constraints


def test_default_spread_over_nodes_counts_this_release() -> None:
    docs = render()
    (constraint,) = _spread(docs)
    assert constraint["topologyKey"] == "kubernetes.io/hostname"
    assert (constraint["maxSkew"], constraint["whenUnsatisfiable"]) == (1, "ScheduleAnyway")
    assert constraint["labelSelector"] == one(docs, "Deployment")["spec"]["selector"]


def test_two_releases_spread_independently() -> None:
    selectors = []
    for release in ("alpha", "beta"):
        docs = render_as(release, copy.deepcopy(SEVERAL))
        (constraint,) = _spread(docs)
        selector = constraint["labelSelector"]["matchLabels"]
        assert selector == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/instance"] == release
        selectors.append(selector)
    assert selectors[0] != selectors[1]


def test_production_spread_follows_the_release_name() -> None:
    docs = render_as("search-prod", _production())
    constraints = _spread(docs)
    assert {c["topologyKey"] for c in constraints} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in constraints:
        assert constraint["labelSelector"] == one(docs, "Deployment")["spec"]["selector"]


def test_a_given_spread_list_replaces_the_default() -> None:
    zone = {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    own = {**zone, "labelSelector": {"matchLabels": {"team": "search"}}}
    (constraint,) = _spread(render({"topologySpreadConstraints": [zone]}))
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
    assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "plumbline"
    assert _spread(render({"topologySpreadConstraints": [own]})) == [own]  # a given selector is kept
    assert _spread(render({"topologySpreadConstraints": []})) == []


def test_a_spread_entry_without_its_required_fields_fails() -> None:
    _fails_schema(
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologykey": "x", "whenUnsatisfiable": "x"}]}, "topologyKey"
    )


# --- Memory of the service container ----------------------------------------------------------------------------

_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(quantity: str) -> int:
    found = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert found, quantity
    return int(found.group(1)) * _UNITS[found.group(2)]


def _measured_mib() -> float:
    """The peak values.yaml's resources comment quotes: 'peaked at N MiB'."""
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    comment = text[text.rindex("\n\n", 0, text.index("\nresources:")) : text.index("\nresources:")]
    found = re.search(r"peaked at ([\d,]+) MiB", comment)
    assert found, "values.yaml must say, above resources, which measured peak the memory is sized from"
    return float(found.group(1).replace(",", ""))


def test_memory_is_sized_from_the_measured_peak() -> None:
    """The request covers the peak measured at the advertised capacity, the limit leaves headroom above it, and
    docs/deploy-helm.md quotes the same figure, configuration and command."""
    resources = _server(render())["resources"]
    peak = _measured_mib() * 2**20
    request, limit = _bytes(resources["requests"]["memory"]), _bytes(resources["limits"]["memory"])
    assert request >= peak
    assert limit >= 1.25 * peak
    doc = (ROOT / "docs" / "deploy-helm.md").read_text(encoding="utf-8")
    assert f"{_measured_mib():,.0f} MiB" in doc
    assert "100,000-chunk" in doc
    assert "fill_random" in doc  # how the index was built (benchmarks/speed.py)


# --- The Grafana dashboard for the sidecar ----------------------------------------------------------------------


def _dashboards(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in of_kind(render(values), "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]


def test_dashboard_config_map_holds_the_deploy_dashboard() -> None:
    assert not _dashboards({})  # off by default
    (config_map,) = _dashboards({"metrics": {"grafanaDashboard": {"enabled": True}}})
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "namespace" not in config_map["metadata"]  # the release's
    (name,) = config_map["data"]
    assert name.endswith(".json")
    assert json.loads(config_map["data"][name]) == json.loads(DASHBOARD.read_text(encoding="utf-8"))
    # Grafana's legends ({{set}}) come through untouched by Helm
    assert "{{set}}" in config_map["data"][name]


def test_dashboard_label_namespace_and_annotations_are_configurable() -> None:
    values = {
        "metrics": {
            "grafanaDashboard": {
                "enabled": True,
                "label": "grafana.io/dashboard",
                "labelValue": "plumbline",
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "Plumbline"},
            }
        }
    }
    (config_map,) = _dashboards(values)
    meta = config_map["metadata"]
    assert meta["labels"]["grafana.io/dashboard"] == "plumbline"
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["namespace"] == "monitoring"
    assert meta["annotations"] == {"grafana_folder": "Plumbline"}


def test_dashboard_file_in_the_chart_is_the_deploy_file() -> None:
    """A link to the one dashboard file (Helm's loader follows it), never a copy that could drift."""
    assert CHART_DASHBOARD.is_symlink(), f"{CHART_DASHBOARD} must be a symbolic link to {DASHBOARD}"
    assert CHART_DASHBOARD.resolve() == DASHBOARD.resolve()


def test_packaged_chart_carries_the_dashboard(tmp_path: Path) -> None:
    archive = helm.package(CHART, destination=tmp_path)
    with tarfile.open(archive) as tar:
        stored = tar.extractfile(tar.getmember("plumbline/files/plumbline-dashboard.json"))
        assert stored is not None
        assert stored.read() == DASHBOARD.read_bytes()


def test_misspelled_dashboard_values_fail() -> None:
    _fails_schema({"metrics": {"grafanaDashboard": {"labelvalue": "1"}}}, "labelvalue")


def test_notes_name_the_dashboard_and_the_policy() -> None:
    text = notes({"metrics": {"grafanaDashboard": {"enabled": True}}, "networkPolicy": {"enabled": True}})
    assert "ConfigMap plumbline-dashboard" in text
    assert "grafana_dashboard=1" in text
    assert "NetworkPolicy plumbline" in text
    assert "network plugin" in text
    assert "dashboard" not in notes()
    assert "NetworkPolicy" not in notes()


# --- All of it is valid Kubernetes and lint-clean ---------------------------------------------------------------

EVERYTHING = {
    **SEVERAL,
    "image": {"digest": DIGEST},
    "settings": {**QDRANT, "llm_base_url": "http://llm:8080/v1"},
    "networkPolicy": {
        "enabled": True,
        "ingress": {"namespaceSelectors": [{"matchLabels": {"team": "web"}}], "podSelectors": [{"matchLabels": {}}]},
        "egress": {"enabled": True, "stateStore": {"to": [{"podSelector": {"matchLabels": {"app": "pg"}}}]}},
    },
    "metrics": {"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Plumbline"}}},
}


@pytest.mark.parametrize("kube", kube_versions())
@pytest.mark.parametrize(
    "values",
    [EVERYTHING, {"networkPolicy": {"enabled": True}}],
    ids=["everything", "bare-policy"],
)
def test_cluster_fit_pieces_validate_against_kubernetes_schemas(values: dict[str, Any], kube: str) -> None:
    _validate(render(copy.deepcopy(values)), kube)


@pytest.mark.parametrize("kube", kube_versions())
def test_lint_is_clean_with_the_cluster_fit_pieces(kube: str) -> None:
    report = helm.lint(CHART, copy.deepcopy(EVERYTHING), strict=True, kube_version=f"v{kube}.0", namespace=NAMESPACE)
    assert not report["errors"], report["errors"]
    assert not [m for m in report["messages"] if m["severity"] > 1], report["messages"]
