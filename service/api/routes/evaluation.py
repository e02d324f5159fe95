"""/eval/*: replay labelled sets through the live pipeline, keep runs, promote baselines, edit sets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from eval.errors import UnknownName
from eval.gate import Judging
from eval.present import EvalReportOut, report_json
from eval.report import build_report
from eval.storage import Baseline
from eval.trec import trec_run_lines
from service.api.auth import AUTH_RESPONSES, EvalAdmin, EvalRunner, audited
from service.api.convert import gate_policy, policy_body, run_options
from service.api.deps import EvaluationsDep, IndexDep, PipelineDep, RuntimeDep, SettingsDep
from service.api.schemas import (
    BaselineRequest,
    BaselineResponse,
    EvalJobOut,
    EvalRunRequest,
    NoAnswerCalibrateIn,
    NoAnswerCalibrationOut,
    ProgressOut,
    RunDeleted,
    RunSummary,
    SetSummary,
)
from service.errors import InvalidRequest
from service.evaluation.calibration import CalibrationRequest
from service.evaluation.retriever import unknown_documents
from service.filters import FilterSpec
from service.state.jobs import Job

router = APIRouter(prefix="/eval", tags=["eval"], responses=AUTH_RESPONSES)


@router.post(
    "/run",
    response_model=EvalReportOut | EvalJobOut,
    responses={202: {"model": EvalJobOut, "description": 'with "async": true, the run started'}},
)
def run_eval(
    body: EvalRunRequest,
    evaluations: EvaluationsDep,
    pipeline: PipelineDep,
    response: Response,
    runtime: RuntimeDep,
    caller: EvalRunner,
) -> dict[str, Any] | EvalJobOut:
    """Evaluate a set through the same pipeline as /search; with `baseline`, gate against it. With `"async": true`
    answer 202 at once: GET /eval/runs/{id} shows the progress, then the report. A tenant-bound key's run replays
    the set's cases for its tenant over its tenant's documents, and cannot be a monitoring run; a monitoring run
    needs `eval:admin`."""
    evaluations.authorize(caller, monitoring=body.monitoring)
    options = run_options(body)
    if body.exclude is not None:
        if body.run_async:
            raise InvalidRequest('a what-if run (exclude) is waited on: drop "async"')
        pruning = FilterSpec(exclude_doc_ids=tuple(body.exclude.doc_ids), exclude_tags=tuple(body.exclude.tags))
        with audited(runtime, caller, "eval.run", detail={"set": body.set, "what_if": True}):  # with the runs' rows
            base, pruned, compared = evaluations.what_if(caller, options, pruning, pipeline)
        report = report_json(pruned.run, pruned.report, None, cases=body.include_cases)
        return {
            **report,
            "warnings": list(pruned.warnings),
            "what_if": {"base_run_id": base.run.run_id, **compared.to_json()},
        }
    if body.run_async:
        with audited(runtime, caller, "eval.run", detail={"set": body.set, "async": True}):  # with the job's row
            _, run_id = evaluations.submit(caller, options, pipeline)
        response.status_code = status.HTTP_202_ACCEPTED
        response.headers["Location"] = f"/eval/runs/{run_id}"
        return _job_out(evaluations.job(caller, run_id))
    with audited(runtime, caller, "eval.run", detail={"set": body.set}):  # with the run's row
        _, ev = evaluations.run(caller, options, pipeline)
    return {**report_json(ev.run, ev.report, ev.gate, cases=body.include_cases), "warnings": list(ev.warnings)}


@router.get("/runs", response_model=list[RunSummary])
def list_runs(
    evaluations: EvaluationsDep,
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
            gate_policy=r.gate_policy,
            overrides=dict(r.params.get("overrides", {})),
            corpus=r.params.get("corpus"),
            trigger=r.params.get("trigger"),
        )
        for r in evaluations.runs(caller, limit, offset, set, kind)
    ]


@router.get("/runs/{run_id}", response_model=EvalReportOut | EvalJobOut)
def get_run(
    run_id: str, evaluations: EvaluationsDep, caller: EvalRunner, include_cases: bool = True
) -> dict[str, Any] | EvalJobOut:
    """A finished run's report; for a run still going (or one that ended without a report), its status and
    progress."""
    try:
        run = evaluations.stored_run(caller, run_id)
    except UnknownName:  # not stored (yet): a run in progress, or one that ended without a report
        return _job_out(evaluations.job(caller, run_id))
    return report_json(run, build_report(run), None, cases=include_cases)


@router.delete("/runs/{run_id}", response_model=RunDeleted)
def delete_run(run_id: str, evaluations: EvaluationsDep, runtime: RuntimeDep, caller: EvalRunner) -> RunDeleted:
    """Remove a stored run (a baseline promoted from it keeps its own copy). A tenant-bound key removes its tenant's
    runs, which frees its share of `PLUMBLINE_TENANT_MAX_RUNS`; a run over every tenant or a monitoring run needs
    `eval:admin`."""
    with audited(runtime, caller, "eval.delete", run_id):  # with the run's deletion
        run = evaluations.delete_run(caller, run_id)
    return RunDeleted(run_id=run_id, set=run.set_name, kind=run.kind)


@router.post("/runs/{run_id}/cancel", response_model=EvalJobOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_run(run_id: str, evaluations: EvaluationsDep, runtime: RuntimeDep, caller: EvalRunner) -> EvalJobOut:
    """Stop a background run before its next batch of questions (on whichever replica runs it), or a queued one at
    once; 409 if it is neither. The key that started a run may stop it, and an `eval:admin` key any run; a
    monitoring run only an `eval:admin` key."""
    with audited(runtime, caller, "eval.cancel", run_id):  # with the job's cancel flag
        evaluations.cancel(caller, run_id)
    return _job_out(evaluations.job(caller, run_id))


def _job_out(job: Job) -> EvalJobOut:
    return EvalJobOut(
        run_id=job.run_id,
        status=job.status if job.status != "done" else "running",  # a report is what a finished run shows
        position=job.position,
        kind=job.kind,
        set=job.set_name,
        progress=ProgressOut(done=job.done, total=job.total),
        cancel_requested=job.cancel_requested,
        error=job.error,
        started_at=job.started_at,
        heartbeat_at=job.heartbeat_at,
        finished_at=job.finished_at,
    )


@router.get("/runs/{run_id}/distractors")
def run_distractors(
    run_id: str,
    evaluations: EvaluationsDep,
    caller: EvalRunner,
    k: Annotated[int | None, Query(ge=1, le=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> dict[str, Any]:
    """The documents that most often took a top-k slot (k: the run's largest) in cases they do not answer: how many
    cases each crowded, its slots, the relevant hits it pushed below k, the categories, its chunks, its freshness
    (status, age, owner, supersession), and the near-duplicate groups among them and the documents they crowded out.
    What pruning them would do: `POST /eval/run` with `exclude`."""
    return evaluations.distractors(caller, run_id=run_id, k=k, limit=limit).to_json()


@router.get("/sets/{name}/distractors")
def set_distractors(
    name: str,
    evaluations: EvaluationsDep,
    caller: EvalRunner,
    runs: Annotated[int, Query(ge=1, le=50)] = 5,
    k: Annotated[int | None, Query(ge=1, le=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> dict[str, Any]:
    """The distractor report over the set's `runs` most recent monitoring runs (counts summed; `runs` per document:
    in how many it crowded a case)."""
    return evaluations.distractors(caller, set_name=name, recent=runs, k=k, limit=limit).to_json()


@router.get("/runs/{run_id}/trec")
def get_run_trec(run_id: str, evaluations: EvaluationsDep, caller: EvalRunner) -> Response:
    """The run in TREC format, for trec_eval / pytrec_eval / ranx."""
    run = evaluations.stored_run(caller, run_id)
    return Response("".join(line + "\n" for line in trec_run_lines(run)), media_type="text/plain")


@router.post("/baselines", response_model=BaselineResponse, status_code=status.HTTP_201_CREATED)
def promote(
    body: BaselineRequest, evaluations: EvaluationsDep, settings: SettingsDep, runtime: RuntimeDep, caller: EvalAdmin
) -> BaselineResponse:
    """Promote a run to a named baseline with the gate policy runs gated against it are judged by (a run may only
    make it stricter); an existing one needs `replace: true` and is kept in history. A packaged baseline's name is
    read-only; `shadow: true` (the admin role) hides it deliberately."""
    policy = gate_policy(body.policy, settings)
    detail = {"run_id": body.run_id, "shadow": body.shadow, "policy": policy.to_json()}
    with audited(runtime, caller, "baseline.promote", body.name, detail):  # with the baseline's row
        _, replaced = evaluations.promote(
            caller, body.run_id, body.name, policy, replace=body.replace, shadow=body.shadow
        )
    return _baseline_out(body.name, *evaluations.baseline(body.name), replaced=replaced)


@router.get("/baselines/{name}", response_model=BaselineResponse)
def get_baseline(name: str, evaluations: EvaluationsDep, _: EvalRunner) -> BaselineResponse:
    """A baseline's identity and the gate policy runs gated against it are judged by (a run may only make it
    stricter); not its cases."""
    return _baseline_out(name, *evaluations.baseline(name))


def _baseline_out(name: str, baseline: Baseline, judged: Judging, *, replaced: str | None = None) -> BaselineResponse:
    return BaselineResponse(
        name=name,
        run_id=baseline.run.run_id,
        replaced=replaced,
        sha256=baseline.sha256,
        source=baseline.source,
        policy=policy_body(judged.policy),
        policy_origin="baseline" if judged.origin == "baseline" else "default",
    )


@router.get("/sets", response_model=list[SetSummary])
def list_sets(evaluations: EvaluationsDep, caller: EvalRunner) -> list[SetSummary]:
    """Every set an eval run can name, with its case count (incidents that count included; for a tenant-bound
    key, the cases its runs would replay) and where it comes from."""
    return [SetSummary(name=s.name, cases=s.cases, source=s.source) for s in evaluations.sets(caller)]


@router.get("/sets/{name}")
def export_set(name: str, evaluations: EvaluationsDep, caller: EvalRunner, incidents: bool = False) -> Response:
    """The set as JSON Lines, as stored or packaged; with `incidents=true`, as a run sees it (its counted
    incidents' cases appended). A tenant-bound key gets the cases for its tenant only."""
    return Response(evaluations.export_set(caller, name, incidents=incidents), media_type="application/x-ndjson")


@router.put("/sets/{name}", response_model=SetSummary)
async def import_set(
    name: str,
    request: Request,
    evaluations: EvaluationsDep,
    index: IndexDep,
    runtime: RuntimeDep,
    caller: EvalAdmin,
    shadow: Annotated[bool, Query(description="store it under a packaged set's name, hiding that set (admin)")] = False,
) -> SetSummary:
    """Replace a set with a JSON Lines body; a malformed one is rejected with its bad line numbers. The set is
    stored even if some cases name documents the index does not hold; `warnings` says which. A packaged set's
    name is read-only (409) unless an admin shadows it deliberately."""
    body = await request.body()
    with audited(runtime, caller, "set.put", name, {"shadow": shadow}):  # with the set's row
        cases = await run_in_threadpool(evaluations.put_set, caller, name, body, shadow=shadow)
    warnings = await run_in_threadpool(unknown_documents, index.store, cases)
    return SetSummary(name=name, cases=len(cases), warnings=warnings, source=evaluations.evals.sets.source(name))


@router.post("/no-answer/calibrate", response_model=NoAnswerCalibrationOut)
def calibrate_no_answer(body: NoAnswerCalibrateIn, runtime: RuntimeDep, caller: EvalAdmin) -> dict[str, Any]:
    """Learn the "nothing matches" threshold every search's `no_answer` applies: each case of `sets` is searched
    with the served configuration as asked and with its labelled documents left out (a question the corpus cannot
    answer); the threshold on the best hit's dense score that best flags the searches without an answer in the top
    `k` (the highest F-beta, precision first by default) is fit on the tune split, stored (every replica applies it
    within seconds) and reported with its precision and recall on both splits. Every tenant's searches use it (an
    eval:admin key is never tenant-bound)."""
    req = CalibrationRequest(tuple(dict.fromkeys(body.sets)), body.k, body.seed, body.beta)
    with audited(runtime, caller, "no_answer.calibrate", ",".join(req.sets), {"k": req.k}):
        return runtime.calibrate_no_answer(req)


@router.get("/no-answer", response_model=NoAnswerCalibrationOut)
def get_no_answer(runtime: RuntimeDep, _: EvalRunner) -> dict[str, Any]:
    """The threshold searches apply now, with its precision and recall; 404 before one is learned."""
    record = runtime.no_answer_record()
    if record is None:
        raise UnknownName("no threshold learned yet: POST /eval/no-answer/calibrate with the labelled sets to learn it")
    return record
