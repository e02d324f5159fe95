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
from eval.runner import Run
from eval.trec import trec_run_lines
from service.access.principals import Principal, require
from service.api.auth import AUTH_RESPONSES, EvalAdmin, EvalRunner, audit
from service.api.convert import run_spec
from service.api.deps import EvalsDep, IndexDep, PipelineDep, RuntimeDep, SettingsDep
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
from service.errors import Conflict, Forbidden, InvalidRequest, NotFound
from service.evaluation.retriever import tenant_cases, unknown_documents
from service.evaluation.runs import EvalService

router = APIRouter(prefix="/eval", tags=["eval"], responses=AUTH_RESPONSES)


@router.post(
    "/run",
    response_model=EvalReportOut | EvalJobOut,
    responses={202: {"model": EvalJobOut, "description": 'with "async": true, the run started'}},
)
def run_eval(
    body: EvalRunRequest,
    evals: EvalsDep,
    pipeline: PipelineDep,
    settings: SettingsDep,
    response: Response,
    runtime: RuntimeDep,
    caller: EvalRunner,
) -> dict[str, Any] | EvalJobOut:
    """Evaluate a set through the same pipeline as /search; with `baseline`, gate against it. With `"async": true`
    answer 202 at once: GET /eval/runs/{id} shows the progress, then the report. A tenant-bound key's run replays
    the set's cases for its tenant over its tenant's documents, and cannot be a monitoring run; a monitoring run
    needs `eval:admin`."""
    if body.monitoring:
        if caller.tenant is not None:
            raise Forbidden("a monitoring run covers every tenant: a tenant-bound key cannot start one")
        # it feeds the gauges and alerts with its own tolerance and baseline: not for a key that merely runs evals
        require(caller, ("eval:admin",), "a monitoring run")
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
        tenant=caller.tenant,
    )
    if body.run_async:
        run_id = evals.submit(spec)
        audit(runtime, caller, "eval.run", run_id, {"set": body.set, "kind": spec.kind, "async": True})
        response.status_code = status.HTTP_202_ACCEPTED
        response.headers["Location"] = f"/eval/runs/{run_id}"
        return _job_out(evals, run_id, caller)
    ev = evals.evaluate(spec)
    if ev is None:  # only a scheduled run asks to run just when due
        raise Conflict("the run was not due")
    gate = ev.run.gate["verdict"] if ev.run.gate else None
    audit(runtime, caller, "eval.run", ev.run.run_id, {"set": body.set, "kind": spec.kind, "gate": gate})
    return {**report_json(ev.run, ev.report, ev.gate, cases=body.include_cases), "warnings": list(ev.warnings)}


@router.get("/runs", response_model=list[RunSummary])
def list_runs(
    evals: EvalsDep,
    caller: EvalRunner,
    set: str | None = None,
    kind: Literal["monitoring", "manual", "experiment"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[RunSummary]:
    """Finished runs newest first, without their cases; of one set or kind if asked. An experiment shows its
    overrides. A tenant-bound key sees the runs confined to its tenant."""
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
        for r in evals.runs.summaries(limit, offset, set, kind, caller.tenant)
    ]


@router.get("/runs/{run_id}", response_model=EvalReportOut | EvalJobOut)
def get_run(
    run_id: str, evals: EvalsDep, caller: EvalRunner, include_cases: bool = True
) -> dict[str, Any] | EvalJobOut:
    """A finished run's report; for a run still going (or one that ended without a report), its status and
    progress."""
    try:
        run = _visible_run(evals, run_id, caller)
    except UnknownName:  # not stored (yet): a run in progress, or one that ended without a report
        return _job_out(evals, run_id, caller)
    return report_json(run, build_report(run), None, cases=include_cases)


@router.post("/runs/{run_id}/cancel", response_model=EvalJobOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_run(run_id: str, evals: EvalsDep, runtime: RuntimeDep, caller: EvalRunner) -> EvalJobOut:
    """Stop a background run before its next batch of questions (on whichever replica runs it); 409 if it is not
    running. Only an `eval:admin` key may stop a monitoring run."""
    job = _job_out(evals, run_id, caller)
    if job.kind == "monitoring":
        require(caller, ("eval:admin",), "cancelling a monitoring run")
    evals.cancel(run_id)
    audit(runtime, caller, "eval.cancel", run_id, {"set": job.set})
    return _job_out(evals, run_id, caller)


def _visible_run(evals: EvalService, run_id: str, caller: Principal) -> Run:
    """A stored run the caller may read: a tenant-bound key reads its tenant's runs only (others are absent)."""
    run = evals.runs.get(run_id)
    if caller.tenant is not None and run.tenant != caller.tenant:
        raise NotFound(f"no run with id {run_id!r}")
    return run


def _job_out(evals: EvalService, run_id: str, caller: Principal) -> EvalJobOut:
    job = evals.job(run_id)
    if job is None or (caller.tenant is not None and job.tenant != caller.tenant):
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
def get_run_trec(run_id: str, evals: EvalsDep, caller: EvalRunner) -> Response:
    """The run in TREC format, for trec_eval / pytrec_eval / ranx."""
    run = _visible_run(evals, run_id, caller)
    return Response("".join(line + "\n" for line in trec_run_lines(run)), media_type="text/plain")


@router.post("/baselines", response_model=BaselineResponse, status_code=status.HTTP_201_CREATED)
def promote(body: BaselineRequest, evals: EvalsDep, runtime: RuntimeDep, caller: EvalAdmin) -> BaselineResponse:
    """Promote a run to a named baseline; an existing one needs `replace: true` and is kept in history. A packaged
    baseline's name is read-only; `shadow: true` (the admin role) hides it deliberately."""
    if body.shadow:
        require(caller, ("admin",), "shadowing a packaged baseline")
    if evals.runs.get(body.run_id).tenant is not None:
        raise InvalidRequest(f"run {body.run_id} was confined to one tenant: it cannot be a baseline for all")
    replaced = evals.runs.promote(body.run_id, body.name, replace=body.replace, shadow=body.shadow)
    detail = {"run_id": body.run_id, "replaced": replaced, "shadow": body.shadow}
    audit(runtime, caller, "baseline.promote", body.name, detail)
    return BaselineResponse(name=body.name, run_id=body.run_id, replaced=replaced)


@router.get("/sets", response_model=list[SetSummary])
def list_sets(evals: EvalsDep, caller: EvalRunner) -> list[SetSummary]:
    """Every set an eval run can name, with its case count (incidents that count included; for a tenant-bound
    key, the cases its runs would replay) and where it comes from."""
    return [
        SetSummary(name=n, cases=len(tenant_cases(evals.cases(n), caller.tenant)), source=evals.sets.source(n))
        for n in evals.set_names()
    ]


@router.get("/sets/{name}")
def export_set(name: str, evals: EvalsDep, caller: EvalRunner, incidents: bool = False) -> Response:
    """The set as JSON Lines, as stored or packaged; with `incidents=true`, as a run sees it (its counted
    incidents' cases appended). A tenant-bound key gets the cases for its tenant only."""
    if caller.tenant is not None:
        cases = evals.cases(name) if incidents else evals.sets.get(name)
        text = dump_jsonl(tenant_cases(cases, caller.tenant))
    else:
        text = dump_jsonl(evals.cases(name)) if incidents else evals.sets.text(name)
    return Response(text, media_type="application/x-ndjson")


@router.put("/sets/{name}", response_model=SetSummary)
async def import_set(
    name: str,
    request: Request,
    evals: EvalsDep,
    index: IndexDep,
    runtime: RuntimeDep,
    caller: EvalAdmin,
    shadow: Annotated[bool, Query(description="store it under a packaged set's name, hiding that set (admin)")] = False,
) -> SetSummary:
    """Replace a set with a JSON Lines body; a malformed one is rejected with its bad line numbers. The set is
    stored even if some cases name documents the index does not hold; `warnings` says which. A packaged set's
    name is read-only (409) unless an admin shadows it deliberately."""
    if shadow:
        require(caller, ("admin",), "shadowing a packaged set")
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the body is not UTF-8 text: send the set as JSON Lines") from None
    cases = await run_in_threadpool(evals.put_set, name, text, shadow=shadow)
    await run_in_threadpool(audit, runtime, caller, "set.put", name, {"cases": len(cases), "shadow": shadow})
    warnings = await run_in_threadpool(unknown_documents, index.store, cases)
    return SetSummary(name=name, cases=len(cases), warnings=warnings, source=evals.sets.source(name))
