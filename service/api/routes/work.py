"""/eval/sets/{name}/synthesize, /eval/syntheses, /eval/sets/{name}/proposals, /eval/sweeps, /eval/answers,
/eval/tunes, /eval/model: day-0 sets drafted by an LLM and reviewed, parameter sweeps, LLM-graded answers, and the
embedding model tuned on the labels. Each starts in the background (202,
`Location` to follow) and ends as a stored result of its own kind, never a retrieval run and never part of a gate."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from eval.judge import AnswerItem
from eval.present import report_json
from service.api.auth import AUTH_RESPONSES, EvalAdmin, EvalRunner, audited
from service.api.deps import RuntimeDep
from service.api.work_schemas import (
    AnswersIn,
    ModelOut,
    PromoteIn,
    PromoteOut,
    ProposalsOut,
    ReviewIn,
    ReviewOut,
    RollbackOut,
    SweepIn,
    SynthesisIn,
    TuneIn,
    TunePromoteOut,
    WorkOut,
)
from service.application.work import Work, WorkView, promotion_run
from service.errors import InvalidRequest
from service.evaluation.answers import AnswersRequest
from service.evaluation.sweeps import SweepRequest
from service.evaluation.synthesis import SynthesisRequest
from service.evaluation.tuning import TuneRequest

router = APIRouter(prefix="/eval", tags=["eval work"], responses=AUTH_RESPONSES)
Kind = Literal["synthesis", "sweep", "answers", "tune"]
PATHS = {"synthesis": "syntheses", "sweep": "sweeps", "answers": "answers", "tune": "tunes"}
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]


def _out(view: WorkView, *, full: bool = False) -> WorkOut:
    return WorkOut.model_validate(view.to_json(full=full))


def _accepted(runtime: RuntimeDep, caller: object, kind: Kind, result_id: str, response: Response) -> WorkOut:
    response.status_code = status.HTTP_202_ACCEPTED
    response.headers["Location"] = f"/eval/{PATHS[kind]}/{result_id}"
    return _out(Work(runtime).view(caller, kind, result_id))  # type: ignore[arg-type]


# -- syntheses ----------------------------------------------------------------------------------------------------


@router.post("/sets/{name}/synthesize", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def synthesize(name: str, body: SynthesisIn, runtime: RuntimeDep, response: Response, caller: EvalAdmin) -> WorkOut:
    """Draft questions for set `name` from the index's own chunks with the configured LLM (PLUMBLINE_LLM_BASE_URL,
    PLUMBLINE_LLM_MODEL; 503 saying so when unset). Chunks are sampled across tenants, tags and documents with the
    seed; each question passes rules (length, pronouns, "this document", the title alone, copied words), the LLM's
    own check that the chunk answers it, and near-duplicate removal, then lands as a proposed case for review
    (`accept_all`: straight into the set). Follow it at `/eval/syntheses/{id}`; one that dies can be resumed."""
    req = SynthesisRequest(set_name=name, **body.model_dump(exclude={"tags"}), tags=tuple(body.tags))
    with audited(runtime, caller, "synthesis.start", name, {"passages": body.passages}):  # with the job's row
        result_id = Work(runtime).synthesize(caller, req)
    return _accepted(runtime, caller, "synthesis", result_id, response)


@router.get("/syntheses", response_model=list[WorkOut])
def list_syntheses(
    runtime: RuntimeDep, caller: EvalRunner, set: str | None = None, limit: Limit = 50, offset: Offset = 0
) -> list[WorkOut]:
    """Syntheses newest first, with their summaries once done."""
    return [_out(v) for v in Work(runtime).listing(caller, "synthesis", set, limit, offset)]


@router.get("/syntheses/{result_id}", response_model=WorkOut)
def get_synthesis(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    """A synthesis: its progress, then what it made (drafts by status, rejections by reason, the copy-overlap
    distribution, the sample's strata, the LLM's tokens)."""
    return _out(Work(runtime).view(caller, "synthesis", result_id), full=True)


@router.post("/syntheses/{result_id}/resume", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def resume_synthesis(result_id: str, runtime: RuntimeDep, response: Response, caller: EvalAdmin) -> WorkOut:
    """Resume a synthesis that ended unfinished (failed, cancelled, lost): what it drafted is kept and skipped."""
    with audited(runtime, caller, "synthesis.resume", result_id):  # with the job's row
        Work(runtime).resume(caller, result_id)
    return _accepted(runtime, caller, "synthesis", result_id, response)


@router.post("/syntheses/{result_id}/cancel", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_synthesis(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    """Stop a synthesis after the passages in flight; what it drafted is kept (resume it later)."""
    with audited(runtime, caller, "synthesis.cancel", result_id):  # with the job's cancel flag
        return _out(Work(runtime).cancel(caller, "synthesis", result_id))


@router.get("/sets/{name}/proposals", response_model=ProposalsOut)
def list_proposals(
    name: str,
    runtime: RuntimeDep,
    caller: EvalRunner,
    status: Literal["proposed", "accepted", "rejected", "discarded"] | None = "proposed",
    limit: Limit = 200,
    offset: Offset = 0,
) -> ProposalsOut:
    """Drafted cases of set `name` by status (default: those awaiting review), with why quality control discarded
    the others, and the counts of each status."""
    listed, counts = Work(runtime).proposals(caller, name, status, limit, offset)
    return ProposalsOut(set=name, counts=counts, proposals=listed)


@router.post("/sets/{name}/proposals/review", response_model=ReviewOut)
def review_proposals(name: str, body: ReviewIn, runtime: RuntimeDep, caller: EvalAdmin) -> ReviewOut:
    """Accept proposed cases into the set (`source: synthetic`, with the model and prompt version that made them)
    or reject them: the ids given, or every proposed one with `all: true`."""
    if (body.ids is None) == (not body.all):
        raise InvalidRequest("give either ids or all: true")
    with audited(runtime, caller, "synthesis.review", name, {"status": body.status}):  # with the set's change
        changed = Work(runtime).review(caller, name, body.ids, body.status, body.reason)
    return ReviewOut(set=name, status=body.status, changed=changed)


# -- sweeps -------------------------------------------------------------------------------------------------------


@router.post("/sweeps", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def start_sweep(body: SweepIn, runtime: RuntimeDep, response: Response, caller: EvalRunner) -> WorkOut:
    """Sweep a grid (or a random sample of one) of chunking and search parameters over a set: chunking values build
    temporary indexes from the stored documents (never the live one), the winner is chosen on the tuning split and
    reported on the held-out split against the served configuration, with the paired test."""
    req = SweepRequest(
        set_name=body.set,
        space=body.space,
        search=body.search,
        samples=body.samples,
        seed=body.seed,
        metric=body.metric,
        unit=body.unit,
        test_share=body.test_share,
    )
    with audited(runtime, caller, "sweep.start", body.set):  # with the job's row
        result_id = Work(runtime).sweep(caller, req)
    return _accepted(runtime, caller, "sweep", result_id, response)


@router.get("/sweeps", response_model=list[WorkOut])
def list_sweeps(
    runtime: RuntimeDep, caller: EvalRunner, set: str | None = None, limit: Limit = 50, offset: Offset = 0
) -> list[WorkOut]:
    return [_out(v) for v in Work(runtime).listing(caller, "sweep", set, limit, offset)]


@router.get("/sweeps/{result_id}", response_model=WorkOut)
def get_sweep(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    """A sweep: its progress, then every row (quality, p50/p95 latency, context tokens, Pareto front), the winner,
    and its held-out comparison with the served configuration."""
    return _out(Work(runtime).view(caller, "sweep", result_id), full=True)


@router.post("/sweeps/{result_id}/cancel", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_sweep(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    with audited(runtime, caller, "sweep.cancel", result_id):  # with the job's cancel flag
        return _out(Work(runtime).cancel(caller, "sweep", result_id))


@router.post("/sweeps/{result_id}/promote", response_model=PromoteOut)
def promote_sweep(result_id: str, body: PromoteIn, runtime: RuntimeDep, caller: EvalAdmin) -> PromoteOut:
    """Make a finished sweep's winner the served search defaults, through the gate: the sweep's set is run with the
    winner's parameters and gated against `baseline` (default: the one named like the set); only a pass promotes
    (`promoted`), and every replica serves the new defaults within seconds. A winner that changes the chunking is a
    409 saying how to re-ingest."""
    with audited(runtime, caller, "sweep.promote", result_id):  # with the run's row, and the defaults' if promoted
        served, evaluation = Work(runtime).promote(caller, result_id, body.baseline)
    gate = evaluation.gate
    return PromoteOut(
        sweep=result_id,
        promoted=bool(gate and gate.passed),
        served=served,
        run=report_json(evaluation.run, evaluation.report, gate, cases=False),
    )


# -- answers ------------------------------------------------------------------------------------------------------


@router.post("/answers", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def grade_answers(body: AnswersIn, runtime: RuntimeDep, response: Response, caller: EvalRunner) -> WorkOut:
    """Grade answers with the configured LLM as judge: faithfulness to the contexts, correctness against the
    reference (the set's evidence for the case of the same id, or the item's own), completeness; a score and a
    reason per criterion, the median and spread of several samples. Contexts come with each item or from `run_id`.
    Never part of a gate; the report says to fix retrieval first when the set's recall@10 is low."""
    items = tuple(
        AnswerItem(
            i.id,
            i.question,
            i.answer,
            tuple(i.contexts) if i.contexts is not None else None,
            tuple(i.reference),
            i.category,
        )
        for i in body.items
    )
    req = AnswersRequest(body.set, items, body.run_id, body.k, body.samples)
    with audited(runtime, caller, "answers.start", body.set):  # with the job's row
        result_id = Work(runtime).grade(caller, req)
    return _accepted(runtime, caller, "answers", result_id, response)


@router.get("/answers", response_model=list[WorkOut])
def list_answers(
    runtime: RuntimeDep, caller: EvalRunner, set: str | None = None, limit: Limit = 50, offset: Offset = 0
) -> list[WorkOut]:
    return [_out(v) for v in Work(runtime).listing(caller, "answers", set, limit, offset)]


@router.get("/answers/{result_id}", response_model=WorkOut)
def get_answers(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    """An answer grading: its progress, then the grades per criterion (overall, per category, per item)."""
    return _out(Work(runtime).view(caller, "answers", result_id), full=True)


@router.post("/answers/{result_id}/cancel", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_answers(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    with audited(runtime, caller, "answers.cancel", result_id):  # with the job's cancel flag
        return _out(Work(runtime).cancel(caller, "answers", result_id))


# -- tuning -------------------------------------------------------------------------------------------------------


@router.post("/tunes", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def start_tune(body: TuneIn, runtime: RuntimeDep, response: Response, caller: EvalAdmin) -> WorkOut:
    """Fine-tune the served embedding model on the sets' tune splits, accepted incidents and synthetic cases, with
    hard negatives mined from the served search's own misses; re-embed the corpus into a new index generation beside
    the live one (the disk checked first; searches and writes go on); compare both on the held-out cases with the
    paired test. Nothing is switched: promote it with `/eval/tunes/{id}/promote`. One tune at a time; an unbound
    `eval:admin` key; the embedded backend only (409 otherwise)."""
    req = TuneRequest(sets=tuple(body.sets), **body.model_dump(exclude={"sets"}))
    with audited(runtime, caller, "tune.start", ",".join(body.sets)):  # with the job's row
        result_id = Work(runtime).tune(caller, req)
    return _accepted(runtime, caller, "tune", result_id, response)


@router.get("/tunes", response_model=list[WorkOut])
def list_tunes(
    runtime: RuntimeDep, caller: EvalRunner, set: str | None = None, limit: Limit = 50, offset: Offset = 0
) -> list[WorkOut]:
    """Tunes newest first, with their summaries once done."""
    return [_out(v) for v in Work(runtime).listing(caller, "tune", set, limit, offset)]


@router.get("/tunes/{result_id}", response_model=WorkOut)
def get_tune(result_id: str, runtime: RuntimeDep, caller: EvalRunner) -> WorkOut:
    """A tune: its phase, then what it mined, how it trained, the new generation, and the held-out comparison (per
    set and pooled) with whether it may be promoted."""
    return _out(Work(runtime).view(caller, "tune", result_id), full=True)


@router.post("/tunes/{result_id}/cancel", response_model=WorkOut, status_code=status.HTTP_202_ACCEPTED)
def cancel_tune(result_id: str, runtime: RuntimeDep, caller: EvalAdmin) -> WorkOut:
    """Stop a tune at its next mining batch, training step or copy batch; its model and generation are removed."""
    with audited(runtime, caller, "tune.cancel", result_id):  # with the job's cancel flag
        return _out(Work(runtime).cancel(caller, "tune", result_id))


@router.post("/tunes/{result_id}/promote", response_model=TunePromoteOut)
def promote_tune(result_id: str, body: PromoteIn, runtime: RuntimeDep, caller: EvalAdmin) -> TunePromoteOut:
    """Serve a finished tune's generation, through the gate: refused (`promoted: false`, `refusal`) when it is worse
    on the held-out cases, or when a gate fails; each set of the tune with a baseline is run on the new generation
    and gated (at least one must be). A pass switches searches and writes to it with no downtime, copying what was
    written since it was built; the old generation is kept for `/eval/model/rollback`."""
    with audited(runtime, caller, "tune.promote", result_id):  # with the gated runs' rows
        out = Work(runtime).promote_tune(caller, result_id, body.baseline)
    runs = [{"set": r["set"], "run": promotion_run(r["evaluation"])} for r in out.pop("runs")]
    return TunePromoteOut(**out, runs=runs)


@router.get("/model", response_model=ModelOut)
def served_model(runtime: RuntimeDep, caller: EvalRunner) -> ModelOut:
    """The index generation served now and the embedding model of its vectors, the previous one, and every switch."""
    return ModelOut.model_validate(Work(runtime).model(caller))


@router.post("/model/rollback", response_model=RollbackOut)
def rollback_model(runtime: RuntimeDep, caller: EvalAdmin) -> RollbackOut:
    """Serve the previous index generation again (and its model), copying what was written since: no gate, it is the
    way back. 409 when there is none."""
    with audited(runtime, caller, "model.rollback", "embedding model"):
        return RollbackOut.model_validate(Work(runtime).rollback(caller))
