"""One process per data directory (`service.infra.datadir`): a refused process exits non-zero and touches nothing.

Before the lock, `plumbline eval run --data-dir` on a served directory truncated the engine's journal and
every later write of the server failed; a second `plumbline serve` stayed up and wrote labelled sets into
the first one's directory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from service.errors import DataDirUnavailable
from service.infra.datadir import DataDirLock
from tests.server import ROOT, ServerProcess, plumbline


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_second_lock_is_refused_until_the_first_is_released(tmp_path: Path) -> None:
    first, second = DataDirLock(tmp_path), DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(DataDirUnavailable, match=r"in use by another Plumbline process \(pid \d+\)"):
        second.acquire()
    first.release()
    second.acquire()
    assert second.held
    second.release()


def test_a_data_directory_that_cannot_be_created_says_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(DataDirUnavailable, match="it must be a writable directory"):
        DataDirLock(tmp_path / "file" / "data").acquire()


@pytest.mark.process
def test_other_processes_are_refused_and_touch_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ServerProcess(data) as server, server.client() as c:
        doc = {"id": "a", "title": "A", "text": "# A\n\nThe heron protocol."}
        assert c.post("/documents", json={"documents": [doc]}).status_code == 200
        before = snapshot(data)
        assert any(name.startswith("index/") for name in before)
        attempts = [
            ("eval", "run", "--data-dir", str(data), "--set", "handbook"),
            ("ingest", str(ROOT / "demo" / "handbook"), "--data-dir", str(data)),
            ("doctor", "--data-dir", str(data), "--repair"),
        ]
        for args in attempts:
            result = plumbline(*args)
            assert result.returncode == 2, (args, result.stderr)
            assert "is in use by another Plumbline process" in result.stderr
        second = ServerProcess(data).start(wait_ready=False)
        try:
            assert second.wait() == 2
        finally:
            second.kill()  # a no-op once it has exited; a server that stayed up must not outlive the test
        assert "is in use by another Plumbline process" in second.log
        assert not any("Uvicorn running" in line for line in second.lines)
        assert snapshot(data) == before
        # and the first server's writes still work
        assert c.post("/documents", json={"documents": [{**doc, "id": "b"}]}).status_code == 200
        line = '{"id": "c1", "question": "heron", "relevant": [{"doc_id": "a"}]}\n'
        assert c.put("/eval/sets/mine", content=line).status_code == 200
        assert c.get("/health/ready").json()["documents"] == 2
