"""`plumbline tune run | promote | rollback | status` in-process on a data directory: a tiny model tuned on a labelled
set, promoted through the gate, rolled back (the service's side: tests/service/api/test_tuning.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, main
from tests.service.api.test_tuning import _ready, settings


@pytest.fixture
def data_dir(tmp_path: Path, tiny_embedding_model: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory with the tuning tests' documents, set `kb` and its baseline, served by the tiny model."""
    with TestClient(create_app(settings(tmp_path, tiny_embedding_model))) as client:
        _ready(client)
    monkeypatch.setenv("PLUMBLINE_EMBEDDING_MODEL", str(tiny_embedding_model))
    monkeypatch.setenv("PLUMBLINE_DEFAULT_MODE", "dense")
    monkeypatch.setenv("PLUMBLINE_INDEX_COPIES", "1")
    return tmp_path / "data"


def test_run_with_promote_then_status_and_rollback(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(data_dir)
    assert main(["eval", "calibrate", "--data-dir", d, "--set", "kb", "--k", "3"]) == EXIT_OK
    capsys.readouterr()
    run = ["tune", "run", "--data-dir", d, "--set", "kb", "--epochs", "10", "--learning-rate", "1e-3"]
    assert main([*run, "--batch-size", "8", "--promote"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "mined 20 examples from 20 training cases" in out
    assert "| held-out ndcg@10 | cases | served | tuned | delta | p |" in out
    assert "| all | 20 |" in out
    assert "gate on set kb: pass" in out
    assert "promoted: now serving generation" in out
    generation = out.split("promoted: now serving generation ")[1].split()[0]
    assert f'"nothing matches" threshold learned again for tuned:{generation}: ' in out

    assert main(["tune", "status", "--data-dir", d]) == EXIT_OK
    status = capsys.readouterr().out
    assert f"serving generation {generation}: model tuned:{generation}" in status
    assert "previous: base" in status
    assert main(["tune", "rollback", "--data-dir", d]) == EXIT_OK
    rolled = capsys.readouterr().out
    assert rolled.startswith("now serving generation base")
    assert '"nothing matches" threshold learned again for ' in rolled
    assert main(["tune", "status", "--data-dir", d]) == EXIT_OK
    assert f"{generation} -> base  (rollback)" in capsys.readouterr().out


def test_a_set_that_does_not_exist_is_bad_input(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "run", "--data-dir", str(data_dir), "--set", "nope"]) == EXIT_BAD_INPUT
    assert "nope" in capsys.readouterr().err
    assert main(["tune", "rollback", "--data-dir", str(data_dir)]) != EXIT_OK  # nothing to roll back to
    assert "no earlier generation" in capsys.readouterr().err
