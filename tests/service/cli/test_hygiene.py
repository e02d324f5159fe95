"""`plumbline eval distractors` and `plumbline eval run --exclude-doc` in-process: the real model and embedded store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, main

pytestmark = pytest.mark.engine

DOCS = {
    "policy/parking.md": "# Parking permits\n\nStaff parking permits cost 40 euros per month.\n",
    "policy/lockers.md": "# Gym lockers\n\nGym lockers are emptied every Friday evening.\n",
    "news/parking.md": "# Parking permit news\n\nThe parking permit team met about parking permit questions and the "
    "parking permit mailbox.\n",
}
CASES = [
    {
        "id": "p1",
        "question": "parking permit price",
        "relevant": [{"doc_id": "policy/parking", "evidence": "40 euros"}],
    },
    {"id": "p2", "question": "what does a parking permit cost", "relevant": [{"doc_id": "policy/parking"}]},
    {"id": "l1", "question": "when are gym lockers emptied", "relevant": [{"doc_id": "policy/lockers"}]},
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    data = tmp_path_factory.mktemp("data")
    assert main(["ingest", str(root), "--data-dir", str(data)]) == EXIT_OK
    return data


def test_distractors_of_a_run_then_a_what_if_without_them(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "mini.jsonl"
    cases.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    assert main(["eval", "run", "--data-dir", str(data_dir), "--set", str(cases), "--k", "1", "3", "--json"]) == EXIT_OK
    run_id = json.loads(capsys.readouterr().out)["run_id"]

    assert main(["eval", "distractors", "--data-dir", str(data_dir), "--run", run_id, "--k", "3"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "| news/parking |" in out  # took a slot in the parking cases without answering
    assert "current" in out  # its freshness

    args = ["eval", "run", "--data-dir", str(data_dir), "--set", str(cases), "--k", "1", "3"]
    assert main([*args, "--exclude-doc", "news/parking"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "what if: without news/parking" in out
    assert "precision@3" in out
    assert main([*args, "--exclude-doc", "news/parking", "--baseline", "x"]) == EXIT_BAD_INPUT
