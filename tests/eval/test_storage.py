"""Labelled sets and run records: formats, atomic file writes, names, and the stores over `Records`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eval.cases import Label, dump_jsonl
from eval.errors import AlreadyExists, EvalError, ReadOnly, UnknownName
from eval.gate import default_metrics
from eval.runner import Run
from eval.storage import (
    SNIPPET,
    SNIPPETS,
    RunStore,
    SetStore,
    check_name,
    dump_run,
    load_baseline,
    load_run,
    load_set,
    run_digest,
    run_from_json,
    run_to_json,
)
from eval.verdict import GatePolicy, GateResult
from tests.fakes import FakeRecords

from .helpers import case, doc_case, docs, res, run_with

SET_TEXT = (
    '{"id": "a", "question": "refund window?", "relevant": [{"doc_id": "billing/refunds", "evidence": "30 days"}]}\n'
    '{"id": "b", "question": "vpn LC-419", "relevant": [{"chunk_id": "it/vpn#2", "grade": 2}], "category": "it"}\n'
)


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["handbook", "v1.2", "a_b-c", "X" * 100])
def test_valid_names(name: str) -> None:
    assert check_name(name, "set") == name


@pytest.mark.parametrize("name", ["", "../etc/passwd", "a/b", ".hidden", "a..b", "-x", "a b", "X" * 101, "é"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(EvalError, match="set name"):
        check_name(name, "set")


# -- SetStore ------------------------------------------------------------------------------------


def test_set_put_then_get() -> None:
    records = FakeRecords()
    store = SetStore(records, seeds=None)
    cases = store.put("mine", SET_TEXT)
    assert [c.id for c in cases] == ["a", "b"]
    assert store.get("mine") == cases
    assert store.text("mine") == records.sets["mine"] == dump_jsonl(cases)
    assert store.names() == ["mine"]


def test_set_put_rejects_a_malformed_upload_and_keeps_the_old_one() -> None:
    records = FakeRecords()
    store = SetStore(records, seeds=None)
    store.put("mine", SET_TEXT)
    bad = SET_TEXT + '{"id": "c", "question": "?", "relevant": [{"grade": 1}]}\nnot json\n'
    with pytest.raises(EvalError, match=r"2 bad line\(s\): mine:3: .*; mine:4: not valid JSON"):
        store.put("mine", bad)
    assert [c.id for c in store.get("mine")] == ["a", "b"]


def test_set_put_rejects_a_bad_name_before_writing() -> None:
    records = FakeRecords()
    with pytest.raises(EvalError, match="name"):
        SetStore(records, seeds=None).put("../escape", SET_TEXT)
    assert records.sets == {}


def test_set_store_falls_back_to_the_packaged_seeds() -> None:
    store = SetStore(FakeRecords())
    assert "handbook" in store.names()
    assert len(store.get("handbook")) >= 60
    assert store.source("handbook") == "packaged"
    # a packaged set is read-only: only a deliberate shadow replaces it, and says so
    with pytest.raises(ReadOnly, match="ships with Plumbline and is read-only"):
        store.put("handbook", SET_TEXT)
    assert len(store.get("handbook")) >= 60
    store.put("handbook", SET_TEXT, shadow=True)
    assert [c.id for c in store.get("handbook")] == ["a", "b"]
    assert store.names().count("handbook") == 1
    assert store.source("handbook") == "stored, shadowing packaged"


def test_seeds_alone_are_read_only() -> None:
    store = SetStore(None)
    assert len(store.get("handbook")) >= 60
    with pytest.raises(EvalError, match="read-only"):
        store.put("handbook", SET_TEXT)


def test_unknown_set() -> None:
    store = SetStore(FakeRecords(), seeds=None)
    store.put("known", SET_TEXT)
    with pytest.raises(UnknownName, match="no labelled set named 'other'; known: known"):
        store.get("other")
    with pytest.raises(LookupError):
        store.text("other")
    assert SetStore(FakeRecords(), seeds=None).names() == []


def test_load_set_by_path_or_name(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    path.write_text(SET_TEXT, encoding="utf-8")
    name, cases = load_set(str(path))
    assert (name, [c.id for c in cases]) == ("custom", ["a", "b"])
    name, cases = load_set("handbook")
    assert name == "handbook"
    assert len(cases) >= 60
    with pytest.raises(UnknownName):
        load_set("no-such-set")


# -- runs ----------------------------------------------------------------------------------------


def sample_run(texts: str = "the answer", n: int = 3) -> Run:
    cases = [
        case("a", Label(doc_id="x", evidence="answer"), Label(chunk_id="y#1"), category="billing", source="log"),
        doc_case("b", "z"),
    ]
    ranking = [res(f"x#{i}", f"{texts} {i}", score=1.0 / (i + 1)) for i in range(n)]
    return run_with(cases, {"a": ranking, "b": docs("z")}, ks=(1, 5, 10))


def test_run_json_round_trip() -> None:
    run = dataclasses.replace(
        sample_run(), params={"mode": "hybrid", "alpha": 0.5}, incident_outcomes={"incident-1": "regressed"}
    )
    again = run_from_json(json.loads(dump_run(run)))
    assert again == run


def test_run_json_format() -> None:
    obj = run_to_json(sample_run())
    assert set(obj) == {
        "run_id", "set", "set_fingerprint", "created_at", "unit", "k", "params", "gate", "kind", "incident_outcomes",
        "cases",
    }  # fmt: skip
    assert obj["gate"] is None  # an ungated run
    gated = dataclasses.replace(sample_run(), gate=GateResult(False, ("x",), (), (), 0, ()))
    assert run_to_json(gated)["gate"]["verdict"] == "fail"
    assert run_from_json(run_to_json(gated)).gate == gated.gate
    assert obj["k"] == [1, 5, 10]
    first = obj["cases"][0]
    assert set(first) == {
        "id", "question", "category", "source", "labels", "metrics", "first_relevant_rank", "missed", "retrieved",
        "relevant_ranks",
    }  # fmt: skip
    assert first["missed"] == [{"chunk_id": "y#1"}]
    again = run_from_json(obj).cases[0]
    assert again.relevant == sample_run().cases[0].relevant  # which ranks answered, kept exactly
    assert again.relevant is not None
    assert any(again.relevant)
    old = {**first}
    del old["relevant_ranks"]  # a run stored before the ranks were kept reads as not knowing them
    assert run_from_json({**obj, "cases": [old]}).cases[0].relevant is None
    assert first["retrieved"][0] == {"chunk_id": "x#0", "doc_id": "x", "score": 1.0, "text": "the answer 0"}
    assert "hit@10" in first["metrics"]


def test_run_records_keep_the_ranking_but_only_snippets_of_text() -> None:
    long = "w" * (SNIPPET + 50)
    run = sample_run(texts=long, n=SNIPPETS + 5)
    again = run_from_json(json.loads(dump_run(run)))
    before, after = run.cases[0].retrieved, again.cases[0].retrieved
    assert [(r.chunk_id, r.doc_id, r.score) for r in after] == [(r.chunk_id, r.doc_id, r.score) for r in before]
    assert all(
        r.text == b.text[:SNIPPET] and len(r.text) == SNIPPET for r, b in zip(after[:SNIPPETS], before, strict=False)
    )
    assert all(r.text == "" for r in after[SNIPPETS:])
    assert again.cases[0].metrics == run.cases[0].metrics  # metrics are stored, not recomputed from snippets
    assert again != run


def test_run_store_save_get_list() -> None:
    store = RunStore(FakeRecords(), seeds=None)
    assert store.summaries() == []
    older = dataclasses.replace(sample_run(), run_id="20261130T100000-aaaaaa", kind="monitoring")
    newer = dataclasses.replace(sample_run(), run_id="20261130T110000-bbbbbb", set_name="other", kind="monitoring")
    experiment = dataclasses.replace(sample_run(), run_id="20261130T120000-cccccc", kind="experiment")
    store.save(older)
    store.save(newer)
    store.save(experiment)
    assert store.get(older.run_id) == older
    listed = store.summaries()
    assert [r.run_id for r in listed] == [experiment.run_id, newer.run_id, older.run_id]
    assert (listed[2].set_name, listed[2].cases, listed[2].unit, listed[2].gate) == ("test", 2, "chunk", None)
    assert listed[2].metrics["hit@1"] == 1.0
    assert [r.run_id for r in store.summaries(set_name="test")] == [experiment.run_id, older.run_id]
    assert [r.run_id for r in store.summaries(kind="monitoring")] == [newer.run_id, older.run_id]
    # the gauges' source: the newest monitoring run of each set, never the newer experiment
    assert store.latest_ids("monitoring") == {"test": older.run_id, "other": newer.run_id}
    assert store.latest_ids("experiment") == {"test": experiment.run_id}
    with pytest.raises(UnknownName, match="no run with id"):
        store.get("20990101T000000-ffffff")
    with pytest.raises(EvalError, match="run name"):
        store.get("../baselines/x")


def test_promote_and_baseline_by_name_or_path(tmp_path: Path) -> None:
    store = RunStore(FakeRecords(), seeds=None)
    run = sample_run()
    store.save(run)
    stored, replaced = store.promote(run.run_id, "main", GatePolicy(tolerance=0.01))
    assert replaced is None
    assert store.baseline("main") == run
    # stored with its policy, the metrics named (the defaults at the run's largest k), and hashed with it
    assert stored == store.located("main")
    assert stored.policy == GatePolicy(tolerance=0.01, metrics=default_metrics(run))
    assert stored.sha256 != run_digest(run)
    path = tmp_path / "main.json"
    path.write_text(dump_run(run), encoding="utf-8")
    with pytest.raises(EvalError, match="baseline name"):  # the API names baselines; only the CLI reads paths
        store.baseline(str(path))
    from_file = load_baseline(str(path))
    assert (from_file.run, from_file.policy, from_file.source) == (run, None, "file")  # a plain run file: no policy
    assert from_file.sha256 == run_digest(run)  # a baseline without a policy hashes as its run did before policies
    assert load_baseline("main", store) == stored
    with pytest.raises(UnknownName, match="no baseline named 'other'"):
        store.baseline("other")
    with pytest.raises(UnknownName):
        store.promote("20990101T000000-ffffff", "main", GatePolicy())
    with pytest.raises(EvalError, match="baseline name"):
        store.promote(run.run_id, "../main", GatePolicy())
    with pytest.raises(EvalError, match="unknown metric"):  # a policy gating what the run does not compute
        store.promote(run.run_id, "other", GatePolicy(metrics=("hit@3",)))


def test_baselines_fall_back_to_the_packaged_seeds(tmp_path: Path) -> None:
    shipped = dataclasses.replace(sample_run(), run_id="shipped")
    (tmp_path / "main.json").write_text(dump_run(shipped), encoding="utf-8")
    store = RunStore(FakeRecords(), seeds=tmp_path)
    assert store.baseline("main").run_id == "shipped"
    local = dataclasses.replace(sample_run(), run_id="local")
    store.save(local)
    assert store.located("main").source == "packaged"
    for replace in (False, True):  # a packaged baseline is read-only, replace or not
        with pytest.raises(ReadOnly, match="baseline 'main' ships with Plumbline and is read-only"):
            store.promote("local", "main", GatePolicy(), replace=replace)
    assert store.baseline("main").run_id == "shipped"
    with pytest.raises(AlreadyExists, match="baseline 'main' exists \\(run shipped\\); send replace: true"):
        store.promote("local", "main", GatePolicy(), shadow=True)  # shadowing a packaged baseline replaces it too
    assert store.promote("local", "main", GatePolicy(), replace=True, shadow=True)[1] == "shipped"
    assert store.baseline("main").run_id == "local"
    assert store.located("main").source == "stored, shadowing packaged"
    assert (tmp_path / "main.json").read_text(encoding="utf-8") == dump_run(shipped)  # the seed is untouched


def test_replacing_a_baseline_needs_asking_and_keeps_the_old_one() -> None:
    records = FakeRecords()
    store = RunStore(records, seeds=None)
    first, second = sample_run(), dataclasses.replace(sample_run(), run_id="second")
    store.save(first)
    store.save(second)
    store.promote(first.run_id, "main", GatePolicy())
    with pytest.raises(AlreadyExists):
        store.promote("second", "main", GatePolicy())
    assert store.baseline("main") == first
    assert store.promote("second", "main", GatePolicy(), replace=True)[1] == first.run_id
    assert store.baseline("main").run_id == "second"
    assert [(name, run_id) for name, run_id, _ in records.history] == [("main", first.run_id)]


def test_malformed_run_files(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(EvalError, match="not JSON"):
        load_run(path)
    obj = run_to_json(sample_run())
    del obj["cases"][0]["metrics"]
    with pytest.raises(EvalError, match="not a Plumbline run record"):
        run_from_json(obj)
    with pytest.raises(EvalError, match="not a Plumbline run record"):
        run_from_json({**run_to_json(sample_run()), "cases": [{**obj["cases"][1], "retrieved": [{"id": "x"}]}]})
