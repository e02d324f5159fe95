"""/eval/*: replay labelled sets through the live pipeline, keep runs, promote baselines, edit sets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from eval.cases import dump_jsonl
from eval.errors import UnknownName
from eval.gate import GateConfig
from eval.present import report_json
from eval.report import build_report
from eval.trec import trec_run_lines
from service.api.convert import run_spec
from service.api.deps import EvalsDep, IndexDep, PipelineDep, SettingsDep
from service.api.schemas import (
    BaselineRequest,
    BaselineResponse,
    EvalJobOut,
    EvalReportOut,
    EvalRunRequest,
    ProgressOut,
    RunSummary,
    SetSummary,
)
from service.errors import Conflict, InvalidRequest, NotFound
from service.evaluation import EvalService, unknown_documents

router = APIRouter(prefix="/eval", tags=["eval"])


@router.post(
    "/run",
    response_model=EvalReportOut | EvalJobOut,
    responses={202: {"model": EvalJobOut, "description": 'with "async": true, the run started'}},
)
def run_eval(
    body: EvalRunRequest, evals: EvalsDep, pipeline: PipelineDep, settings: SettingsDep, response: Response
) -> dict[str, Any] | EvalJobOut:
    """Evaluate a set through the same pipeline as /search; with `baseline`, gate against it. With `"async": true`
    answer 202 at once: GET /eval/runs/{id} shows the progress, then the report."""
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
    spec = run_spec(
        body.overrides,
        settings,
        pipeline,
        set_name=body.set,
        ks=body.k,
        unit=body.unit,
        gate_config=config,
        monitoring=body.monitoring,
        baseline=body.baseline,
    )
    if body.run_async:
        run_id = evals.submit(spec)
        response.status_code = status.HTTP_202_ACCEPTED
        response.headers["Location"] = f"/eval/runs/{run_id}"
        return _job_out(evals, run_id)
    ev = evals.evaluate(spec)
    if ev is None:  # only a scheduled run asks to run just when due
        raise Conflict("the run was not due")
    return {**report_json(ev.run, ev.report, ev.gate, cases=body.include_cases), "warnings": list(ev.warnings)}


@router.get("/runs", response_model=list[RunSummary])
def list_runs(
    evals: EvalsDep,
    set: str | None = None,
    kind: Literal["monitoring", "manual", "experiment"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> list[RunSummary]:
    """Finished runs newest first, without their cases; of one set or kind if asked. An experiment shows its
    overrides."""
    return [
        RunSummary(
            run_id=r.run_id,
            kind=r.kind,
            set=r.set_name,
            created_at=r.created_at,
            unit=r.unit,
            cases=r.cases,
            metrics=dict(r.metrics),
            gate=r.gate,
            overrides=dict(r.params.get("overrides", {})),
        )
        for r in evals.runs.summaries(limit, offset, set, kind)
    ]


@router.get("/runs/{run_id}", response_model=EvalReportOut | EvalJobOut)
def get_run(run_id: str, evals: EvalsDep, include_cases: bool = True) -> dict[str, Any] | EvalJobOut:
    """A finished run's report; for a run still going (or one that ended without a report), its status and
    progress."""
    try:
        run = evals.runs.get(run_id)
    except UnknownName:  # not stored (yet): a run in progress, or one that ended without a report
        return _job_out(evals, run_id)
    return report_json(run, build_report(run), None, cases=include_cases)


@router.post("/runs/{run_id}/cancel", response_model=EvalJobOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_run(run_id: str, evals: EvalsDep) -> EvalJobOut:
    """Stop a background run before its next batch of questions (on whichever replica runs it); 409 if it is not
    running."""
    evals.cancel(run_id)
    return _job_out(evals, run_id)


def _job_out(evals: EvalService, run_id: str) -> EvalJobOut:
    job = evals.job(run_id)
    if job is None:
        raise NotFound(f"no run with id {run_id!r}")
    return EvalJobOut(
        run_id=job.run_id,
        status=job.status if job.status != "done" else "running",  # a report is what a finished run shows
        kind=job.kind,
        set=job.set_name,
        progress=ProgressOut(done=job.done, total=job.total),
        cancel_requested=job.cancel_requested,
        error=job.error,
        started_at=job.started_at,
        heartbeat_at=job.heartbeat_at,
        finished_at=job.finished_at,
    )


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
