"""The `plumbline` command end to end: real model, real embedded store, real HTTP where it says so."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval.storage import RunStore
from service.api.app import create_app
from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION, main
from service.runtime import Components
from service.settings import Settings
from service.state import open_state
from tests.fakes import FakeEmbedder
from tests.threaded import ThreadedServer

DOCS = {
    "it/vpn.md": "---\ntitle: VPN\ntags: [it]\n---\n# VPN\n\n## Errors\n\nError LC-419 means your token expired.\n",
    "hr/leave.md": "---\ntitle: Leave\n---\n# Leave\n\n## Parental\n\nParents get 16 weeks of paid leave.\n",
    "billing/refunds.md": "# Refunds\n\nAnnual plans are refundable within 30 days of purchase.\n",
}
CASES = [
    {"id": "c1", "question": "vpn token error", "relevant": [{"doc_id": "it/vpn", "evidence": "token expired"}]},
    {
        "id": "c2",
        "question": "how long is parental leave",
        "relevant": [{"doc_id": "hr/leave", "evidence": "16 weeks"}],
    },
    {"id": "c3", "question": "refund window annual plan", "relevant": [{"doc_id": "billing/refunds"}]},
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "set.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    return root


@pytest.fixture(scope="module")
def data_dir(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("data")
    assert main(["ingest", str(corpus), "--data-dir", str(data)]) == EXIT_OK
    return data


@pytest.mark.engine
def test_ingest_reports_totals_and_skips_unchanged(
    corpus: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["ingest", str(corpus), "--data-dir", str(data_dir)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"documents": 3, "chunks": 0, "unchanged": 3}


@pytest.mark.engine
def test_doctor_and_ingest_never_load_the_cross_encoder(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a rerank model that cannot be loaded: only a command that searches needs it, and that one says so
    monkeypatch.setenv("PLUMBLINE_RERANK_MODEL", str(tmp_path / "no-such-cross-encoder"))
    data = tmp_path / "data"
    assert main(["ingest", str(corpus), "--data-dir", str(data)]) == EXIT_OK
    assert main(["doctor", "--data-dir", str(data)]) == EXIT_OK
    assert capsys.readouterr().out.strip().endswith("clean")
    assert main(["eval", "run", "--data-dir", str(data), "--set", str(corpus / "set.jsonl")]) == EXIT_BAD_INPUT
    assert "no-such-cross-encoder" in capsys.readouterr().err


@pytest.mark.engine
def test_eval_exit_codes_in_process(
    corpus: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.json"
    args = ["eval", "run", "--data-dir", str(data_dir), "--set", str(corpus / "set.jsonl"), "--k", "1", "3"]
    assert main([*args, "--save-run", str(base)]) == EXIT_OK
    table = capsys.readouterr().out
    assert "hit@3" in table
    assert "-- diagnosis" in table
    assert main([*args, "--baseline", str(base), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["gate"]["verdict"] == "pass"
    assert report["metrics"]["hit@3"] == 1.0
    degraded = ["--override", 'filters={"doc_ids": ["billing/refunds"]}']
    assert main([*args, "--baseline", str(base), *degraded]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "gate: FAIL" in out
    # a plain run file carries no policy: judged by the default one, and the table says so
    assert "judged by the service's default policy: hit@3, recall@3, mrr@3, ndcg@3, stale@3; tolerance 0.02" in out
    # the gate options may only make the policy stricter: a lenient tolerance is refused before the run
    assert main([*args, "--baseline", str(base), *degraded, "--tolerance", "1"]) == EXIT_BAD_INPUT
    assert "tolerance 1 is larger than the policy's for hit@3 (0.02)" in capsys.readouterr().err
    # the runs are stored with their verdicts (the CLI used to store a run before gating it)
    state = open_state(f"sqlite:///{data_dir / 'state.db'}")
    stored = RunStore(state).summaries()
    state.close()
    assert [r.gate for r in reversed(stored)] == [None, "pass", "fail"]
    assert main([*args, "--metrics", "ndcg@9"]) == EXIT_BAD_INPUT
    assert "unknown metric(s) ['ndcg@9']" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "no-such-set"], "no labelled set named"),
        (["--set", "{set}", "--baseline", "no-such-baseline"], "no baseline named"),
        (["--set", "{set}", "--override", "mode=fuzzy"], "--override"),
        (["--set", "{set}", "--override", "nonsense"], "KEY=JSON"),
        (["--set", "{set}", "--k", "0"], "k values"),
    ],
)
@pytest.mark.engine
def test_eval_bad_input_exits_2(
    corpus: Path, data_dir: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = [e.replace("{set}", str(corpus / "set.jsonl")) for e in extra]
    assert main(["eval", "run", "--data-dir", str(data_dir), *extra]) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


@pytest.mark.engine
def test_undecodable_files_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "latin1.md").write_bytes("# Café\n\nPrix: 5 €".encode("latin-1", errors="replace"))
    assert main(["ingest", str(tmp_path), "--data-dir", str(tmp_path / "data")]) == EXIT_BAD_INPUT
    assert "utf-8" in capsys.readouterr().err


def test_argparse_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["eval", "run"])  # --set is required
    assert exc.value.code == 2


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The real app behind uvicorn on a real socket (fake embedder: this is about HTTP)."""
    app = create_app(Settings(data_dir=tmp_path / "srv"), components=Components(embedder=lambda _: FakeEmbedder()))
    app.state.runtime.warm_up()
    with ThreadedServer(app) as url:
        yield url
    app.state.runtime.close()


@pytest.mark.engine
def test_ingest_and_eval_over_http(
    server: str, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(corpus), "--url", server]) == EXIT_OK
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["chunks"] == 3
    base = tmp_path / "remote.json"
    args = ["eval", "run", "--url", server, "--set", str(corpus / "set.jsonl"), "--k", "1", "3"]
    assert main([*args, "--save-run", str(base)]) == EXIT_OK
    assert main([*args, "--baseline", str(base), "--override", 'filters={"doc_ids": ["it/vpn"]}']) == EXIT_REGRESSION
    assert (
        main(
            ["eval", "run", "--url", server.replace(server.rsplit(":", 1)[1], "1"), "--set", str(corpus / "set.jsonl")]
        )
        == EXIT_BAD_INPUT
    )


@pytest.mark.engine
def test_a_monitoring_run_over_http_is_run_by_the_service_and_gates(
    server: str, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx

    assert main(["ingest", str(corpus), "--url", server]) == EXIT_OK
    httpx.put(f"{server}/eval/sets/mini", content=(corpus / "set.jsonl").read_text()).raise_for_status()
    args = ["eval", "run", "--url", server, "--set", "mini", "--k", "1", "3", "--monitoring"]
    capsys.readouterr()
    assert main([*args, "--json"]) == EXIT_OK
    first = json.loads(capsys.readouterr().out)
    assert (first["kind"], first["status"], first["metrics"]["hit@3"]) == ("monitoring", "done", 1.0)
    assert (
        'plumbline_eval_metric{category="all",k="3",metric="hit",set="mini"} 1.0' in httpx.get(f"{server}/metrics").text
    )
    httpx.post(f"{server}/eval/baselines", json={"run_id": first["run_id"], "name": "mini"}).raise_for_status()
    httpx.delete(f"{server}/documents/hr/leave").raise_for_status()
    assert main(args) == EXIT_REGRESSION  # gated against the baseline named like the set
    out = capsys.readouterr().out
    assert "monitoring" in out
    assert "gate: fail" in out
    assert main([*args, "--override", "alpha=0"]) == EXIT_BAD_INPUT
    assert "--monitoring replays a stored set" in capsys.readouterr().err


@pytest.mark.engine
def test_a_monitoring_run_in_process_is_stored_as_one(data_dir: Path, corpus: Path) -> None:
    state = open_state(f"sqlite:///{data_dir / 'state.db'}")
    state.put_set("mini", (corpus / "set.jsonl").read_text())
    state.close()
    assert main(["eval", "run", "--data-dir", str(data_dir), "--set", "mini", "--monitoring"]) == EXIT_OK
    state = open_state(f"sqlite:///{data_dir / 'state.db'}")
    runs = RunStore(state).summaries(set_name="mini")
    audited = state.audit.page(action="eval.run")  # written with the run, as the local CLI's
    state.close()
    assert [r.kind for r in runs] == ["monitoring"]
    mine = [(e.detail["kind"], e.actor.startswith("local CLI (")) for e in audited if e.target == runs[0].run_id]
    assert mine == [("monitoring", True)]


@pytest.mark.process
def test_the_server_loads_no_http_client() -> None:
    # httpx, and the rich console it pulls in, cost about 0.1 s of a start: only the commands that call a server need it
    imports = "import sys, service.cli.main, service.api.app, service.runtime"
    code = f"{imports}; print(sorted({{'httpx', 'rich'}} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
