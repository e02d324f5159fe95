"""`plumbline eval synthesize | review | sweep | answers` end to end: in-process on a data directory (the real model
and the embedded store), and against a running service over HTTP; the LLM is a fake OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.api.app import create_app
from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, main
from service.runtime import Components
from service.settings import Settings
from tests.fake_llm import brain
from tests.fakes import FakeEmbedder
from tests.service.infra.openai_fake import FakeOpenAI
from tests.threaded import ThreadedServer

pytestmark = pytest.mark.engine

DOCS = {
    "hr/leave.md": "# Annual leave\n\nStaff in Portugal receive 25 working days of paid leave each calendar year.\n",
    "it/vpn.md": "# Errors\n\nThe VPN client reports error 809 when a hotel network blocks UDP port 500.\n",
}
CASES = [
    {"id": "c1", "question": "paid leave days Portugal", "relevant": [{"doc_id": "hr/leave", "evidence": "25"}]},
    {"id": "c2", "question": "vpn error 809", "relevant": [{"doc_id": "it/vpn"}], "split": "tune"},
    {"id": "c3", "question": "hotel network blocks vpn", "relevant": [{"doc_id": "it/vpn"}], "split": "test"},
    {"id": "c4", "question": "annual leave Portugal", "relevant": [{"doc_id": "hr/leave"}], "split": "test"},
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def data_dir(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("data")
    assert main(["ingest", str(corpus), "--data-dir", str(data)]) == EXIT_OK
    return data


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=brain) as fake:
        monkeypatch.setenv("PLUMBLINE_LLM_BASE_URL", fake.base_url)
        monkeypatch.setenv("PLUMBLINE_LLM_MODEL", "fake-model")
        yield fake


@pytest.mark.usefixtures("llm")
def test_synthesize_then_review_in_process(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "synthesize", "--data-dir", str(data_dir), "--set", "day0", "--passages", "5"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "set day0: 4 questions drafted from 2 chunks by fake-model (synth-v1)" in out
    assert "discarded: copied 2, pronoun_led 2" in out
    assert "plumbline eval review --set day0 --accept-all" in out
    assert main(["eval", "review", "--data-dir", str(data_dir), "--set", "day0", "--accept-all"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "2 case(s) accepted into set day0"
    assert main(["eval", "run", "--data-dir", str(data_dir), "--set", "day0", "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert [(g["name"], g["cases"]) for g in report["by_origin"]] == [("synthetic", 2)]


def test_synthesize_without_an_llm_says_what_to_set(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "synthesize", "--data-dir", str(data_dir), "--set", "day0"]) == EXIT_BAD_INPUT
    assert "PLUMBLINE_LLM_BASE_URL" in capsys.readouterr().err


def test_a_sweep_of_a_set_file_prints_its_table_and_recommendation(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "mini.jsonl"
    cases.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    space = '{"mode": ["keyword", "hybrid"], "chunk_size": [300, 1000]}'
    args = ["eval", "sweep", "--data-dir", str(data_dir), "--set", str(cases), "--space", space, "--metric", "mrr"]
    assert main(args) == EXIT_OK
    out = capsys.readouterr().out
    assert "| ★ ◀ winner |" in out
    assert "tune 2, test 2 case(s)" in out  # c2, c3, c4 carry their split; c1 is split by the seeded hash
    assert not list((data_dir / "scratch").glob("*/*"))  # the temporary index is gone
    assert main(["eval", "sweep", "--data-dir", str(data_dir), "--set", str(cases), "--space", "[1]"]) == EXIT_BAD_INPUT


@pytest.mark.usefixtures("llm")
def test_answers_from_a_file_in_process(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = tmp_path / "answers.jsonl"
    item = {"id": "a1", "question": "How many leave days?", "answer": "25.", "contexts": ["25 working days"]}
    items.write_text(json.dumps(item) + "\n")
    args = ["eval", "answers", str(items), "--data-dir", str(data_dir), "--set", "day0", "--samples", "2"]
    assert main(args) == EXIT_OK
    out = capsys.readouterr().out
    assert "1 answers graded (0 ungraded) by fake-model (judge-v1), 2 samples each" in out
    assert "| all | 0.25 | 0.75 | 0.75 |" in out  # completeness, correctness, faithfulness


def test_synthesize_over_http_follows_the_service(
    tmp_path: Path, llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data_dir=tmp_path / "srv", llm_base_url=llm.base_url, llm_model="fake-model", index_copies=1)
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    app.state.runtime.warm_up()
    try:
        with ThreadedServer(app) as url:
            docs = [{"id": "hr/leave", "title": "Leave", "text": DOCS["hr/leave.md"]}]
            app.state.runtime.index.ingest([app_document(d) for d in docs])
            args = ["eval", "synthesize", "--url", url, "--set", "day0", "--passages", "1", "--accept-all"]
            assert main(args) == EXIT_OK
            assert "accepted 1" in capsys.readouterr().out
    finally:
        app.state.runtime.close()


def app_document(body: dict[str, str]) -> object:
    from service.domain import Document

    return Document(id=body["id"], title=body["title"], text=body["text"])
