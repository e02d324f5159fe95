"""A data directory written by the file layout (before the state store) is imported on first start, once."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from eval.cases import dump_jsonl, parse_jsonl
from eval.errors import EvalError
from eval.gate import compare
from eval.runner import Run
from eval.storage import RunStore, SetStore, dump_run
from service.api.app import create_app
from service.infra.files import write_atomic
from service.runtime import Components
from service.settings import Settings
from service.state import open_state
from service.state.legacy import MARKER, import_file_layout
from tests.eval.helpers import doc_case, docs, run_with
from tests.fakes import FakeEmbedder

SET = '{"id": "a", "question": "refund window", "relevant": [{"doc_id": "billing/refunds"}], "category": "billing"}\n'


def old_run(run_id: str) -> Run:
    run = run_with([doc_case("a", "billing/refunds", category="billing")], {"a": docs("billing/refunds")})
    return dataclasses.replace(run, run_id=run_id, set_name="mine", gate=compare(run, run))


def write_file_layout(data: Path) -> list[Run]:
    """What a data directory looked like: eval/{sets,runs,baselines,baselines/history}, as the old stores wrote it."""
    runs = [old_run("20261101T100000-aaaaaa"), old_run("20261102T100000-bbbbbb")]
    write_atomic(data / "eval" / "sets" / "mine.jsonl", SET)
    for run in runs:
        write_atomic(data / "eval" / "runs" / f"{run.run_id}.json", dump_run(run))
    write_atomic(data / "eval" / "baselines" / "main.json", dump_run(runs[1]))
    write_atomic(data / "eval" / "baselines" / "history" / f"main.{runs[0].run_id}.json", dump_run(runs[0]))
    return runs


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_everything_is_imported_once_and_the_files_are_kept(tmp_path: Path) -> None:
    runs = write_file_layout(tmp_path)
    before = files(tmp_path / "eval")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    state = open_state(url, tmp_path / "eval")
    assert json.loads(state.get_meta(MARKER) or "{}")["runs"] == 2
    sets, stored = SetStore(state, seeds=None), RunStore(state, seeds=None)
    assert sets.get("mine") == parse_jsonl(SET)
    assert [r.run_id for r in stored.summaries()] == [runs[1].run_id, runs[0].run_id]
    assert stored.get(runs[0].run_id) == runs[0]
    assert stored.summaries()[0].gate == "pass"
    assert stored.baseline("main") == runs[1]
    assert [run_id for run_id, _ in state.baseline_history("main")] == [runs[0].run_id]
    assert files(tmp_path / "eval") == before
    # a later start does not import again, even files added since
    write_atomic(tmp_path / "eval" / "sets" / "late.jsonl", SET)
    assert import_file_layout(state, tmp_path / "eval") is None
    assert state.set_names() == ["mine"]
    state.close()


def test_rows_already_in_the_store_win(tmp_path: Path) -> None:
    write_file_layout(tmp_path)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    state = open_state(url)
    state.put_set("mine", dump_jsonl(parse_jsonl(SET.replace("refund window", "newer question"))))
    assert import_file_layout(state, tmp_path / "eval") == {"sets": 0, "runs": 2, "baselines": 1, "history": 1}
    assert "newer question" in (state.get_set("mine") or "")
    state.close()


def test_an_unreadable_file_stops_the_import_and_imports_nothing(tmp_path: Path) -> None:
    write_file_layout(tmp_path)
    (tmp_path / "eval" / "runs" / "20261103T100000-cccccc.json").write_text("{broken")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with pytest.raises(EvalError, match=r"20261103T100000-cccccc\.json"):
        open_state(url, tmp_path / "eval")
    state = open_state(url)
    assert (state.set_names(), state.get_meta(MARKER)) == ([], None)
    state.close()


@pytest.mark.engine
def test_the_service_starts_on_an_old_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    runs = write_file_layout(data)
    app = create_app(Settings(data_dir=data), components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        assert [r["run_id"] for r in c.get("/eval/runs").json()] == [runs[1].run_id, runs[0].run_id]
        assert c.get(f"/eval/runs/{runs[0].run_id}").json()["gate"]["verdict"] == "pass"
        assert "mine" in [s["name"] for s in c.get("/eval/sets").json()]
        # imported runs are manual runs: only a monitoring run moves the gauges
        assert "plumbline_eval_gate_passed{" not in c.get("/metrics").text
    assert (data / "state.db").is_file()
