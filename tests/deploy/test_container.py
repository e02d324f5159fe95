"""The image, built and run (issue 37): podman builds the Dockerfile on a base made from Debian packages
(deploy/docker/make-base.sh: no registry is reachable here) and runs it as the compose file and the docs do.

One container, as its own user (10001), read-only with a tmpfs at /tmp and a named volume at /data, serves the demo
handbook (`--ingest /app/demo/handbook`, auth on, a key made with `plumbline keys create` inside it): it answers
/health/ready without exporting a model (the graphs were exported at build time, and its model cache is read-only),
ingests and finds a document, passes the handbook gate (`plumbline eval run --url ... --baseline handbook` inside
it) and exports plumbline_build_info; it stops cleanly. A second container on the same volume serves the document and
accepts the key. The dependency lock is checked against pyproject.toml in test_dockerfile.py.

Skipped where podman, runc or debootstrap is missing, or podman cannot run a container (not root, a sandbox that
refuses it); a failure instead when PLUMBLINE_REQUIRE_CONTAINER is set (not "" or "0"). CONTAINERS_CONF defaults
to deploy/docker/containers.conf (runc, no ulimits: what CI's sandbox needs). The base is made once per machine
(the image `localhost/plumbline-base:bookworm`, kept); the image is built each time, from podman's layer cache where
it has one. The build time, the image's size and the start-up times are printed (`pytest -s`, or -rP).

Where pip's configuration (`pip config list`) names a find-links folder holding the locked CPU torch wheel, the
build uses it (mounted, TORCH_INDEX empty) instead of PyTorch's index; the host's CA bundle is given to pip in the
build either way (a TLS-inspecting proxy).
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.deploy.helpers import ROOT
from tests.needs import missing

pytestmark = pytest.mark.process

REQUIRED_BY = "PLUMBLINE_REQUIRE_CONTAINER"
BASE = "localhost/plumbline-base:bookworm"
IMAGE = "localhost/plumbline:test"
CONTAINERS_CONF = ROOT / "deploy" / "docker" / "containers.conf"
LOCK = ROOT / "deploy" / "docker" / "constraints.txt"
READY_SECONDS = 360.0  # the first start indexes the handbook (49 documents) on a shared 2-core machine
DOC = {
    "id": "container-test/lighthouse",
    "title": "Lighthouse keeping",
    "text": "# Lighthouse keeping\n\nThe keeper of the Quillon lighthouse polishes the Fresnel lens every dawn.",
    "tags": ["container-test"],
}


@dataclass(frozen=True)
class Podman:
    exe: str
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.exe, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(f"podman {' '.join(args[:3])} exited {result.returncode}:\n{result.stderr[-3000:]}")
        return result


@dataclass(frozen=True)
class Built:
    podman: Podman
    image: str
    base_seconds: float
    build_seconds: float
    size_bytes: int


@pytest.fixture(scope="module")
def podman() -> Podman:
    exe = shutil.which("podman")
    if exe is None:
        missing("podman is not installed (apt-get install podman runc debootstrap iptables)", REQUIRED_BY)
    for tool in ("runc", "debootstrap"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed: the container test needs podman, runc and debootstrap", REQUIRED_BY)
    if os.geteuid() != 0:
        missing("the container test runs podman as root (debootstrap and rootful networking)", REQUIRED_BY)
    env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF))}
    pod = Podman(exe, env)
    probe = pod("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False)
    if probe.returncode != 0:
        missing(f"podman does not work here: {probe.stderr.strip()[-500:]}", REQUIRED_BY)
    return pod


def _pip_config() -> dict[str, list[str]]:
    """The values of pip's configuration here (files and environment), by option name."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = re.fullmatch(r"[^.]*\.([\w-]+)='(.*)'", line.strip())
        if m:
            found.setdefault(m.group(1), []).extend(m.group(2).split())
    return found


def _build_args(tmp: Path) -> list[str]:
    """`podman build` options giving pip in the build the host's CA bundle, and the locked torch wheel from a
    find-links folder of pip's configuration here when one holds it (else PyTorch's index, the default)."""
    config = _pip_config()
    torch = next(line.split("==", 1)[1] for line in LOCK.read_text().splitlines() if line.startswith("torch=="))
    pip_conf = ["[global]"]
    options: list[str] = []
    ca = next(iter(config.get("cert", [])), None) or ssl.get_default_verify_paths().cafile
    if ca and Path(ca).is_file():
        options += ["--volume", f"{Path(ca).resolve()}:/etc/pip-host-ca.crt:ro"]
        pip_conf.append("cert = /etc/pip-host-ca.crt")
    folders = [Path(f) for f in config.get("find-links", []) if Path(f).is_dir()]
    wheels = [f for f in folders if any(f.glob(f"torch-{torch}-cp311-*.whl"))]
    if wheels:
        options += ["--volume", f"{wheels[0]}:/host-wheels:ro", "--build-arg", "TORCH_INDEX="]
        pip_conf.append("find-links = /host-wheels")
    (tmp / "pip.conf").write_text("\n".join(pip_conf) + "\n")
    return [*options, "--volume", f"{tmp / 'pip.conf'}:/etc/pip.conf:ro"]


@pytest.fixture(scope="module")
def built(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Built:
    started = time.monotonic()
    base = subprocess.run(
        [str(ROOT / "deploy" / "docker" / "make-base.sh"), BASE],
        env=podman.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if base.returncode != 0:
        pytest.fail(f"deploy/docker/make-base.sh failed:\n{base.stdout}{base.stderr[-3000:]}")
    base_seconds = time.monotonic() - started
    started = time.monotonic()
    podman(
        "build",
        "--format=docker",  # keeps the HEALTHCHECK (OCI images have none)
        "--build-arg",
        f"BASE={BASE}",
        *_build_args(tmp_path_factory.mktemp("build")),
        "--tag",
        IMAGE,
        str(ROOT),
        timeout=900,
    )
    build_seconds = time.monotonic() - started
    size = int(podman("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout)
    return Built(podman, IMAGE, base_seconds, build_seconds, size)


@pytest.fixture
def volume(podman: Podman) -> Iterator[str]:
    name = f"plumbline-test-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", name)
    try:
        yield name
    finally:
        podman("volume", "rm", "--force", name, check=False)


class Container:
    """A detached `podman run` of the image, read-only, /tmp a tmpfs, the volume at /data, port 8000 published on
    a free loopback port."""

    def __init__(self, built: Built, volume: str, *command: str) -> None:
        self.podman, self.name = built.podman, f"plumbline-test-{uuid.uuid4().hex[:8]}"
        self.podman(
            "run",
            "--detach",
            "--name",
            self.name,
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--volume",
            f"{volume}:/data",
            "--publish",
            "127.0.0.1::8000",
            built.image,
            *command,
        )
        port = self.podman("port", self.name, "8000/tcp").stdout.strip().rsplit(":", 1)[1]
        self.url = f"http://127.0.0.1:{port}"

    def logs(self) -> str:
        result = self.podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def running(self) -> bool:
        return self.podman("inspect", self.name, "--format", "{{.State.Running}}").stdout.strip() == "true"

    def wait_ready(self) -> float:
        """Seconds until /health/ready answered 200 (fails with the logs if the container stops or it never does)."""
        started = time.monotonic()
        while time.monotonic() - started < READY_SECONDS:
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=5).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            if not self.running():
                pytest.fail(f"the container stopped before it was ready:\n{self.logs()[-4000:]}")
            time.sleep(1)
        pytest.fail(f"not ready after {READY_SECONDS:.0f} s:\n{self.logs()[-4000:]}")

    def exec(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
        options = [f"--env={k}={v}" for k, v in (env or {}).items()]
        result = self.podman("exec", *options, self.name, *argv, timeout=timeout, check=False)
        assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}{result.stderr}"
        return result.stdout

    def stop(self) -> int:
        """Stop it (SIGTERM, 30 s grace), and its exit code."""
        self.podman("stop", "--time", "30", self.name, timeout=60)
        return int(self.podman("inspect", self.name, "--format", "{{.State.ExitCode}}").stdout)

    def remove(self) -> None:
        self.podman("rm", "--force", self.name, check=False)


def _serve(*extra: str) -> list[str]:
    return ["plumbline", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data", *extra]


def test_the_image_serves_searches_gates_and_keeps_its_data(
    built: Built, volume: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = Container(built, volume, *_serve("--ingest", "/app/demo/handbook"))
    try:
        first_ready = first.wait_ready()
        assert first.exec("id", "-u").strip() == "10001", "runs as the image's user"
        root = first.podman("inspect", first.name, "--format", "{{.HostConfig.ReadonlyRootfs}}").stdout.strip()
        assert root == "true", "a read-only root"
        assert first.exec("sh", "-c", "touch /data/x /tmp/x && rm /data/x /tmp/x") == "", "/data and /tmp are writable"
        ready = httpx.get(f"{first.url}/health/ready", timeout=10).json()
        assert ready["status"] == "ready"
        assert ready["documents"] == 49, ready  # the demo handbook
        # the graphs exported at build time were loaded, not exported again (the cache is read-only to this user)
        logs = first.logs()
        assert "ready: 49 documents" in logs, logs[-3000:]  # the service's INFO lines are there
        assert "exported" not in logs, logs[-3000:]  # and `exported ... to ONNX` is not among them
        models = first.exec("ls", "/opt/plumbline/models").split()
        assert len(models) == 1
        assert models[0].startswith("embedding-")

        # auth is on (the default): a key made inside the running container, as docs/deploy-compose.md says
        key = first.exec("plumbline", "keys", "create", "container-test", "--role", "admin").strip()
        assert httpx.post(f"{first.url}/search", json={"query": "refund"}, timeout=30).status_code == 401
        headers = {"X-API-Key": key}

        # the handbook gate, against the running service, before anything else is indexed
        gate = first.exec(
            "plumbline",
            "eval",
            "run",
            "--url",
            "http://127.0.0.1:8000",
            "--set",
            "handbook",
            "--baseline",
            "handbook",
            env={"PLUMBLINE_API_KEY": key},
            timeout=600,
        )
        assert "pass" in gate.lower(), gate

        ingested = httpx.post(f"{first.url}/documents", json={"documents": [DOC]}, headers=headers, timeout=120)
        assert ingested.status_code == 200, ingested.text
        assert ingested.json()["documents"] == 1
        search = {"query": "who polishes the Fresnel lens of the lighthouse", "k": 3}
        hits = httpx.post(f"{first.url}/search", json=search, headers=headers, timeout=60).json()["hits"]
        assert hits[0]["doc_id"] == DOC["id"], hits

        metrics = httpx.get(f"{first.url}/metrics", timeout=10)  # open: PLUMBLINE_METRICS_AUTH is off by default
        assert metrics.status_code == 200
        assert re.search(r'^plumbline_build_info\{.*backend="edge".*\} 1\.0$', metrics.text, re.MULTILINE)
        assert first.stop() == 0, f"a clean stop on SIGTERM:\n{first.logs()[-3000:]}"
    finally:
        first.remove()

    second = Container(built, volume, *_serve())  # the image's own command, on the same volume
    try:
        second_ready = second.wait_ready()
        assert "exported" not in second.logs()
        got = httpx.get(f"{second.url}/documents/{DOC['id']}", headers=headers, timeout=30)  # the key is kept too
        assert got.status_code == 200, got.text
        hits = httpx.post(f"{second.url}/search", json=search, headers=headers, timeout=60).json()["hits"]
        assert hits[0]["doc_id"] == DOC["id"], hits
        assert httpx.get(f"{second.url}/health/ready", timeout=10).json()["documents"] == 50
    finally:
        second.stop()
        second.remove()

    with capsys.disabled():
        print(
            f"\ncontainer: base {built.base_seconds:.0f} s (0 when it existed), build {built.build_seconds:.0f} s, "
            f"image {built.size_bytes / 1e9:.2f} GB; ready after {first_ready:.0f} s (first start, indexing the "
            f"handbook) and {second_ready:.0f} s (second start)"
        )
