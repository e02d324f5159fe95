"""`plumbline export` / `plumbline import`: the demo handbook's embedded index and its state, moved to the Qdrant
server backend and a PostgreSQL state store, answers every question of the handbook set exactly as before."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from eval.cases import parse_jsonl
from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, main
from service.errors import Conflict, InvalidRequest, PlumblineError
from service.filters import Clause, Match
from service.index.index import Index
from service.index.transfer import export, import_
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.state import StateStore, open_state
from service.stores.qdrant import QdrantStore
from tests.fakes import FlakyStore
from tests.postgres import fresh_postgres_database
from tests.service.state.test_store import report
from tests.service.stores.fake_qdrant import FakeQdrantServer

HANDBOOK_SET = Path(__file__).resolve().parents[3] / "eval" / "sets" / "handbook.jsonl"


@pytest.fixture
def state(tmp_path: Path) -> Iterator[StateStore]:
    """An embedded deployment's state: a set, a run-less incident, an audit entry."""
    s = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    s.put_set("handbook", HANDBOOK_SET.read_text())
    s.incidents.report(report())
    s.audit.append("ann", None, "documents.ingest", "demo/handbook", {"documents": 50}, None)
    yield s
    s.close()


def _answers(pipeline: SearchPipeline) -> list[list[tuple[str, float]]]:
    """The top 10 chunks (ids and fused scores) for every question of the handbook set."""
    questions = [case.question for case in parse_jsonl(HANDBOOK_SET.read_text())]
    return [[(h.chunk.chunk_id, h.score) for h in pipeline.search(q, SearchParams(k=10)).hits] for q in questions]


def test_the_handbook_moved_to_a_qdrant_server_and_postgresql_answers_the_same(
    handbook_index: Index, state: StateStore, tmp_path: Path, postgres_url: str
) -> None:
    file = tmp_path / "handbook.jsonl.gz"
    written = export(handbook_index.store, state, file)
    assert written.points == handbook_index.store.count(Clause())
    target_store = QdrantStore(QdrantClient(":memory:"), "moved")
    target_state = open_state(fresh_postgres_database(postgres_url))
    try:
        target_state.audit.append("ops", None, "deploy", "cluster", {}, None)  # the target's own entry stays
        read = import_(file, target_store, target_state)
        assert read == written
        moved = Index(target_store, handbook_index.embedder, handbook_index.chunker, *_analysis(handbook_index))
        assert moved.documents() == handbook_index.documents()
        assert moved.chunks() == handbook_index.chunks()
        before = _answers(SearchPipeline(handbook_index.store, handbook_index.embedder, handbook_index.encoder, None))
        after = _answers(SearchPipeline(target_store, moved.embedder, moved.encoder, None))
        assert len(before) == 78  # every question of the handbook set
        assert [[chunk for chunk, _ in hits] for hits in after] == [[chunk for chunk, _ in hits] for hits in before]
        scores = [score for hits in after for _, score in hits]
        assert scores == pytest.approx([score for hits in before for _, score in hits], abs=1e-4)
        assert target_state.get_set("handbook") == state.get_set("handbook")
        [incident] = target_state.incidents.search(limit=10)
        assert incident.question == "What is the refund window?"
        again, merged = target_state.incidents.report(report("A new question after the move?"))
        assert (again.id, merged) == (incident.id + 1, False)  # the id sequence moved on past the imported ids
        actions = [e.action for e in target_state.audit.page(limit=10)]
        assert sorted(actions) == ["deploy", "documents.ingest"]
        with pytest.raises(Conflict, match="already holds"):  # an import never merges
            import_(file, target_store, target_state)
    finally:
        target_store.close()
        target_state.close()


def _analysis(index: Index) -> tuple[object, object]:
    assert index.manifest is not None
    return index.manifest.tokenizer, index.manifest.bm25


def test_a_cut_short_or_foreign_file_is_refused_before_anything_is_written(
    handbook_index: Index, state: StateStore, tmp_path: Path
) -> None:
    file = tmp_path / "x.jsonl.gz"
    export(handbook_index.store, state, file)
    lines = gzip.decompress(file.read_bytes()).decode().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress("".join(lines[:-1]).encode()))
    target = QdrantStore(QdrantClient(":memory:"), "t")
    empty = open_state("sqlite://")
    with pytest.raises(InvalidRequest, match="incomplete"):
        import_(cut, target, empty)
    foreign = tmp_path / "foreign.jsonl.gz"
    foreign.write_bytes(gzip.compress(b'{"format": "something else"}\n'))
    with pytest.raises(InvalidRequest, match="not a plumbline-export file"):
        import_(foreign, target, empty)
    assert not target.client.collection_exists("t")  # refused before the collection was made
    empty.close()


@pytest.mark.engine
def test_the_commands_move_a_data_directory_to_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "vpn.md").write_text("# VPN\n\nReconnect the VPN client when error 809 shows.\n")
    data, file = tmp_path / "data", tmp_path / "out.jsonl.gz"
    assert main(["ingest", str(folder), "--data-dir", str(data)]) == EXIT_OK
    assert main(["export", str(file), "--data-dir", str(data)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["points"] == 4  # manifest, doc, head, chunk
    server = FakeQdrantServer()
    server.start()
    try:
        monkeypatch.setenv("PLUMBLINE_BACKEND", "qdrant")
        monkeypatch.setenv("PLUMBLINE_QDRANT_URL", server.url)
        monkeypatch.setenv("PLUMBLINE_STATE_URL", f"sqlite:///{tmp_path / 'cluster.db'}")
        assert main(["import", str(file), "--data-dir", str(tmp_path / "replica")]) == EXIT_OK
        assert server.local.count("plumbline").count == 4
        assert main(["import", str(file), "--data-dir", str(tmp_path / "replica")]) == EXIT_BAD_INPUT
        assert "already holds 4 points" in capsys.readouterr().err
    finally:
        server.stop()


def test_an_import_that_fails_midway_says_what_to_clean_up(
    handbook_index: Index, state: StateStore, tmp_path: Path
) -> None:
    file = tmp_path / "x.jsonl.gz"
    export(handbook_index.store, state, file)
    target = FlakyStore(QdrantStore(QdrantClient(":memory:"), "t"), fail_on_upsert=2)
    empty = open_state("sqlite://")
    with pytest.raises(PlumblineError, match=r"after writing 256 of .* points .* delete the collection"):
        import_(file, target, empty)
    assert empty.set_names() == []  # the state store is written after the points, in one transaction
    assert target.count(Clause(must=(Match("kind", "head"),))) == 0  # heads come last: no document is visible
    empty.close()
