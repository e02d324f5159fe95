"""`plumbline eval calibrate` in-process (the real model and embedded store learn a threshold from a stored set) and
against a running service (`--url`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.api.app import create_app
from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, main
from service.domain import Document
from service.runtime import Components
from service.settings import Settings
from service.state import open_state
from tests.fakes import FakeEmbedder
from tests.threaded import ThreadedServer

pytestmark = pytest.mark.engine

DOCS = {
    "policy/parking.md": "# Parking permits\n\nStaff parking permits cost 40 euros per month.\n",
    "policy/lockers.md": "# Gym lockers\n\nGym lockers are emptied every Friday evening.\n",
    "policy/bikes.md": "# Bike storage\n\nBike storage is in the basement behind gate B.\n",
    "policy/canteen.md": "# Canteen\n\nThe canteen menu changes every Monday.\n",
}
CASES = [
    ("p", "how much is a parking permit", "policy/parking", "tune"),
    ("l", "when do they clear out the gym lockers", "policy/lockers", "tune"),
    ("b", "where can I leave my bicycle", "policy/bikes", "test"),
    ("c", "when is there a new canteen menu", "policy/canteen", "test"),
]


def test_calibrate_learns_stores_and_reports_a_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, data = tmp_path / "corpus", tmp_path / "data"
    for name, text in DOCS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text(text)
    assert main(["ingest", str(corpus), "--data-dir", str(data)]) == EXIT_OK
    state = open_state(f"sqlite:///{data / 'state.db'}")
    lines = [
        {"id": i, "question": q, "relevant": [{"doc_id": d}], "category": "policy", "split": split}
        for i, q, d, split in CASES
    ]
    state.put_set("mini", "".join(json.dumps(x) + "\n" for x in lines))
    state.close()
    capsys.readouterr()

    assert main(["eval", "calibrate", "--data-dir", str(data), "--set", "mini", "--k", "1"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "nothing matches below dense_top = " in out
    assert "packaged:all-MiniLM-L6-v2" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows["tune"][1:3] == ["4", "2"]  # 2 cases as asked (each answered at k=1) + 2 without their documents
    assert rows["test"][1:3] == ["4", "2"]

    state = open_state(f"sqlite:///{data / 'state.db'}")
    stored = json.loads(state.get_meta("no_answer_calibration") or "{}")
    state.close()
    assert (stored["sets"], stored["k"], stored["tune"]["recall"]) == (["mini"], 1, 1.0)

    assert main(["eval", "calibrate", "--data-dir", str(data), "--set", "nope"]) == EXIT_BAD_INPUT


def test_calibrate_over_http_and_what_a_refusal_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(data_dir=tmp_path / "srv", index_copies=1, auth="off")
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    app.state.runtime.warm_up()
    try:
        with ThreadedServer(app) as url:
            docs = [
                Document(id="a", title="a", text="# Kayak\n\nrental"),
                Document(id="b", title="b", text="# Kiln\n\nfired"),
            ]
            app.state.runtime.index.ingest(docs)
            lines = [
                {"id": f"{d}{split}", "question": q, "relevant": [{"doc_id": d}], "split": split}
                for d, q in (("a", "kayak rental"), ("b", "kiln fired"))
                for split in ("tune", "test")
            ]
            app.state.runtime.state.put_set("two", "".join(json.dumps(x) + "\n" for x in lines))
            assert main(["eval", "calibrate", "--url", url, "--set", "two", "--k", "1", "--json"]) == EXIT_OK
            record = json.loads(capsys.readouterr().out)
            assert (record["model"], record["cases"]) == ("fake-bow", {"tune": 2, "test": 2})
            assert main(["eval", "calibrate", "--url", url, "--set", "nope"]) == EXIT_BAD_INPUT
            assert f"{url} answered 404" in capsys.readouterr().err
    finally:
        app.state.runtime.close()
