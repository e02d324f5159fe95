"""Evaluation through the live pipeline: the handbook set, the committed baseline, and the gauges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.gate import compare
from eval.runner import CaseResult, Query, run_set
from eval.storage import RunStore, SetStore, load_baseline, load_set
from eval.verdict import GatePolicy, GateRequest
from service.domain import Mode
from service.errors import Busy, InvalidRequest
from service.evaluation.gauges import EvalGaugeCollector
from service.evaluation.retriever import PipelineRetriever
from service.evaluation.runs import EvalService, RunSpec
from service.index.index import Index
from service.inputs import SearchOptions
from service.options import SearchOverrides
from service.retrieval.pipeline import SearchParams, SearchPipeline, search_params
from service.settings import Settings
from service.state import open_state


@pytest.fixture(scope="module")
def pipeline(handbook_index: Index) -> SearchPipeline:
    return SearchPipeline(handbook_index.store, handbook_index.embedder, handbook_index.encoder, None)


def test_case_filters_and_doc_unit_reach_the_pipeline(pipeline: SearchPipeline) -> None:
    retriever = PipelineRetriever(pipeline, SearchParams())
    [fjord, docs] = retriever.retrieve(
        [
            Query("expenses receipts", 5, {"tenant": "fjord"}),
            Query("password policy", 6, {}, unit="doc"),
        ]
    )
    assert {r.doc_id for r in fjord} <= {"fjord/expenses", "fjord/holidays", "fjord/it-onboarding"}
    assert len({r.doc_id for r in docs}) == len(docs) == 6
    with pytest.raises(InvalidRequest, match=r"filters .* are invalid: tenant"):
        retriever.retrieve([Query("x", 5, {"tenant": 3, "colour": "red"})])


def test_a_superseded_document_retrieved_is_stale(pipeline: SearchPipeline) -> None:
    """The freshness guard: with fresh_only false the 2024 policy comes back, and stale@k says so."""
    old, new = "hr/remote-work-policy-2024", "hr/remote-work-policy"
    case = Case("c", "remote work policy hybrid stipend", (Label(doc_id=new),), filters={"doc_ids": [old, new]})

    def run(params: SearchParams) -> CaseResult:
        return run_set([case], PipelineRetriever(pipeline, params), set_name="s", ks=(10,)).cases[0]

    unfiltered = run(SearchParams(fresh_only=False))
    assert {r.doc_id: r.stale for r in unfiltered.retrieved} == {old: True, new: False}
    assert unfiltered.metrics["stale@10"] == 1.0
    fresh = run(SearchParams())
    assert {r.doc_id for r in fresh.retrieved} == {new}
    assert fresh.metrics["stale@10"] == 0.0


def test_the_committed_baseline_passes_against_a_fresh_run(pipeline: SearchPipeline) -> None:
    """CI's regression gate in miniature: the handbook set, replayed now, against eval/baselines/handbook.json."""
    packaged = load_baseline("handbook")
    baseline = packaged.run
    assert packaged.policy is not None  # the packaged baseline carries its packaged policy
    name, cases = load_set("handbook")
    options = SearchOptions.model_validate(
        {k: v for k, v in baseline.params.items() if k in SearchOptions.model_fields}
    )
    base = search_params(Settings(), SearchOverrides.of(options), reranker_configured=False)
    run = run_set(cases, PipelineRetriever(pipeline, base), set_name=name, ks=baseline.ks, unit=baseline.unit)
    gate = compare(run, baseline, packaged.policy)
    assert gate.passed, gate.reasons
    degraded = run_set(
        cases,
        PipelineRetriever(pipeline, SearchParams(mode=Mode.DENSE, candidates=10)),
        set_name=name,
        ks=baseline.ks,
        unit=baseline.unit,
    )
    assert not compare(degraded, baseline, packaged.policy).passed


def eval_service(url: str) -> EvalService:
    """An EvalService over a SQLite state store at `url` (a restart, or another replica: a new one on the file)."""
    state = open_state(url)
    return EvalService(SetStore(state), RunStore(state), jobs=state.jobs, leases=state.leases)


def spec(pipeline: SearchPipeline, base: SearchParams, kind: str, **kw: Any) -> RunSpec:
    return RunSpec(pipeline, base, "handbook", (1, 10), "chunk", {}, GateRequest(), GatePolicy(), kind=kind, **kw)


def gauges(service: EvalService) -> str:
    registry = CollectorRegistry()
    registry.register(EvalGaugeCollector(lambda: service, {"handbook": 3600}))
    return generate_latest(registry).decode()


def test_only_monitoring_runs_move_the_gauges(pipeline: SearchPipeline, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    service = eval_service(url)
    ev = service.evaluate(spec(pipeline, SearchParams(mode=Mode.KEYWORD), "monitoring"))
    assert ev is not None
    assert service.runs.get(ev.run.run_id).kind == "monitoring"
    text = gauges(service)
    recall = ev.report.overall.metrics["recall@10"]
    assert f'plumbline_eval_metric{{category="all",k="10",metric="recall",set="handbook"}} {recall}' in text
    assert 'plumbline_eval_cases{category="hr",set="handbook"}' in text
    assert 'plumbline_eval_schedule_interval_seconds{set="handbook"} 3600.0' in text
    # the packaged baseline named like the set gates a monitoring run, and its numbers are exported beside
    assert ev.run.gate is not None
    packaged = load_baseline("handbook")
    assert ev.run.gate.baseline is not None
    assert ev.run.gate.baseline.to_json() == {
        "name": "handbook",
        "run_id": packaged.run.run_id,
        "sha256": packaged.sha256,
        "source": "packaged",
    }
    assert ev.run.gate.policy == packaged.policy  # judged by the baseline's own policy
    assert ev.run.gate.policy_origin == "baseline"
    assert 'plumbline_eval_baseline_metric{category="all",k="10",metric="recall",set="handbook"}' in text
    # an experiment, and a manual run, are stored but never shown as production quality
    experiment = service.evaluate(spec(pipeline, SearchParams(mode=Mode.DENSE, candidates=10), "experiment"))
    manual = service.evaluate(spec(pipeline, SearchParams(), "manual"))
    assert experiment is not None
    assert manual is not None
    assert experiment.run.gate is None  # only a monitoring run defaults to a baseline
    assert experiment.report.overall.metrics["recall@10"] != recall
    assert gauges(service) == text
    # another replica (or a restart) reads the same latest monitoring run from the state store
    assert gauges(eval_service(url)) == text


def test_gate_verdicts_survive_a_restart(pipeline: SearchPipeline, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    service = eval_service(url)
    first = service.evaluate(spec(pipeline, SearchParams(), "manual"))
    assert first is not None
    service.runs.promote(first.run.run_id, "mine", GatePolicy())
    worse = service.evaluate(
        spec(pipeline, SearchParams(mode=Mode.KEYWORD, candidates=10), "monitoring", baseline="mine")
    )
    assert worse is not None
    assert worse.gate is not None
    assert not worse.gate.passed
    assert 'plumbline_eval_gate_passed{set="handbook"} 0.0' in gauges(eval_service(url))


def test_a_monitoring_run_is_one_replica_at_a_time_and_runs_only_when_due(
    pipeline: SearchPipeline, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    one, two = eval_service(url), eval_service(url)
    assert one.leases is not None
    assert one.leases.acquire("monitoring:handbook", one.owner, 60)  # as `one` does while it runs the set
    with pytest.raises(Busy, match="already in progress"):
        two.evaluate(spec(pipeline, SearchParams(), "monitoring"))
    assert two.evaluate(spec(pipeline, SearchParams(), "manual")) is not None  # other kinds need no lease
    one.leases.release("monitoring:handbook", one.owner)
    assert two.evaluate(spec(pipeline, SearchParams(), "monitoring"), if_older_than=3600) is not None
    assert one.evaluate(spec(pipeline, SearchParams(), "monitoring"), if_older_than=3600) is None  # not due
    assert one.evaluate(spec(pipeline, SearchParams(), "monitoring"), if_older_than=0) is not None


def test_set_uploads_are_checked_against_the_search_filters(tmp_path: Path) -> None:
    service = eval_service(f"sqlite:///{tmp_path / 'state.db'}")
    good = '{"id": "a", "question": "q", "relevant": [{"doc_id": "d"}], "filters": {"tenant": "acme"}}'
    bad = '{"id": "b", "question": "q", "relevant": [{"doc_id": "d"}], "filters": {"tennant": "acme"}}'
    assert len(service.put_set("s", good + "\n")) == 1
    with pytest.raises(EvalError, match=r"s:2: filters .* tennant"):
        service.put_set("s", good + "\n" + bad + "\n")
    assert len(service.sets.get("s")) == 1


def test_metrics_still_answer_when_the_state_store_is_unreachable(tmp_path: Path) -> None:
    import shutil

    from service.evaluation.incidents import IncidentGaugeCollector

    (tmp_path / "gone").mkdir()
    state = open_state(f"sqlite:///{tmp_path / 'gone' / 'state.db'}")
    service = EvalService(SetStore(state), RunStore(state))
    registry = CollectorRegistry()
    registry.register(EvalGaugeCollector(lambda: service, {"handbook": 3600}))
    registry.register(IncidentGaugeCollector(lambda: state))
    state.engine.dispose()
    shutil.rmtree(tmp_path / "gone")  # the next connection cannot open the database
    text = generate_latest(registry).decode()
    assert 'plumbline_eval_schedule_interval_seconds{set="handbook"} 3600.0' in text
    assert "plumbline_incidents" not in text
