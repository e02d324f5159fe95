"""A full disk and a read-only disk, for real: the data directory lives on a small ext4 file system mounted
from a loop device, and the test fills it or remounts it read-only under a running server.

Needs root and a kernel that lets this machine mount loop devices; elsewhere the test is skipped with the reason
(and `tests/service/api/test_robustness.py` still checks the reserve in-process), except under
PLUMBLINE_REQUIRE_LOOP_MOUNT, which `.ci/run` sets: there it fails instead.
Before the fix an ingest with 300 KB free killed the server with SIGBUS (the engine writes through memory
maps of sparse files, and a page it cannot back kills the process): no log line, a dropped connection.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.index.loaders import iter_documents
from service.inputs import DocumentIn
from tests.needs import missing
from tests.server import ROOT, ServerProcess, plumbline

pytestmark = pytest.mark.process
SIZE_MB = 64
RESERVE_MB = 16
REQUIRED_BY = "PLUMBLINE_REQUIRE_LOOP_MOUNT"
DOC = {"id": "a", "title": "A", "text": "# A\n\nThe osprey runbook: restart the tide gauge."}
SET = '{"id": "c1", "question": "osprey", "relevant": [{"doc_id": "a"}]}\n'


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        missing("needs root and mkfs.ext4 to mount a small file system", REQUIRED_BY)
    image, mountpoint = tmp_path / "disk.img", tmp_path / "mnt"
    mountpoint.mkdir()
    with image.open("wb") as f:
        f.truncate(SIZE_MB * 2**20)
    assert run("mkfs.ext4", "-q", "-F", "-m", "0", str(image)).returncode == 0
    mounted = run("mount", "-o", "loop", str(image), str(mountpoint))
    if mounted.returncode != 0:
        missing(f"this machine does not allow mounting a loop device: {mounted.stderr.strip()}", REQUIRED_BY)
    try:
        yield mountpoint
    finally:
        run("umount", "-l", str(mountpoint))


def fill(disk: Path, leave: int) -> Path:
    """A file taking all but `leave` bytes of the disk's free space."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with filler.open("wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(0, free - leave))
    return filler


def test_a_full_disk_is_a_507_and_the_server_and_index_live_on(small_disk: Path) -> None:
    data = small_disk / "data"
    env = {"PLUMBLINE_MIN_FREE_DISK_MB": str(RESERVE_MB)}
    with ServerProcess(data, env=env) as server, server.client() as c:
        assert c.post("/documents", json={"documents": [DOC]}).status_code == 200
        filler = fill(small_disk, leave=300 * 1024)
        # the demo handbook: about 2 MB for the engine (one small document would fit in pages it already has)
        handbook = [
            DocumentIn.model_validate(vars(d) | {"tags": list(d.tags)}).model_dump(mode="json")
            for d in iter_documents(ROOT / "demo" / "handbook")
        ]
        r = c.post("/documents", json={"documents": handbook})
        assert r.status_code == 507, r.text
        assert "MB free" in r.json()["detail"]
        assert str(small_disk) not in r.json()["detail"]
        server.wait_for(r"request failed \(507\)")  # a log line, not silence
        r = c.put("/eval/sets/s", content=SET)
        assert r.status_code == 507, r.text
        assert c.get("/health/live").status_code == 200
        assert c.get("/health/ready").json() == {"status": "ready", "detail": None, "documents": 1, "chunks": 1}
        assert c.get("/documents/a").json()["text"] == DOC["text"]
        assert [h["doc_id"] for h in c.post("/search", json={"query": "osprey"}).json()["hits"]] == ["a"]
        assert c.get(f"/documents/{handbook[0]['id']}").status_code == 404
        filler.unlink()
        assert c.post("/documents", json={"documents": handbook[:5]}).status_code == 200
        assert c.put("/eval/sets/s", content=SET).status_code == 200
    assert server.returncode == -9  # killed by the fixture's exit, not by the disk
    result = plumbline("doctor", "--data-dir", str(data))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_state_store_on_a_full_disk_is_a_507_too(small_disk: Path, tmp_path: Path) -> None:
    """The state store on its own full disk (PLUMBLINE_STATE_URL): past the reserve check, which watches the data
    directory's disk, SQLite's write fails ("database or disk is full"), and that is a 507 as well, not a 500."""
    env = {"PLUMBLINE_STATE_URL": f"sqlite:///{small_disk / 'state.db'}"}
    with ServerProcess(tmp_path / "data", env=env) as server, server.client() as c:
        fill(small_disk, leave=64 * 1024)
        for size in (4096, 1):  # take the last blocks too (fallocate leaves what it cannot align)
            with (small_disk / "crumbs").open("ab", buffering=0) as f:
                try:
                    while True:
                        f.write(b"x" * size)
                except OSError:
                    pass
        r = c.put("/eval/sets/s", content=SET)
        assert r.status_code == 507, r.text
        assert r.json()["detail"].startswith("the disk holding the state store is full")
        assert c.get("/eval/sets/s").status_code == 404
        assert c.get("/health/live").status_code == 200
        posted = c.post("/eval/incidents", json={"question": "q", "doc_id": "nope", "reporter": "ann"})
        assert posted.status_code == 422  # validation comes first; reads still work


def test_a_read_only_disk_is_a_503_that_says_so(small_disk: Path) -> None:
    data = small_disk / "data"
    env = {"PLUMBLINE_MIN_FREE_DISK_MB": str(RESERVE_MB)}
    with ServerProcess(data, env=env) as server, server.client() as c:
        assert c.post("/documents", json={"documents": [DOC]}).status_code == 200
    assert run("mount", "-o", "remount,ro", str(small_disk)).returncode == 0
    server = ServerProcess(data, env=env).start(wait_ready=False)
    try:
        server.wait_for(r"Uvicorn running on http://[\d.]+:(\d+)")
        server.wait_for("cannot use the data directory")
        with server.client() as c:
            assert c.get("/health/live").status_code == 200
            ready = c.get("/health/ready")
            assert ready.status_code == 503
            detail = ready.json()["detail"]
            assert "Read-only file system" in detail
            assert "another Plumbline process" not in detail
            assert str(small_disk) not in detail
            for r in (c.post("/search", json={"query": "osprey"}), c.put("/eval/sets/s", content=SET)):
                assert r.status_code == 503
                assert r.json()["detail"] == detail
    finally:
        server.kill()
