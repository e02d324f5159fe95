"""Index generations: which one is served and what a rollback returns to (`serving.json`), pruning, and `sync`, which
copies what changed in the live index into another one (a tune's generation) before it is served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.domain import Document
from service.errors import Conflict, NotReady
from service.index.generations import BASE, Generations, entries, sync
from service.index.index import Index
from service.stores.edge import EdgeStore
from tests.service.index.test_index import OTHER, V1, V2, make_index

LEAVE = Document(id="hr/leave", title="Leave", text="# Leave\n\nTwenty-five days a year.\n")


def test_the_base_is_served_until_a_switch_and_a_switch_back_is_recorded(tmp_path: Path) -> None:
    gens = Generations(tmp_path, "minilm")
    assert gens.serving() == gens.base
    assert gens.base.model == "minilm"
    assert gens.previous() is None
    tuned = gens.new("t1", tune="job-1")
    assert (tuned.model, tuned.index_dir) == ("tuned:t1", "generations/t1/index")
    assert gens.model_dir(tuned.model) == tmp_path / "models" / "tuned" / "t1"
    assert gens.model_dir("minilm") is None
    gens.switch(tuned, reason="promoted")
    assert gens.serving() == tuned
    assert gens.previous() == gens.base
    gens.switch(gens.base, reason="rollback")
    assert gens.serving().name == BASE
    assert gens.previous() == tuned
    assert [(h["from"], h["to"], h["reason"]) for h in gens.history()] == [
        (BASE, "t1", "promoted"),
        ("t1", BASE, "rollback"),
    ]
    # the base is always the configured model, whatever it was when the choice was recorded
    assert Generations(tmp_path, "bge-small").serving().model == "bge-small"
    assert json.loads((tmp_path / "serving.json").read_text())["serving"]["model"] == "minilm"


def test_a_served_tuned_generation_whose_model_is_gone_is_refused(tmp_path: Path) -> None:
    gens = Generations(tmp_path, "minilm")
    tuned = gens.new("t1", tune=None)
    with pytest.raises(Conflict, match="roll back"):
        gens.check_served(tuned)
    folder = gens.model_dir(tuned.model)
    assert folder is not None
    folder.mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    gens.check_served(tuned)
    gens.check_served(gens.base)  # the configured model is not a folder of the data directory


def test_prune_keeps_the_served_the_previous_and_those_asked(tmp_path: Path) -> None:
    gens = Generations(tmp_path, "minilm")
    for name in ("t1", "t2", "t3", "t4"):
        (tmp_path / "generations" / name / "index").mkdir(parents=True)
        (tmp_path / "models" / "tuned" / name).mkdir(parents=True)
    gens.switch(gens.new("t1", None), reason="promoted")
    gens.switch(gens.new("t2", None), reason="promoted")
    assert gens.prune({"t4"}) == ["t3"]
    assert sorted(p.name for p in (tmp_path / "generations").iterdir()) == ["t1", "t2", "t4"]
    assert sorted(p.name for p in (tmp_path / "models" / "tuned").iterdir()) == ["t1", "t2", "t4"]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Index, Index]]:
    live, other = EdgeStore(tmp_path / "live"), EdgeStore(tmp_path / "other")
    yield make_index(live), make_index(other)
    live.close()
    other.close()


def test_sync_copies_what_changed_and_deletes_what_is_gone(pair: tuple[Index, Index]) -> None:
    live, target = pair
    live.ingest([V1, OTHER])
    known, counts = sync(live, target)
    assert counts == {"checked": 2, "written": 2, "deleted": 0}
    assert sorted(e.id for e in entries(target)) == ["it/vpn", "policy/pw"]
    # since then: one changed, one added, one deleted; only those are checked
    live.ingest([V2, LEAVE])
    live.delete("it/vpn")
    known, counts = sync(live, target, known)
    assert counts == {"checked": 2, "written": 2, "deleted": 1}
    assert target.get("policy/pw").document == V2
    assert sorted(e.id for e in entries(target)) == ["hr/leave", "policy/pw"]
    # nothing changed: nothing checked; every document checked without `known`, none written again
    assert sync(live, target, known)[1] == {"checked": 0, "written": 0, "deleted": 0}
    assert sync(live, target)[1] == {"checked": 2, "written": 0, "deleted": 0}


def test_a_retired_index_refuses_writes_and_held_holds_them(pair: tuple[Index, Index]) -> None:
    import threading

    live, _ = pair
    live.ingest([V1])
    started, outcome = threading.Event(), []

    def write() -> None:
        started.set()
        try:
            live.ingest([OTHER])
            outcome.append("written")
        except NotReady as e:
            outcome.append(str(e))

    with live.held():
        writer = threading.Thread(target=write)
        writer.start()
        assert started.wait(5)
        writer.join(0.3)
        assert writer.is_alive()  # waiting for the lock
        live.retire("another generation is served: send it again")
    writer.join(5)
    assert outcome == ["another generation is served: send it again"]
    with pytest.raises(NotReady):
        live.delete("policy/pw")
    assert sorted(e.id for e in entries(live)) == ["policy/pw"]
