"""Day-one chart pieces (helm/plumbline): persistence on by default (ReadWriteOncePod), the values schema that turns
a misspelled key into an error, configurable Secret key names, the preStop sleep, the PDB's unhealthy-pod eviction
policy, the optional Ingress and the NOTES.txt warning about an emptyDir. Rendered offline with Helm's own engine, as
test_helm.py does (its helpers are reused); no cluster is involved.
"""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from service.settings import Settings
from tests.deploy.test_helm import (
    CHART,
    NAMESPACE,
    QDRANT,
    RELEASE,
    SECRET_KEYS,
    STATE,
    _server,
    kube_versions,
    of_kind,
    one,
    render,
)

SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
SEVERAL = {"replicaCount": 2, "settings": QDRANT, "secrets": STATE}


def notes(values: dict[str, Any] | None = None) -> str:
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    (text,) = (text for path, text in out.items() if path.endswith("NOTES.txt"))
    return text


def volumes(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}


# --- Persistence ----------------------------------------------------------------------------------------------


def test_persistence_is_on_by_default_with_read_write_once_pod() -> None:
    docs = render()
    claim = one(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOncePod"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert volumes(docs)["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    assert one(docs, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}


def test_access_modes_fall_back_to_read_write_once() -> None:
    claim = one(render({"persistence": {"accessModes": ["ReadWriteOnce"]}}), "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_existing_claim_is_used_without_making_one() -> None:
    docs = render({"persistence": {"existingClaim": "my-data"}})
    assert not of_kind(docs, "PersistentVolumeClaim")
    assert volumes(docs)["data"]["persistentVolumeClaim"] == {"claimName": "my-data"}


def test_persistence_off_is_an_emptydir_with_a_rolling_update() -> None:
    docs = render({"persistence": {"enabled": False}})
    assert not of_kind(docs, "PersistentVolumeClaim")
    assert "emptyDir" in volumes(docs)["data"]
    assert one(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"


@pytest.mark.parametrize("replicas", [{"replicaCount": 2}, {"autoscaling": {"enabled": True}}])
def test_several_replicas_keep_no_claim(replicas: dict[str, Any]) -> None:
    """Several replicas need Qdrant and PostgreSQL: /data holds only the lock file, so persistence (on by default)
    makes no claim and the rolling update stays; a ReadWriteOncePod claim could not be shared anyway."""
    docs = render({**SEVERAL, **replicas})
    assert not of_kind(docs, "PersistentVolumeClaim")
    assert "emptyDir" in volumes(docs)["data"]
    assert one(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"


def test_sqlite_state_with_qdrant_is_still_persisted() -> None:
    """backend qdrant without a state URL keeps the SQLite state under /data: that is worth a claim."""
    docs = render({"settings": QDRANT})
    assert one(docs, "PersistentVolumeClaim")
    assert "persistentVolumeClaim" in volumes(docs)["data"]


def test_empty_access_modes_fail() -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("persistence.accessModes must name")):
        render({"persistence": {"accessModes": []}})


# --- NOTES.txt --------------------------------------------------------------------------------------------------


def test_notes_warn_when_data_lives_on_an_emptydir() -> None:
    assert "WARNING" not in notes()
    assert "PersistentVolumeClaim plumbline-data" in notes()
    assert "ReadWriteOnce" in notes()  # the fallback is named
    text = notes({"persistence": {"enabled": False}})
    assert "WARNING" in text
    assert "emptyDir" in text
    assert "LOST" in text
    # the SQLite state alone (backend qdrant, no state URL) is data too
    assert "WARNING" in notes({"persistence": {"enabled": False}, "settings": QDRANT})
    # with Qdrant and PostgreSQL /data holds only the lock file: nothing to warn about
    assert "WARNING" not in notes({**SEVERAL, "persistence": {"enabled": False}})


def test_notes_name_the_ingress() -> None:
    values = {"ingress": {"enabled": True, "host": "plumbline.example.com", "tls": [{"secretName": "t"}]}}
    assert "https://plumbline.example.com/" in notes(values)
    assert "Ingress" not in notes()


# --- values.schema.json -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "typo"),
    [
        ({"persistance": {"enabled": False}}, "persistance"),
        ({"evaluation": {"cronjob": {"intervalSecond": 60}}}, "intervalSecond"),
        ({"persistence": {"accessMode": "ReadWriteOnce"}}, "accessMode"),
        ({"secrets": {"existingSecretKey": ["state-url"]}}, "existingSecretKey"),
        ({"settings": {"qdrant_urls": "http://qdrant:6333"}}, "qdrant_urls"),
        ({"ingress": {"hosts": ["a.example"]}}, "hosts"),
        ({"lifecycle": {"preStopSleepSecond": 5}}, "preStopSleepSecond"),
        ({"podDisruptionBudget": {"unhealthyPodEvictionPolicy": "Always"}}, "unhealthyPodEvictionPolicy"),
        ({"replicaCount": "two"}, "replicaCount"),
    ],
)
def test_misspelled_or_mistyped_values_fail_rendering_and_lint(values: dict[str, Any], typo: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(typo)):
        render(values)
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    assert any(typo in error for error in report["errors"]), report["errors"]


def test_values_yaml_and_production_values_pass_the_schema() -> None:
    for values in ({}, helm.values_from_yaml((CHART / "values-production.yaml").read_text(encoding="utf-8"))):
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
        assert not report["errors"], report["errors"]


def _paths(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict) and node:
        return set().union(*(_paths(v, f"{prefix}.{k}" if prefix else k) for k, v in node.items()))
    return {prefix}


def test_schema_covers_every_value() -> None:
    """Every key of values.yaml has a schema entry with a type (or enum), or sits in an open Kubernetes object
    (resources, securityContext), and every level the chart reads itself is closed (additionalProperties false)."""
    with helm.Chart.load(CHART) as chart:
        values = chart.merge_values({})
    missing = []
    for path in sorted(_paths(values)):
        node = SCHEMA
        for part in path.split("."):
            props = node.get("properties", {})
            if part not in props:
                # a closed level must name it; an open one (a Kubernetes object passed through as it is) covers it
                if node.get("additionalProperties") is False:
                    missing.append(path)
                break
            node = props[part]
        else:
            if not ({"type", "enum", "oneOf"} & set(node)):
                missing.append(f"{path} (untyped)")
    assert not missing, f"values without a schema entry: {missing}"
    assert SCHEMA["additionalProperties"] is False
    for name in ("image", "secrets", "evaluation", "persistence", "ingress", "lifecycle", "podDisruptionBudget"):
        assert SCHEMA["properties"][name]["additionalProperties"] is False, name


def test_schema_settings_are_the_settings_fields() -> None:
    """settings is closed too: its properties are exactly service/settings.py's fields (a typo fails; the fields
    the chart sets itself are listed so that the chart's own message says what to use instead)."""
    assert set(SCHEMA["properties"]["settings"]["properties"]) == set(Settings.model_fields)


# --- Secret key names -------------------------------------------------------------------------------------------

RENAMED = {
    "apiKeysFile": "keys.json",
    "qdrantApiKey": "QDRANT_API_KEY",
    "stateUrl": "DATABASE_URL",
    "evalApiKey": "eval-key",
    "metricsApiKey": "metrics-key",
}


def _renamed_values() -> dict[str, Any]:
    return {
        **SEVERAL,
        "secrets": {"existingSecret": "mine", "existingSecretKeys": RENAMED},
        "settings": {**QDRANT, "metrics_auth": True},
        "evaluation": {"mode": "cronjob", "cronjob": {"sets": [{"name": "handbook"}]}},
        "metrics": {"serviceMonitor": {"enabled": True}},
    }


def test_existing_secret_key_names_are_configurable() -> None:
    docs = render(_renamed_values())
    assert not of_kind(docs, "Secret")
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in _server(docs)["env"] if "valueFrom" in e}
    assert env["PLUMBLINE_STATE_URL"] == {"name": "mine", "key": "DATABASE_URL"}
    assert env["PLUMBLINE_QDRANT_API_KEY"] == {"name": "mine", "key": "QDRANT_API_KEY"}
    (keys,) = (v for v in volumes(docs).values() if "secret" in v)
    # the key is renamed, the file the service reads is not
    assert keys["secret"]["items"] == [{"key": "keys.json", "path": "api-keys.json"}]
    cron = one(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert cron["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "eval-key"}
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["authorization"]["credentials"] == {"name": "mine", "key": "metrics-key"}


def test_a_value_left_out_of_the_key_map_is_not_read() -> None:
    docs = render({**SEVERAL, "secrets": {"existingSecret": "mine", "existingSecretKeys": {"stateUrl": "url"}}})
    env = {e["name"] for e in _server(docs).get("env", [])}
    assert env == {"PLUMBLINE_STATE_URL"}
    assert not [v for v in volumes(docs).values() if "secret" in v]


def test_defaults_keep_the_fixed_key_names() -> None:
    """The list form (the default key names) still works, and the chart-made Secret keeps its names."""
    docs = render({**SEVERAL, "secrets": {"existingSecret": "mine", "existingSecretKeys": ["state-url"]}})
    (ref,) = (e["valueFrom"]["secretKeyRef"] for e in _server(docs)["env"] if "valueFrom" in e)
    assert ref == {"name": "mine", "key": SECRET_KEYS["stateUrl"]}
    secret = one(render(SEVERAL), "Secret")
    assert set(secret["data"]) == {SECRET_KEYS["stateUrl"]}


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ({"stateURL": "x"}, helm.HelmValuesError),  # not a secrets value
        ({"stateUrl": "no spaces"}, helm.HelmValuesError),  # not a valid Secret key
    ],
)
def test_bad_key_maps_fail(keys: dict[str, str], error: type[Exception]) -> None:
    with pytest.raises(error):
        render({"secrets": {"existingSecret": "mine", "existingSecretKeys": keys}})


# --- preStop, PDB, Ingress --------------------------------------------------------------------------------------


def test_prestop_sleeps_before_sigterm() -> None:
    docs = render()
    assert _server(docs)["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] > 5
    assert _server(render({"lifecycle": {"preStopSleepSeconds": 12}}))["lifecycle"]["preStop"]["exec"]["command"] == [
        "sleep",
        "12",
    ]
    assert "lifecycle" not in _server(render({"lifecycle": {"preStopSleepSeconds": 0}}))


def test_prestop_must_fit_the_grace_period() -> None:
    with pytest.raises(helm.HelmRenderError, match="must be less than terminationGracePeriodSeconds"):
        render({"lifecycle": {"preStopSleepSeconds": 30}})


def test_pdb_lets_unhealthy_pods_be_evicted() -> None:
    pdb = one(render(SEVERAL), "PodDisruptionBudget")
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    other = {**SEVERAL, "podDisruptionBudget": {"unhealthyPodEvictionPolicy": "IfHealthyBudget"}}
    assert one(render(other), "PodDisruptionBudget")["spec"]["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"


INGRESS = {
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "host": "plumbline.example.com",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        "tls": [{"secretName": "plumbline-tls", "hosts": ["plumbline.example.com"]}],
    }
}


def test_no_ingress_by_default() -> None:
    assert not of_kind(render(), "Ingress")


def test_ingress_points_at_the_service() -> None:
    docs = render(INGRESS)
    ingress, service = one(docs, "Ingress"), one(docs, "Service")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    assert ingress["spec"]["tls"] == [{"secretName": "plumbline-tls", "hosts": ["plumbline.example.com"]}]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "plumbline.example.com"
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/"
    assert path["pathType"] == "Prefix"
    assert path["backend"]["service"]["name"] == service["metadata"]["name"]
    assert path["backend"]["service"]["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


def test_ingress_without_host_class_or_tls() -> None:
    ingress = one(render({"ingress": {"enabled": True}}), "Ingress")
    assert "ingressClassName" not in ingress["spec"]
    assert "tls" not in ingress["spec"]
    assert "host" not in ingress["spec"]["rules"][0]


# --- The new pieces are valid Kubernetes ------------------------------------------------------------------------


@pytest.mark.parametrize("kube", kube_versions())
@pytest.mark.parametrize(
    "values",
    [{}, {**SEVERAL, **INGRESS}, {"ingress": {"enabled": True}}, {"persistence": {"enabled": False}}],
    ids=["default", "several-ingress", "bare-ingress", "no-persistence"],
)
def test_new_pieces_validate_against_kubernetes_schemas(values: dict[str, Any], kube: str) -> None:
    for doc in render(values):
        kubernetes_validate.validate(doc, kube, strict=True)


@pytest.mark.parametrize("kube", kube_versions())
def test_lint_is_clean_with_the_new_pieces(kube: str) -> None:
    report = helm.lint(CHART, {**SEVERAL, **INGRESS}, strict=True, kube_version=f"v{kube}.0", namespace=NAMESPACE)
    assert not report["errors"], report["errors"]
    assert not [m for m in report["messages"] if m["severity"] > 1], report["messages"]
