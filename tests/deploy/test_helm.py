"""The Helm chart (helm/plumbline), checked offline: Helm's own engine (helm-python-sdk: Helm v4 as a library)
renders and lints it, every rendered manifest is validated against the Kubernetes JSON schemas
(kubernetes-validate, strict: unknown fields fail) at the chart's minimum Kubernetes version and the newest one the
package ships, and the properties that matter are asserted on the rendered objects. No cluster is involved.

The PrometheusRule and ServiceMonitor are CRD kinds the schemas do not know: their metadata is validated as
ObjectMeta, the PrometheusRule's groups must equal deploy/prometheus/rules/plumbline.yml and pass `promtool check
rules` (skipped without promtool, a failure under PLUMBLINE_REQUIRE_PROMETHEUS), and the ServiceMonitor must select
the Service and label the job as the rules expect.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from service.access.keys import read_key_file
from service.cli.main import _parser
from service.settings import Settings
from tests.deploy.helpers import ROOT, RULES, load_yaml, run_promtool

CHART = ROOT / "helm" / "plumbline"
PRODUCTION_VALUES = CHART / "values-production.yaml"
CHART_RULES = CHART / "files" / "plumbline-rules.yml"
RELEASE, NAMESPACE = "plumbline", "plumbline"

# secrets.<value> -> its key in the Secret (fixed names, documented in values.yaml and docs/deploy-helm.md).
SECRET_KEYS = {
    "apiKeysFile": "api-keys.json",
    "qdrantApiKey": "qdrant-api-key",
    "stateUrl": "state-url",
    "evalApiKey": "eval-api-key",
    "metricsApiKey": "metrics-api-key",
}
# The only PLUMBLINE_* variable that is not a Settings field: the key the CLI sends (service/cli/remote.py), in the
# CronJob.
CLI_KEY_ENV = "PLUMBLINE_API_KEY"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
MONITORING_API = "monitoring.coreos.com/v1"
UID = 10001


def _production() -> dict[str, Any]:
    return helm.values_from_yaml(PRODUCTION_VALUES.read_text(encoding="utf-8"))


KEYS_FILE = json.dumps(
    [{"key_id": "0123456789abcdef", "name": "ops", "sha256": "0" * 64, "roles": ["admin"], "tenant": None}]
)


def _chart_secret() -> dict[str, Any]:
    """The production values with a chart-made Secret instead of an existing one, and two CronJob sets."""
    values = _production()
    values["secrets"] = {
        "existingSecret": "",
        "existingSecretKeys": [],
        "apiKeysFile": KEYS_FILE,
        "qdrantApiKey": "qdrant-key",
        "stateUrl": "postgresql://plumbline:pw@postgresql:5432/plumbline",
        "evalApiKey": "pl_0123456789abcdef_" + "a" * 43,
        "metricsApiKey": "pl_fedcba9876543210_" + "b" * 43,
    }
    values["evaluation"]["cronjob"]["sets"] = [
        {"name": "handbook"},
        {"name": "Support_FAQ", "baseline": "faq-v2", "intervalSeconds": 86400},
    ]
    return values


LEADER = {
    "replicaCount": 2,
    "settings": {
        "backend": "qdrant",
        "qdrant_url": "http://qdrant:6333",
        "max_document_chars": 3_000_000,  # toString would give 3e+06
        "rerank_model": "",  # no reranker, whatever the image bakes in
    },
    "secrets": {"stateUrl": "postgresql://plumbline:pw@postgresql:5432/plumbline"},
    "evaluation": {"mode": "leader", "leaderSchedule": {"handbook": 3600, "faq": 86400}},
}
SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "default": lambda: {},
    "production": _production,
    "chart-secret": _chart_secret,
    "leader": lambda: copy.deepcopy(LEADER),
}
_RENDERED: dict[str, list[dict[str, Any]]] = {}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's manifests for these values (merged over values.yaml by Helm), NOTES.txt left out."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if not path.endswith(".yaml"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def merged(name: str) -> dict[str, Any]:
    """The values a scenario renders with: its own over values.yaml, coalesced by Helm."""
    with helm.Chart.load(CHART) as chart:
        return chart.merge_values(SCENARIOS[name]())


def scenario(name: str) -> list[dict[str, Any]]:
    if name not in _RENDERED:
        _RENDERED[name] = render(SCENARIOS[name]())
    return _RENDERED[name]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of the Deployment and every CronJob."""
    specs = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in of_kind(docs, "Deployment")]
    specs += [
        (d["metadata"]["name"], d["spec"]["jobTemplate"]["spec"]["template"]["spec"]) for d in of_kind(docs, "CronJob")
    ]
    return specs


def config_data(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The settings ConfigMap's data (not the Grafana dashboard's ConfigMap, metrics.grafanaDashboard)."""
    settings = [d for d in of_kind(docs, "ConfigMap") if not d["metadata"]["name"].endswith("-dashboard")]
    data: dict[str, str] = one(settings, "ConfigMap")["data"]
    return data


def kube_versions() -> list[str]:
    """The chart's minimum Kubernetes version (Chart.yaml kubeVersion) and the newest kubernetes-validate ships."""
    found = re.search(r">=\s*v?(\d+\.\d+)", load_yaml(CHART / "Chart.yaml")["kubeVersion"])
    assert found, "Chart.yaml kubeVersion must state a minimum (>=1.x)"
    return [found.group(1), ".".join(latest_version().split(".")[:2])]


# --- Helm: lint, and the kinds each configuration renders -------------------------------------------------------


@pytest.mark.parametrize("kube", kube_versions())
@pytest.mark.parametrize("name", SCENARIOS)
def test_helm_lint_is_clean(name: str, kube: str) -> None:
    """`helm lint --strict` at the minimum and newest Kubernetes version: no warnings or errors (info is allowed)."""
    report = helm.lint(CHART, SCENARIOS[name](), strict=True, kube_version=f"v{kube}.0", namespace=NAMESPACE)
    assert report["errors"] == [], report
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems, problems


def test_chart_metadata() -> None:
    with helm.Chart.load(CHART) as chart:
        meta = chart.metadata
        assert meta["apiVersion"] == "v2"
        assert meta["appVersion"] == "0.1.0"
        # external Qdrant and PostgreSQL by URL: no dependency that would have to be downloaded to render
        assert not meta.get("dependencies"), meta.get("dependencies")


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("default", {"ConfigMap", "Deployment", "PersistentVolumeClaim", "Service", "ServiceAccount"}),
        (
            "production",
            {"ConfigMap", "CronJob", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "PrometheusRule"}
            | {"Service", "ServiceAccount", "ServiceMonitor"},
        ),
        (
            "chart-secret",
            {"ConfigMap", "CronJob", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "PrometheusRule"}
            | {"Secret", "Service", "ServiceAccount", "ServiceMonitor"},
        ),
        ("leader", {"ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service", "ServiceAccount"}),
    ],
)
def test_rendered_kinds(name: str, kinds: set[str]) -> None:
    assert {d["kind"] for d in scenario(name)} == kinds


# --- Kubernetes schemas ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kube", kube_versions())
@pytest.mark.parametrize("name", SCENARIOS)
def test_manifests_validate_against_kubernetes_schemas(name: str, kube: str) -> None:
    checked: set[str] = set()
    for doc in scenario(name):
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in CRD_KINDS:
            assert doc["apiVersion"] == MONITORING_API, what
            # no schema for the CRD itself: its metadata must still be valid ObjectMeta
            shell = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
            kubernetes_validate.validate(shell, kube, strict=True)
            continue
        try:
            kubernetes_validate.validate(doc, kube, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{what} is invalid for Kubernetes {kube}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{what}: {exc.message} (only {sorted(CRD_KINDS)} may be unknown kinds)")
        checked.add(doc["kind"])
    assert {"Deployment", "Service", "ConfigMap"} <= checked


# --- The Deployment --------------------------------------------------------------------------------------------


def _server(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


@pytest.mark.parametrize("name", SCENARIOS)
def test_probes_ask_the_health_endpoints(name: str) -> None:
    container = _server(scenario(name))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000}
    expected = {"readinessProbe": "/health/ready", "livenessProbe": "/health/live", "startupProbe": "/health/live"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"]) == (path, "http"), probe
    # model loading takes 1-2 minutes: the start-up probe must allow well over that before liveness counts
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 150


@pytest.mark.parametrize("name", SCENARIOS)
def test_pods_run_locked_down(name: str) -> None:
    """Non-root UID 10001, read-only root, no privilege escalation, no capabilities, RuntimeDefault seccomp: for
    the service and for every CronJob."""
    specs = pod_specs(scenario(name))
    assert specs
    for workload, spec in specs:
        pod = spec["securityContext"]
        assert (pod["runAsNonRoot"], pod["runAsUser"]) == (True, UID), workload
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, workload
        assert spec["automountServiceAccountToken"] is False, workload
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert (sc["runAsNonRoot"], sc["runAsUser"]) == (True, UID), workload
            assert sc["readOnlyRootFilesystem"] is True, workload
            assert sc["allowPrivilegeEscalation"] is False, workload
            assert sc["capabilities"] == {"drop": ["ALL"]}, workload
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, workload


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_container_has_requests_and_limits(name: str) -> None:
    for workload, spec in pod_specs(scenario(name)):
        for container in spec["containers"]:
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(bound, {})), f"{workload}: {bound}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_writable_paths_are_volumes(name: str) -> None:
    """The root filesystem is read-only: /data (lock file, embedded index, SQLite) and /tmp (HOME, caches) are
    emptyDirs, and every CronJob has its own /tmp."""
    for workload, spec in pod_specs(scenario(name)):
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            needed = ["/data", "/tmp"] if container["name"] == "plumbline" else ["/tmp"]
            for path in needed:
                assert path in mounts, f"{workload}: {path} not mounted"
                # /data of the embedded store is on a claim by default (persistence.enabled)
                kinds = {"emptyDir", "persistentVolumeClaim"} if path == "/data" else {"emptyDir"}
                assert kinds & set(volumes[mounts[path]]), f"{workload}: {path} is not a volume"


def test_persistence_keeps_data_on_a_claim_and_recreates() -> None:
    docs = render({"persistence": {"enabled": True}})
    deployment = one(docs, "Deployment")
    claim = one(docs, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # two pods must never hold one data directory: the old one stops before the new one starts
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_config_or_secret_change_rolls_the_pods() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        got: dict[str, str] = one(render(values), "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return got

    base = annotations(copy.deepcopy(LEADER))
    changed_config = copy.deepcopy(LEADER)
    changed_config["settings"]["log_format"] = "text"
    changed_secret = copy.deepcopy(LEADER)
    changed_secret["secrets"]["stateUrl"] = "postgresql://plumbline:other@postgresql:5432/plumbline"
    assert annotations(changed_config)["checksum/config"] != base["checksum/config"]
    assert annotations(changed_secret)["checksum/secret"] != base["checksum/secret"]
    assert annotations(copy.deepcopy(LEADER)) == base  # and the checksums are stable


def test_image_defaults_to_the_app_version() -> None:
    assert _server(scenario("default"))["image"] == "plumbline:0.1.0"
    assert _server(scenario("production"))["image"] == "registry.example.com/plumbline:0.1.0"


@pytest.mark.parametrize("name", SCENARIOS)
def test_service_selects_the_serving_pods_only(name: str) -> None:
    docs = scenario(name)
    service = one(docs, "Service")
    selector = service["spec"]["selector"]
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["selector"]["matchLabels"] == selector
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    for cronjob in of_kind(docs, "CronJob"):
        labels = cronjob["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= labels.items(), "the Service would send traffic to evaluation Jobs"


# --- Settings and secrets --------------------------------------------------------------------------------------


def _env_names(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(workload, variable) of every PLUMBLINE_* variable the ConfigMap or a container sets."""
    found = [("ConfigMap", name) for name in config_data(docs)]
    for workload, spec in pod_specs(docs):
        for container in spec["containers"]:
            found += [(workload, e["name"]) for e in container.get("env", [])]
    return [(w, n) for w, n in found if n.startswith("PLUMBLINE_")]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_plumbline_variable_is_a_settings_field(name: str) -> None:
    fields = set(Settings.model_fields)
    cronjobs = {d["metadata"]["name"] for d in of_kind(scenario(name), "CronJob")}
    for workload, variable in _env_names(scenario(name)):
        if variable == CLI_KEY_ENV:
            assert workload in cronjobs, f"{CLI_KEY_ENV} is the CLI's key, not a setting ({workload})"
            continue
        field = variable.removeprefix("PLUMBLINE_").lower()
        assert field in fields, f"{workload}: {variable} is not a field of service/settings.py"


def test_the_cli_reads_its_key_from_the_cronjob_variable() -> None:
    assert f'os.environ.get("{CLI_KEY_ENV}"' in (ROOT / "service" / "cli" / "remote.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", [CHART / "values.yaml", PRODUCTION_VALUES], ids=lambda p: p.name)
def test_settings_in_values_files_are_settings_fields(path: Path) -> None:
    settings = load_yaml(path).get("settings", {})
    unknown = sorted(set(settings) - set(Settings.model_fields))
    assert not unknown, f"{path.name}: settings.{unknown} are not fields of service/settings.py"


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_service_accepts_the_rendered_settings(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap plus the secret variables, as the container's environment, build a valid Settings."""
    docs = scenario(name)
    for variable in [v for v in os.environ if v.startswith("PLUMBLINE_")]:
        monkeypatch.delenv(variable)
    env = dict(config_data(docs))
    for variable, key in [("PLUMBLINE_STATE_URL", "state-url"), ("PLUMBLINE_QDRANT_API_KEY", "qdrant-api-key")]:
        if any(e["name"] == variable for e in _server(docs).get("env", [])):
            env[variable] = {"state-url": "postgresql://u:p@db:5432/plumbline"}.get(key, "secret")
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    settings = Settings()
    assert str(settings.data_dir) == "/data"
    values = merged(name)
    for field, value in values["settings"].items():
        if value is not None:
            assert getattr(settings, field) == value, field
    if values["evaluation"]["mode"] == "leader":
        assert settings.eval_schedule == values["evaluation"]["leaderSchedule"]
    else:
        assert settings.eval_schedule == {}


@pytest.mark.parametrize(("text", "expected"), [("on", "on"), ("off", "off"), ('"off"', "off")])
def test_bare_yaml_on_off_still_means_auth_on_off(text: str, expected: str) -> None:
    """YAML reads a bare on/off as a boolean; PLUMBLINE_AUTH must still be on/off, not true/false."""
    values = helm.values_from_yaml(f"settings:\n  auth: {text}\n")
    assert config_data(render(values))["PLUMBLINE_AUTH"] == expected


@pytest.mark.parametrize("name", SCENARIOS)
def test_referenced_secret_keys_exist(name: str) -> None:
    """Every secretKeyRef, secret volume item and ServiceMonitor credential names a key the chart's Secret holds,
    or, with secrets.existingSecret, one of the documented keys that secrets.existingSecretKeys says it holds."""
    docs = scenario(name)
    secrets = merged(name)["secrets"]
    existing, held = secrets["existingSecret"], set(secrets["existingSecretKeys"])
    made = {d["metadata"]["name"]: set(d.get("data", {})) for d in of_kind(docs, "Secret")}
    refs: list[tuple[str, str, str]] = []
    for workload, spec in pod_specs(docs):
        for container in spec["containers"]:
            for env in container.get("env", []):
                if "secretKeyRef" in env.get("valueFrom", {}):
                    ref = env["valueFrom"]["secretKeyRef"]
                    refs.append((workload, ref["name"], ref["key"]))
        for volume in spec["volumes"]:
            if "secret" in volume:
                items = volume["secret"].get("items")
                assert items, f"{workload}: secret volume {volume['name']} must list its keys"
                refs += [(workload, volume["secret"]["secretName"], item["key"]) for item in items]
    for monitor in of_kind(docs, "ServiceMonitor"):
        for endpoint in monitor["spec"]["endpoints"]:
            if "authorization" in endpoint:
                creds = endpoint["authorization"]["credentials"]
                refs.append((monitor["metadata"]["name"], creds["name"], creds["key"]))
    for workload, secret, key in refs:
        if secret in made:
            assert key in made[secret], f"{workload}: Secret {secret} has no key {key}"
        else:
            assert secret == existing, f"{workload}: Secret {secret} is neither rendered nor secrets.existingSecret"
            assert key in SECRET_KEYS.values(), f"{workload}: {key} is not a documented key"
            assert key in held, f"{workload}: {key} is not in secrets.existingSecretKeys"
    if name != "default":
        assert refs, "this configuration must reference secrets"


def test_chart_secret_holds_the_values() -> None:
    values = _chart_secret()
    secret = one(scenario("chart-secret"), "Secret")
    decoded = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert decoded == {key: values["secrets"][name] for name, key in SECRET_KEYS.items()}


def test_api_keys_file_is_mounted_where_the_setting_points(tmp_path: Path) -> None:
    docs = scenario("chart-secret")
    path = Path(config_data(docs)["PLUMBLINE_API_KEYS_FILE"])
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    (volume,) = (v for v in spec["volumes"] if "secret" in v)
    # a directory mount (no subPath): the kubelet swaps the file in place when the Secret changes
    assert mounts[volume["name"]]["mountPath"] == str(path.parent)
    assert "subPath" not in mounts[volume["name"]]
    assert volume["secret"]["items"] == [{"key": "api-keys.json", "path": path.name}]
    # and the Secret's file is one the service can read
    secret = one(docs, "Secret")
    (tmp_path / path.name).write_bytes(base64.b64decode(secret["data"]["api-keys.json"]))
    assert [k.key_id for k in read_key_file(tmp_path / path.name)] == ["0123456789abcdef"]


def test_secret_key_names_are_documented() -> None:
    for doc in (CHART / "values.yaml", ROOT / "docs" / "deploy-helm.md"):
        text = doc.read_text(encoding="utf-8")
        missing = [key for key in SECRET_KEYS.values() if key not in text]
        assert not missing, f"{doc.name} does not document the Secret keys {missing}"


# --- Values that cannot work fail the rendering -----------------------------------------------------------------

QDRANT = {"backend": "qdrant", "qdrant_url": "http://qdrant:6333"}
STATE = {"stateUrl": "postgresql://u:p@db:5432/plumbline"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 2}, "replicaCount > 1 and autoscaling need settings.backend qdrant"),
        ({"autoscaling": {"enabled": True}}, "replicaCount > 1 and autoscaling need settings.backend qdrant"),
        ({"replicaCount": 2, "settings": QDRANT}, "a PostgreSQL state URL"),
        ({"replicaCount": 2, "settings": {"backend": "edge"}, "secrets": STATE}, "need settings.backend qdrant"),
        ({"settings": {"backend": "qdrant"}}, "needs settings.qdrant_url"),
        ({"settings": {"state_url": "postgresql://x"}}, "settings.state_url is set by the chart"),
        ({"settings": {"eval_schedule": {"a": 60}}}, "settings.eval_schedule is set by the chart"),
        ({"secrets": {"existingSecret": "s", "stateUrl": "postgresql://x"}}, "secrets.stateUrl is set but"),
        ({"secrets": {"existingSecret": "s", "existingSecretKeys": ["state_url"]}}, '"state_url" is not one of'),
        ({"evaluation": {"mode": "cron"}}, "evaluation.mode must be none, leader or cronjob"),
        ({"evaluation": {"mode": "leader"}}, "evaluation.mode leader needs evaluation.leaderSchedule"),
        ({"evaluation": {"mode": "cronjob"}}, "evaluation.mode cronjob needs evaluation.cronjob.sets"),
        ({"evaluation": {"mode": "cronjob", "cronjob": {"sets": [{"name": "h"}]}}}, "eval:admin"),
        (
            {
                "evaluation": {"mode": "cronjob", "cronjob": {"sets": [{"name": "a_b"}, {"name": "a.b"}]}},
                "secrets": {"evalApiKey": "pl_x"},
            },
            "both make the CronJob",
        ),
        (
            {"settings": {"metrics_auth": True}, "metrics": {"serviceMonitor": {"enabled": True}}},
            "needs a key with the metrics role",
        ),
    ],
)
def test_values_that_cannot_work_fail_rendering(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(values)


def test_several_replicas_render_with_qdrant_and_a_state_url() -> None:
    docs = scenario("leader")
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


# --- Autoscaling -----------------------------------------------------------------------------------------------


def test_hpa_scales_the_deployment() -> None:
    docs = scenario("production")
    deployment = one(docs, "Deployment")
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "plumbline"}
    assert deployment["metadata"]["name"] == "plumbline"
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert hpa["spec"]["minReplicas"] >= 2
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_one_replica_gets_no_hpa_or_pdb() -> None:
    kinds = {d["kind"] for d in scenario("default")}
    assert not kinds & {"HorizontalPodAutoscaler", "PodDisruptionBudget"}


# --- Scheduled evaluation --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "leader"])
def test_no_cronjob_outside_cronjob_mode(name: str) -> None:
    """Not even when sets are listed for the CronJobs (left over from a switch of mode): only the mode decides."""
    values = SCENARIOS[name]()
    values.setdefault("evaluation", {})["cronjob"] = {"sets": [{"name": "handbook"}]}
    values["secrets"] = {**values.get("secrets", {}), "evalApiKey": "pl_x"}
    assert not of_kind(render(values), "CronJob")
    assert not of_kind(scenario(name), "CronJob")


def test_leader_mode_sets_the_schedule() -> None:
    schedule = json.loads(config_data(scenario("leader"))["PLUMBLINE_EVAL_SCHEDULE"])
    assert schedule == LEADER["evaluation"]["leaderSchedule"]


@pytest.mark.parametrize("name", ["production", "chart-secret"])
def test_cronjob_mode_runs_each_set_through_the_service(name: str) -> None:
    docs = scenario(name)
    values = SCENARIOS[name]()
    sets = values["evaluation"]["cronjob"]["sets"]
    cronjobs = of_kind(docs, "CronJob")
    assert len(cronjobs) == len(sets)
    assert "PLUMBLINE_EVAL_SCHEDULE" not in config_data(docs), "the replicas would run the sets as well"
    # the interval each set's runs are expected at, for the overdue alerts (the replicas export it as a gauge)
    expected = json.loads(config_data(docs)["PLUMBLINE_EVAL_EXPECTED_INTERVALS"])
    assert expected == {s["name"]: s.get("intervalSeconds", 3600) for s in sets}
    assert Settings(**{"eval_expected_intervals": expected}).eval_expected_intervals == expected  # the service reads it
    service = one(docs, "Service")
    url = f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    names = set()
    for cronjob, wanted in zip(cronjobs, sets, strict=True):
        names.add(cronjob["metadata"]["name"])
        assert len(cronjob["metadata"]["name"]) <= 52
        spec = cronjob["spec"]
        assert cronjob["apiVersion"] == "batch/v1"
        assert spec["concurrencyPolicy"] == "Forbid"
        job = spec["jobTemplate"]["spec"]
        pod = job["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        (container,) = pod["containers"]
        command = container["command"]
        assert command[0] == "plumbline"
        args = _parser().parse_args(command[1:])  # the real CLI accepts it
        assert (args.url, args.set, args.baseline, args.monitoring) == (
            url,
            wanted["name"],
            wanted.get("baseline", wanted["name"]),
            True,
        )
        key = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]}
        assert key == {CLI_KEY_ENV: "eval-api-key"}
        # a regression (1) or a refused run (2) fails the Job without retries
        (rule,) = job["podFailurePolicy"]["rules"]
        assert rule["action"] == "FailJob"
        assert rule["onExitCodes"] == {"containerName": container["name"], "operator": "In", "values": [1, 2]}
    assert len(names) == len(sets)


# --- Prometheus Operator resources -----------------------------------------------------------------------------


@pytest.mark.parametrize("monitor", [False, True])
@pytest.mark.parametrize("rule", [False, True])
def test_monitoring_resources_only_when_enabled(monitor: bool, rule: bool) -> None:
    docs = render({"metrics": {"serviceMonitor": {"enabled": monitor}, "prometheusRule": {"enabled": rule}}})
    assert len(of_kind(docs, "ServiceMonitor")) == int(monitor)
    assert len(of_kind(docs, "PrometheusRule")) == int(rule)


def test_rules_file_in_the_chart_is_the_deploy_file() -> None:
    """Helm reads only files inside the chart: files/plumbline-rules.yml is a link to the one rules file, never a
    copy that could drift (Helm's loader follows the link)."""
    assert CHART_RULES.is_symlink(), f"{CHART_RULES} must be a symbolic link to {RULES}"
    assert CHART_RULES.resolve() == RULES.resolve()


def test_packaged_chart_carries_the_rules_file(tmp_path: Path) -> None:
    """`helm package` stores the linked file's contents, so the archive renders the same PrometheusRule."""
    archive = helm.package(CHART, destination=tmp_path)
    with tarfile.open(archive) as tar:
        member = tar.getmember("plumbline/files/plumbline-rules.yml")
        assert member.isfile()
        stored = tar.extractfile(member)
        assert stored is not None
        assert stored.read() == RULES.read_bytes()


def _rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = one(scenario("production"), "PrometheusRule")["spec"]["groups"]
    return groups


def test_prometheus_rule_is_the_rules_file() -> None:
    """The PrometheusRule's groups are exactly the rules file's, Prometheus templates ({{ $labels.x }}, {{ $value }})
    untouched by Helm."""
    rule = one(scenario("production"), "PrometheusRule")
    assert set(rule["spec"]) == {"groups"}
    assert _rule_groups() == load_yaml(RULES)["groups"]
    annotations = [a for g in _rule_groups() for r in g["rules"] for a in r.get("annotations", {}).values()]
    assert any("{{ $labels." in a for a in annotations)
    assert any("{{ $value" in a for a in annotations)


# Fields of the Prometheus Operator CRDs (monitoring.coreos.com/v1) this chart may use, and their Duration pattern.
RULE_GROUP_FIELDS = {"name", "interval", "query_offset", "rules", "partial_response_strategy", "limit", "labels"}
RULE_FIELDS = {"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
MONITOR_FIELDS = {"selector", "endpoints", "jobLabel", "namespaceSelector"}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "authorization", "relabelings", "metricRelabelings"}
RELABEL_FIELDS = {"action", "sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement"}
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")


def test_crd_objects_use_only_fields_the_crds_define() -> None:
    """What the Kubernetes schemas cannot check for the CRD kinds: known fields, string maps, valid durations."""
    docs = scenario("production")
    for group in _rule_groups():
        assert set(group) <= RULE_GROUP_FIELDS, group["name"]
        for rule in group["rules"]:
            what = rule.get("alert") or rule.get("record")
            assert what, rule
            assert isinstance(rule["expr"], str), what
            assert set(rule) <= RULE_FIELDS, what
            assert DURATION.match(rule.get("for", "0")), what
            for field in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in rule.get(field, {}).values()), f"{what}: {field}"
    monitor = one(docs, "ServiceMonitor")["spec"]
    assert set(monitor) <= MONITOR_FIELDS
    for endpoint in monitor["endpoints"]:
        assert set(endpoint) <= ENDPOINT_FIELDS, endpoint
        assert DURATION.match(endpoint["interval"])
        assert DURATION.match(endpoint["scrapeTimeout"])
        assert all(set(r) <= RELABEL_FIELDS for r in endpoint["relabelings"])
        if "authorization" in endpoint:
            assert set(endpoint["authorization"]["credentials"]) == {"name", "key"}


def test_promtool_accepts_the_prometheus_rule(tmp_path: Path) -> None:
    extracted = tmp_path / "prometheusrule.yml"
    extracted.write_text(yaml.safe_dump({"groups": _rule_groups()}, sort_keys=False), encoding="utf-8")
    result = run_promtool("check", "rules", str(extracted), cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "SUCCESS" in result.stdout, result.stdout


def test_service_monitor_scrapes_every_pod_as_the_rules_expect() -> None:
    docs = scenario("production")
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # the alert rules name no job (they aggregate by namespace and job, whatever the scrape sets): any job label works
    assert not re.findall(r"\bjob\s*=~?", RULES.read_text(encoding="utf-8"))
    relabel = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    assert all(r["replacement"] for r in relabel)
    # the rules select the request metrics' own endpoint label (the route): the operator's endpoint=<port> target
    # label must be dropped, or Prometheus renames the route's label to exported_endpoint
    assert re.search(r'endpoint="/search"', RULES.read_text(encoding="utf-8"))
    assert {"action": "labeldrop", "regex": "endpoint"} in endpoint["relabelings"]
    # settings.metrics_auth is on in production: the scrape sends a Bearer key
    assert config_data(docs)["PLUMBLINE_METRICS_AUTH"] == "true"
    assert endpoint["authorization"]["type"] == "Bearer"


# --- values.yaml documents every value -------------------------------------------------------------------------


def test_every_value_is_documented() -> None:
    """Each key in values.yaml has a comment: on the lines just above it, or at the end of its line."""
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    undocumented = []
    for n, line in enumerate(lines):
        if not re.match(r"^\s*[A-Za-z_][\w-]*:", line):
            continue
        above = lines[n - 1].strip() if n else ""
        if not (above.startswith("#") or " # " in line):
            undocumented.append(f"{n + 1}: {line.strip()}")
    assert not undocumented, "values.yaml keys without a comment:\n" + "\n".join(undocumented)
