"""/eval/*: replay labelled sets through the live pipeline, keep runs, promote baselines, edit sets."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from eval.cases import dump_jsonl
from eval.gate import GateConfig
from eval.present import report_json
from eval.report import build_report
from eval.trec import trec_run_lines
from service.api.convert import run_params, to_params
from service.api.deps import EvalsDep, IndexDep, PipelineDep, SettingsDep
from service.api.schemas import (
    BaselineRequest,
    BaselineResponse,
    EvalReportOut,
    EvalRunRequest,
    RunSummary,
    SetSummary,
)
from service.errors import InvalidRequest
from service.evaluation import unknown_documents

router = APIRouter(prefix="/eval", tags=["eval"])


@router.post("/run", response_model=EvalReportOut)
def run_eval(body: EvalRunRequest, evals: EvalsDep, pipeline: PipelineDep, settings: SettingsDep) -> dict[str, Any]:
    """Evaluate a set through the same pipeline as /search; with `baseline`, gate against it."""
    base = to_params(body.overrides, settings, reranker_configured=pipeline.reranker is not None)
    record = run_params(base, body.overrides)
    config = GateConfig(
        metrics=tuple(body.metrics),
        tolerance=body.tolerance if body.tolerance is not None else GateConfig().tolerance,
        require_significance=body.require_significance,
        fail_on_regressed=(
            body.fail_on_regressed_incidents
            if body.fail_on_regressed_incidents is not None
            else settings.fail_on_regressed_incidents
        ),
    )
    ev = evals.evaluate(
        pipeline,
        base,
        set_name=body.set,
        ks=body.k,
        unit=body.unit,
        params_record=record,
        baseline=body.baseline,
        gate_config=config,
        experiment=bool(body.overrides.model_dump(exclude_defaults=True)),
    )
    return {**report_json(ev.run, ev.report, ev.gate, cases=body.include_cases), "warnings": list(ev.warnings)}


@router.get("/runs", response_model=list[RunSummary])
def list_runs(
    evals: EvalsDep,
    set: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> list[RunSummary]:
    """Runs newest first, without their cases."""
    return [
        RunSummary(
            run_id=r.run_id,
            set=r.set_name,
            created_at=r.created_at,
            unit=r.unit,
            cases=r.cases,
            metrics=dict(r.metrics),
            gate=r.gate,
        )
        for r in evals.runs.summaries(limit, offset, set)
    ]


@router.get("/runs/{run_id}", response_model=EvalReportOut)
def get_run(run_id: str, evals: EvalsDep) -> dict[str, Any]:
    run = evals.runs.get(run_id)
    return report_json(run, build_report(run), None)


@router.get("/runs/{run_id}/trec")
def get_run_trec(run_id: str, evals: EvalsDep) -> Response:
    """The run in TREC format, for trec_eval / pytrec_eval / ranx."""
    run = evals.runs.get(run_id)
    return Response("".join(line + "\n" for line in trec_run_lines(run)), media_type="text/plain")


@router.post("/baselines", response_model=BaselineResponse, status_code=status.HTTP_201_CREATED)
def promote(body: BaselineRequest, evals: EvalsDep) -> BaselineResponse:
    """Promote a run to a named baseline; an existing one needs `replace: true` and is kept in history."""
    replaced = evals.runs.promote(body.run_id, body.name, replace=body.replace)
    return BaselineResponse(name=body.name, run_id=body.run_id, replaced=replaced)


@router.get("/sets", response_model=list[SetSummary])
def list_sets(evals: EvalsDep) -> list[SetSummary]:
    """Every set an eval run can name, with its case count (incidents that count included)."""
    return [SetSummary(name=n, cases=len(evals.cases(n))) for n in evals.set_names()]


@router.get("/sets/{name}")
def export_set(name: str, evals: EvalsDep, incidents: bool = False) -> Response:
    """The set as JSON Lines, as stored or packaged; with `incidents=true`, as a run sees it (its counted
    incidents' cases appended)."""
    text = dump_jsonl(evals.cases(name)) if incidents else evals.sets.text(name)
    return Response(text, media_type="application/x-ndjson")


@router.put("/sets/{name}", response_model=SetSummary)
async def import_set(name: str, request: Request, evals: EvalsDep, index: IndexDep) -> SetSummary:
    """Replace a set with a JSON Lines body; a malformed one is rejected with its bad line numbers. The set is
    stored even if some cases name documents the index does not hold; `warnings` says which."""
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the body is not UTF-8 text: send the set as JSON Lines") from None
    cases = await run_in_threadpool(evals.put_set, name, text)
    warnings = await run_in_threadpool(unknown_documents, index.store, cases)
    return SetSummary(name=name, cases=len(cases), warnings=warnings)
