"""deploy/docker-compose.yml, checked without a Docker engine: it is valid under the Compose specification's
JSON schema (and a broken copy is not), and its parts fit together: bind mounts and the build context exist, the
plumbline service's environment is a valid Settings, Prometheus scrapes and Grafana queries compose services at
their ports, images are pinned, dependencies wait for health, and the documented `exec` commands parse."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from service.cli.main import _parser
from service.settings import Settings
from tests.deploy.helpers import PROMETHEUS_CONFIG, ROOT, dev_tool, load_yaml, run
from tests.deploy.test_dockerfile import (
    env,
    final_stage,
    instructions,
    repo_path,
    stage_variables,
    substitute,
)

COMPOSE = ROOT / "deploy" / "docker-compose.yml"
DEPLOY = COMPOSE.parent
GRAFANA_DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources"
GRAFANA_DASHBOARD_PROVIDERS = DEPLOY / "grafana" / "provisioning" / "dashboards"
DOCS = ROOT / "docs" / "deploy-compose.md"
EXEC = "docker compose -f deploy/docker-compose.yml exec plumbline "
QDRANT_HTTP_PORT = 6333  # the qdrant image's REST port (compose publishes none of Qdrant's ports)


def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE)
    return data


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def interpolate(value: str) -> str:
    """Compose's interpolation with no variables set: the laptop defaults (`${X:-default}`), `$$` a literal $."""
    return "$".join(substitute(part, {}) for part in value.split("$$"))


def environment(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment", {})
    pairs = dict(item.split("=", 1) for item in raw) if isinstance(raw, list) else raw
    return {name: interpolate(str(value)) for name, value in pairs.items()}


def binds(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts (short syntax, or long with type: bind)."""
    out: dict[str, Path] = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
            if source.startswith((".", "/", "~")):
                out[target] = (DEPLOY / source).resolve()
        elif volume.get("type") == "bind":
            out[volume["target"]] = (DEPLOY / volume["source"]).resolve()
    return out


def host_path(service: dict[str, Any], container_path: str) -> Path | None:
    """Where a path inside the container comes from on the host, through the service's bind mounts."""
    for target, source in binds(service).items():
        try:
            rest = PurePosixPath(container_path).relative_to(target)
        except ValueError:
            continue
        return source / rest
    return None


def container_ports(service: dict[str, Any]) -> set[int]:
    return {int(interpolate(str(p)).rsplit(":", 1)[-1].split("/")[0]) for p in service.get("ports", [])}


# ---- the Compose specification ----------------------------------------------------------------------------


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    return run([dev_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)])


def test_valid_under_the_compose_specification() -> None:
    result = check_jsonschema(COMPOSE)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("service", "key", "value"),
    [("qdrant", "imagee", "qdrant/qdrant"), ("plumbline", "ports", 5), ("postgres", "depends_on", {"x": 1})],
)
def test_a_broken_copy_is_invalid(tmp_path: Path, service: str, key: str, value: object) -> None:
    data = compose()
    data["services"][service][key] = value
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = check_jsonschema(broken)
    assert result.returncode != 0, result.stdout


# ---- the parts fit together -------------------------------------------------------------------------------


def test_bind_mounts_and_the_build_context_exist() -> None:
    for name, service in services().items():
        for target, source in binds(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) is not in the repository"
            assert source.is_relative_to(ROOT), f"{name}: {source} is outside the repository"
    build = services()["plumbline"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build.get("dockerfile", "Dockerfile")).is_file()
    declared = {i.args.split("=")[0] for i in instructions() if i.keyword == "ARG"}
    assert set(build.get("args", {})) <= declared, "build args the Dockerfile declares"


def test_named_volumes_are_declared() -> None:
    declared = set(compose().get("volumes") or {})
    for name, service in services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
            if isinstance(volume, str) and not source.startswith((".", "/", "~")):
                assert source in declared, f"{name}: volume {source} is not declared"


def test_plumbline_variables_are_settings_fields() -> None:
    names = set(environment(services()["plumbline"]))
    names |= set(re.findall(r"\$\{(PLUMBLINE_\w+?)(?::?[-+?][^}]*)?\}", COMPOSE.read_text(encoding="utf-8")))
    names = {n for n in names if n.startswith("PLUMBLINE_")}
    assert names
    unknown = [n for n in sorted(names) if n.removeprefix("PLUMBLINE_").lower() not in Settings.model_fields]
    assert not unknown, f"not Settings fields (a typo is silently ignored): {unknown}"


def _plumbline_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings as the container builds them: the image's PLUMBLINE_* variables, then the compose file's."""
    for name in list(os.environ):
        if name.startswith("PLUMBLINE_"):
            monkeypatch.delenv(name)
    image = {k: v for k, v in env(final_stage(instructions())).items() if k.startswith("PLUMBLINE_")}
    for name, value in {**image, **environment(services()["plumbline"])}.items():
        monkeypatch.setenv(name, value)
    return Settings()


def test_plumbline_environment_is_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _plumbline_settings(monkeypatch)
    assert s.backend == "qdrant"
    qdrant = urlsplit(s.qdrant_url or "")
    assert qdrant.hostname in services()
    assert qdrant.port in container_ports(services()[qdrant.hostname]) | {QDRANT_HTTP_PORT}
    assert s.auth == "on"
    assert s.metrics_auth is False, "Prometheus scrapes /metrics without a key"
    for name in s.eval_schedule:
        assert (ROOT / "eval" / "sets" / f"{name}.jsonl").is_file(), f"scheduled set {name} is not packaged"
        assert (ROOT / "eval" / "baselines" / f"{name}.json").is_file(), f"no packaged baseline for {name}"


def test_the_state_store_is_the_postgres_service(monkeypatch: pytest.MonkeyPatch) -> None:
    url = urlsplit(_plumbline_settings(monkeypatch).state_store_url)
    postgres = environment(services()["postgres"])
    assert url.scheme == "postgresql"
    assert (url.hostname, url.port) == ("postgres", 5432)
    assert (url.username, url.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    assert url.path.lstrip("/") == postgres["POSTGRES_DB"]


def test_the_command_serves_the_data_volume_and_the_demo() -> None:
    service = services()["plumbline"]
    command = service.get("command") or []
    args = _parser().parse_args(command[1:])
    assert command[:2] == ["plumbline", "serve"]
    assert args.port == 8000
    assert args.port in container_ports(service)
    mounts = [v.split(":")[1] for v in service["volumes"] if isinstance(v, str)]
    assert str(args.data_dir) in mounts, "the data directory is a volume"
    for path in args.ingest:
        folder = repo_path(str(path))
        assert folder is not None, f"--ingest {path}: the Dockerfile copies nothing there"
        assert folder.is_dir(), f"--ingest {path}: {folder} is not in the repository"


def test_a_read_only_root_leaves_the_image_somewhere_to_write() -> None:
    service = services()["plumbline"]
    if not service.get("read_only"):
        return
    writable = [*service.get("tmpfs", []), *(v.split(":")[1] for v in service["volumes"] if isinstance(v, str))]
    image_env = stage_variables(final_stage(instructions()))
    for name in ("HOME", "XDG_CACHE_HOME", "PLUMBLINE_DATA_DIR"):
        path = PurePosixPath(image_env[name])
        assert any(path.is_relative_to(w) for w in writable), f"{name}={path} is not writable"


def test_prometheus_scrapes_plumbline_where_compose_serves_it() -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    prometheus = services()["prometheus"]
    assert host_path(prometheus, "/etc/prometheus/prometheus.yml") == PROMETHEUS_CONFIG
    for pattern in config["rule_files"]:
        rules = host_path(prometheus, str(PurePosixPath("/etc/prometheus") / pattern))
        assert rules is not None, f"rule_files {pattern}: not mounted"
        assert list(rules.parent.glob(rules.name)), f"rule_files {pattern}: no rules at {rules}"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["plumbline"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets
    for target in targets:
        host, port = target.rsplit(":", 1)
        assert host in services(), f"scrape target {target}: no compose service {host}"
        assert int(port) in container_ports(services()[host]), f"scrape target {target}: {host} serves elsewhere"


def test_grafana_reads_prometheus_and_the_dashboards() -> None:
    grafana = services()["grafana"]
    assert host_path(grafana, "/etc/grafana/provisioning") == DEPLOY / "grafana" / "provisioning"
    for path in GRAFANA_DATASOURCES.glob("*.yml"):
        for source in load_yaml(path)["datasources"]:
            url = urlsplit(source["url"])
            assert url.hostname in services(), f"datasource {source['name']}: no compose service {url.hostname}"
            assert url.port in container_ports(services()[url.hostname]), f"datasource {source['name']}: port"
    for path in GRAFANA_DASHBOARD_PROVIDERS.glob("*.yml"):
        for provider in load_yaml(path)["providers"]:
            folder = host_path(grafana, provider["options"]["path"])
            assert folder is not None, f"dashboards at {provider['options']['path']} are not mounted"
            assert list(folder.glob("*.json")), f"no dashboards in {folder}"
    home = environment(grafana).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        found = host_path(grafana, home)
        assert found is not None
        assert found.is_file()


def test_images_are_pinned() -> None:
    for name, service in services().items():
        if "build" in service:
            continue
        image = service["image"]
        assert "@sha256:" in image or re.search(r":v?\d+\.\d+", image), f"{name}: pin a version: {image}"
        assert not image.endswith((":latest", ":main")), f"{name}: {image}"


def test_dependencies_wait_for_health() -> None:
    all_services = services()
    conditions = {dep: spec.get("condition") for dep, spec in all_services["plumbline"]["depends_on"].items()}
    assert conditions == {"qdrant": "service_healthy", "postgres": "service_healthy"}
    for name, service in all_services.items():
        depends = service.get("depends_on", {})
        for dep in depends if isinstance(depends, dict) else []:
            if depends[dep].get("condition") == "service_healthy":
                assert "test" in all_services[dep].get("healthcheck", {}), f"{name} waits on {dep}: no healthcheck"
    assert "pg_isready" in " ".join(all_services["postgres"]["healthcheck"]["test"])
    assert not all_services["plumbline"].get("healthcheck", {}).get("disable"), "the image's healthcheck stays"


def test_documented_exec_commands_parse() -> None:
    commands = [line.strip().removeprefix(EXEC) for line in DOCS.read_text(encoding="utf-8").splitlines()]
    commands = [c for c in commands if c.startswith("plumbline ")]
    assert any(c.startswith("plumbline keys create") for c in commands), "the docs say how to get the first key"
    for command in commands:
        argv = shlex.split(command.split(" #")[0])[1:]
        args = _parser().parse_args(argv)
        assert args.func is not None, command
