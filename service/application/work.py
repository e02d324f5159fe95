"""Eval work beside runs, as a caller may use it: syntheses of day-0 sets (and the review of what they propose),
sweeps (and promoting a winner to the served defaults), answer gradings. Each runs in the background as a job
(progress, cancel) admitted like an eval run, and ends as a stored result of its own kind.

Roles: a synthesis writes into a set and spends the LLM's tokens, and its review changes a set: `eval:admin`, which
no tenant-bound key has (sets are shared; `tenant` in a synthesis confines it to one tenant's documents). A sweep or
an answer grading: `eval:run`; promoting a sweep's winner: `eval:admin`. A tenant-bound key works on its tenant only:
its sweep replays its tenant's cases over its tenant's documents, its gradings read its tenant's runs; it sees only
its tenant's results, and the drafts made from its tenant's documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eval import judge as jd
from eval import sweep as sw
from eval.cases import Case
from eval.errors import UnknownName
from eval.present import report_json
from eval.runner import new_run_id
from eval.verdict import GateRequest
from service.access.principals import Principal, require
from service.errors import Conflict, Forbidden, InvalidRequest, NotFound
from service.evaluation.answers import AnswersRequest, latest_recall, summary_of
from service.evaluation.retriever import Evaluation, tenant_cases
from service.evaluation.runs import run_spec
from service.evaluation.served import FIELDS
from service.evaluation.sweeps import SweepRequest, sweep_summary
from service.evaluation.synthesis import SynthesisRequest, proposals
from service.evaluation.tuning import (
    PHASES,
    TuneRequest,
    copied_generations,
    dropped,
    record_copied,
    tune_summary,
)
from service.index.generations import Generation, sync
from service.inputs import SearchOptions
from service.options import RunOptions, SearchOverrides
from service.runtime import Runtime
from service.state.jobs import LIVE, Job
from service.state.schema import now_iso
from service.state.work import StoredResult


@dataclass(frozen=True)
class WorkView:
    """A result as a caller sees it: its job's progress while it runs, its summary (or whole record) once done."""

    result: StoredResult
    job: Job | None

    @property
    def status(self) -> str:
        if self.job is None:
            return "done" if self.result.finished_at else "lost"
        if self.job.status == "done" and not self.result.finished_at:
            return "lost"
        return self.job.status

    def to_json(self, *, full: bool = False) -> dict[str, Any]:
        """As the API shows it (`WorkOut`); with `full`, the whole result once done."""
        r, job = self.result, self.job
        return {
            "id": r.result_id,
            "kind": r.kind,
            "set": r.set_name,
            "status": self.status,
            "progress": {"done": job.done, "total": job.total} if job is not None else None,
            "error": job.error if job is not None else None,
            "created_at": r.created_at,
            "finished_at": r.finished_at,
            "params": r.params,
            "summary": r.summary,
            "result": r.record if full else None,
        }


class Work:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    # -- shared ----------------------------------------------------------------------------------------------

    def view(self, caller: Principal, kind: str, result_id: str) -> WorkView:
        result = self.runtime.results.get(result_id)
        if result is None or result.kind != kind or (caller.tenant is not None and result.tenant != caller.tenant):
            raise NotFound(f"no {kind} with id {result_id!r}")
        return WorkView(result, self.runtime.evals.job(result_id))

    def listing(self, caller: Principal, kind: str, set_name: str | None, limit: int, offset: int) -> list[WorkView]:
        rows = self.runtime.results.listing(kind, set_name=set_name, tenant=caller.tenant, limit=limit, offset=offset)
        return [WorkView(r, self.runtime.evals.job(r.result_id)) for r in rows]

    def cancel(self, caller: Principal, kind: str, result_id: str) -> WorkView:
        """Stop work in progress: the key that started it may, and an `eval:admin` key."""
        view = self.view(caller, kind, result_id)
        job = view.job
        if job is None or job.status not in LIVE:
            raise Conflict(f"{kind} {result_id} is not in progress ({view.status}): there is nothing to cancel")
        if not caller.has("eval:admin") and (job.started_by is None or job.started_by != caller.key_id):
            raise Forbidden(
                f"{kind} {result_id} was started by another key: only it, or an eval:admin key, may stop it"
            )
        self.runtime.evals.cancel(result_id)
        return self.view(caller, kind, result_id)

    def _start(
        self,
        caller: Principal,
        kind: str,
        set_name: str,
        params: dict[str, Any],
        total: int,
        work: Callable[[str, Callable[[int, int], None]], tuple[dict[str, Any], dict[str, Any]]],
        *,
        result_id: str | None = None,
    ) -> str:
        """Record the result's row, then run `work(id, progress) -> (summary, record)` in the background."""
        results = self.runtime.results
        result_id = result_id or f"{new_run_id()}-{kind[:3]}"
        if self.runtime.results.get(result_id) is None:
            results.start(result_id, kind, set_name, caller.tenant, params)

        def body(progress: Callable[[int, int], None]) -> None:
            summary, record = work(result_id, progress)
            results.finish(result_id, summary, record)

        return self.runtime.evals.submit_work(
            result_id,
            kind=kind,
            set_name=set_name,
            total=total,
            tenant=caller.tenant,
            started_by=caller.key_id,
            work=lambda progress: body(progress),
        )

    # -- synthesis -------------------------------------------------------------------------------------------

    def synthesize(self, caller: Principal, req: SynthesisRequest) -> str:
        """Start a synthesis into set `req.set_name` (not a packaged set's name)."""
        require(caller, ("eval:admin",), "drafting a synthetic set")  # a role no tenant-bound key has: sets are shared
        if self.runtime.evals.sets.packaged(req.set_name):
            raise Conflict(
                f"set {req.set_name!r} ships with Plumbline and is read-only: draft into a set of your own name"
            )
        synthesizer = self.runtime.synthesizer()  # says what to set when no LLM is configured, before any job
        planned = synthesizer.plan(req)
        return self._start(caller, "synthesis", req.set_name, req.to_json(), len(planned), self._synthesis(req))

    def resume(self, caller: Principal, result_id: str) -> str:
        """Resume a synthesis that ended without finishing (failed, cancelled, lost): the passages it drafted from
        are skipped, the rest drafted, as first asked."""
        require(caller, ("eval:admin",), "drafting a synthetic set")
        view = self.view(caller, "synthesis", result_id)
        if view.status in LIVE or view.result.finished_at:
            raise Conflict(f"synthesis {result_id} is {view.status}: only one that ended unfinished can be resumed")
        req = SynthesisRequest.from_json(view.result.params)
        planned = self.runtime.synthesizer().plan(req)
        self.runtime.evals.forget_job(result_id)
        return self._start(
            caller, "synthesis", req.set_name, req.to_json(), len(planned), self._synthesis(req), result_id=result_id
        )

    def _synthesis(
        self, req: SynthesisRequest
    ) -> Callable[[str, Callable[[int, int], None]], tuple[dict[str, Any], dict[str, Any]]]:
        def work(result_id: str, progress: Callable[[int, int], None]) -> tuple[dict[str, Any], dict[str, Any]]:
            summary = self.runtime.synthesizer().run(result_id, req, progress)
            return summary, summary

        return work

    def proposals(
        self, caller: Principal, set_name: str, status: str | None, limit: int, offset: int
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        drafts = self.runtime.drafts
        listed = drafts.listing(set_name, status=status, tenant=caller.tenant, limit=limit, offset=offset)
        return list(proposals(listed)), drafts.counts(set_name, caller.tenant)

    def review(
        self, caller: Principal, set_name: str, ids: list[int] | None, status: str, reason: str | None
    ) -> list[int]:
        """Accept (into the set) or reject proposed drafts: those named, or with `ids` None every proposed one the
        caller may see. The ids changed."""
        require(caller, ("eval:admin",), "reviewing synthetic cases")
        if status not in ("accepted", "rejected"):
            raise InvalidRequest(f"status must be 'accepted' or 'rejected', got {status!r}")
        drafts = self.runtime.drafts
        visible = drafts.listing(set_name, status="proposed", tenant=caller.tenant, limit=1_000_000)
        allowed = {d.id for d in visible}
        if ids is None:
            chosen = sorted(allowed)
        else:
            unknown = [i for i in ids if i not in allowed]
            if unknown:
                raise NotFound(f"no proposed case of set {set_name!r} with id(s) {unknown[:10]}")
            chosen = ids
        if self.runtime.evals.sets.packaged(set_name):
            raise Conflict(f"set {set_name!r} ships with Plumbline and is read-only")
        return [d.id for d in drafts.review(chosen, status, caller.actor, reason)]

    # -- sweeps ----------------------------------------------------------------------------------------------

    def sweep(self, caller: Principal, req: SweepRequest, cases: Sequence[Case] | None = None) -> str:
        """Start a sweep of set `req.set_name` (or of `cases`, a file's, from the CLI)."""
        require(caller, ("eval:run", "eval:admin"), "a sweep")
        req = replace(req, tenant=caller.tenant)
        if cases is None:
            cases = self.runtime.evals.cases(req.set_name, tenant=caller.tenant)
        cases = tenant_cases(cases, caller.tenant)
        if not cases:
            raise InvalidRequest(f"set {req.set_name!r} has no case for tenant {caller.tenant!r}")
        sweeper = self.runtime.sweeper()
        configs = sweeper.configs(req)

        def work(result_id: str, progress: Callable[[int, int], None]) -> tuple[dict[str, Any], dict[str, Any]]:
            result = sweeper.run(result_id, req, cases, progress)
            return sweep_summary(result), result.to_json()

        return self._start(caller, "sweep", req.set_name, req.to_json(), len(configs) + 2, work)

    def promote(self, caller: Principal, result_id: str, baseline: str | None) -> tuple[dict[str, Any], Evaluation]:
        """Make a finished sweep's winner the served search defaults, through the gate: the sweep's set is run with
        the winner's parameters, gated against `baseline` (default: the baseline named like the set); only a pass
        promotes. A winner that changes the chunking cannot be served by the live index: `Conflict` saying how to
        re-ingest. The defaults as served now, and the gated run."""
        require(caller, ("eval:admin",), "promoting a sweep's winner to the served defaults")
        if caller.tenant is not None:
            raise Forbidden("the served defaults are every tenant's: a tenant-bound key cannot promote them")
        view = self.view(caller, "sweep", result_id)
        if view.result.record is None:
            raise Conflict(f"sweep {result_id} is {view.status}: only a finished sweep can be promoted")
        result = sw.SweepResult.from_json(view.result.record)
        winner = result.winner_row.config
        s = self.runtime.settings
        live = {"chunk_size": s.chunk_size, "chunk_overlap": s.chunk_overlap}
        changed = {k: v for k, v in winner.index_key().items() if live[k] != v}
        if changed:
            env = " ".join(f"PLUMBLINE_{k.upper()}={v}" for k, v in changed.items())
            raise Conflict(
                f"the winner changes the chunking ({env}): the live index cannot serve it. Re-ingest with {env} into "
                "a new data directory, check it there with `plumbline eval run`, then switch"
            )
        search = winner.search_part()
        overrides = {k: v for k, v in search.items() if k != "k"}
        params = view.result.params
        try:
            asked = SearchOverrides.of(SearchOptions.model_validate(overrides))
        except ValueError as exc:
            raise InvalidRequest(f"the winner's parameters are not a valid search: {exc}") from None
        options = RunOptions(
            view.result.set_name,
            asked,
            (1, 5, 10),
            params.get("unit", "chunk"),
            GateRequest(),
            baseline=baseline or view.result.set_name,
        )
        spec = run_spec(options, s, self.runtime.pipeline)
        evaluation = self.runtime.evals.evaluate(spec)
        if evaluation is None or evaluation.gate is None:
            raise Conflict("the winner's run was not gated: name a baseline to gate against")
        served = {name: value for name, value in search.items() if name in FIELDS}
        if evaluation.gate.passed:
            record = {"defaults": served, "sweep": result_id, "run_id": evaluation.run.run_id, "at": now_iso()}
            self.runtime.promote_served(record)
        return served, evaluation

    # -- answers ---------------------------------------------------------------------------------------------

    def grade(self, caller: Principal, req: AnswersRequest) -> str:
        require(caller, ("eval:run", "eval:admin"), "grading answers")
        req = replace(req, tenant=caller.tenant)
        grader = self.runtime.grader()
        try:
            cases = tenant_cases(self.runtime.evals.cases(req.set_name, tenant=caller.tenant), caller.tenant)
        except Exception:  # a set known by name only through these answers: no references
            cases = []
        items = grader.prepare(req, cases)
        threshold = self.runtime.settings.answer_recall_threshold

        def work(_: str, progress: Callable[[int, int], None]) -> tuple[dict[str, Any], dict[str, Any]]:
            grades, usage = grader.grade(items, req.samples, progress)
            recall, run_id = latest_recall(self.runtime.evals.runs, req.set_name, caller.tenant)
            report = jd.AnswerReport.build(
                grades, judge_model=grader.model, samples_per_item=req.samples, set_name=req.set_name
            )
            record = {
                **report.to_json(),
                "retrieval": {
                    "run_id": run_id,
                    "recall@10": recall,
                    "threshold": threshold,
                    "note": report.retrieval_note(recall, threshold),
                },
                "usage": usage,
                "contexts_from": req.run_id,
            }
            return summary_of(record), record

        params = {"set": req.set_name, "run_id": req.run_id, "k": req.k, "samples": req.samples, "items": len(items)}
        return self._start(caller, "answers", req.set_name, params, len(items), work)

    # -- tuning ----------------------------------------------------------------------------------------------

    @staticmethod
    def _model_admin(caller: Principal, doing: str) -> None:
        require(caller, ("eval:admin",), doing)
        if caller.tenant is not None:
            raise Forbidden("the embedding model serves every tenant: a tenant-bound key cannot change it")

    def tune(self, caller: Principal, req: TuneRequest) -> str:
        """Start a tune of the served embedding model on `req.sets` (`service.evaluation.tuning`); one at a time."""
        self._model_admin(caller, "tuning the embedding model")
        tuner = self.runtime.tuner()  # a backend that cannot tune says so before any job
        busy = [v.result.result_id for v in self.listing(caller, "tune", None, 20, 0) if v.status in LIVE]
        if busy:
            raise Conflict(f"tune {busy[0]} is in progress: wait for it, or cancel it")
        cases = {name: self.runtime.evals.cases(name) for name in req.sets}
        empty = [name for name, found in cases.items() if not found]
        if empty:
            raise InvalidRequest(f"set(s) {empty} have no case: label some first")

        def work(result_id: str, progress: Callable[[int, int], None]) -> tuple[dict[str, Any], dict[str, Any]]:
            record = tuner.run(result_id, req, cases, progress)
            return tune_summary(record), record

        return self._start(caller, "tune", req.sets[0], req.to_json(), len(PHASES), work)

    def promote_tune(self, caller: Principal, result_id: str, baseline: str | None) -> dict[str, Any]:
        """Serve a finished tune's generation, through the gate: refused when its held-out comparison says it is worse
        (or gains less than asked); else the writes made to the live index since it was built are copied into it, each
        of its sets that has a baseline (`baseline` for all, default: the one named like the set) is run on it and
        gated, and only if every gate passes (at least one) does the service switch to it (copying what changed
        meanwhile). What was decided, with the runs and the documents copied."""
        self._model_admin(caller, "promoting a tuned model")
        view = self.view(caller, "tune", result_id)
        record = view.result.record
        if record is None:
            raise Conflict(f"tune {result_id} is {view.status}: only a finished tune can be promoted")
        generations = self.runtime.generations
        gen = Generation.of(record["generation"])
        if generations.serving().name == gen.name:
            raise Conflict(f"tune {result_id}'s generation {gen.name} is served already")
        if dropped(record, generations):
            raise Conflict(f"tune {result_id}'s generation {gen.name} was removed by a later tune: run it again")
        out: dict[str, Any] = {"tune": result_id, "generation": gen.name, "promoted": False, "runs": []}
        if not record["promotable"]:
            return {**out, "refusal": record["refusal"]}
        known, synced, evaluations = self._gate_generation(gen, view.result.params["sets"], baseline)
        out["runs"] = [{"set": name, "evaluation": ev} for name, ev in evaluations]
        out["copied"] = {"before_gate": synced["written"], "deleted_before_gate": synced["deleted"]}
        gated = [(name, ev.gate) for name, ev in evaluations if ev is not None and ev.gate is not None]
        failed = [name for name, gate in gated if not gate.passed]
        if not gated:
            return {**out, "refusal": "no set of this tune has a baseline to gate against: promote one first"}
        if failed:
            return {**out, "refusal": f"the gate failed on set(s) {failed}"}
        copied = self.runtime.switch_generation(gen, known=known, reason=f"tune {result_id} promoted")
        out.update(promoted=True, refusal=None, copied={**out["copied"], **copied})
        return {**out, "no_answer": self.runtime.relearn_no_answer()}

    def _gate_generation(
        self, gen: Generation, sets: Sequence[str], baseline: str | None
    ) -> tuple[dict[str, int], dict[str, int], list[tuple[str, Evaluation | None]]]:
        """Generation `gen` brought up to date with the live index, then each set run on it and gated against its
        baseline (None for a set without one). The live documents' generations copied from (what the switch copies
        on top of), the counts of that copy, and the runs."""
        index, pipeline = self.runtime.open_generation(gen)
        out: list[tuple[str, Evaluation | None]] = []
        try:
            generations = self.runtime.generations
            known, synced = sync(self.runtime.index, index, copied_generations(generations, gen))
            record_copied(generations, gen, known)  # a later promotion copies on top of this
            for name in sets:
                wanted = baseline or name
                try:
                    self.runtime.evals.runs.located(wanted)
                except UnknownName:
                    out.append((name, None))
                    continue
                options = RunOptions(name, SearchOverrides(), (1, 5, 10), "chunk", GateRequest(), baseline=wanted)
                out.append((name, self.runtime.evals.evaluate(run_spec(options, self.runtime.settings, pipeline))))
        finally:
            pipeline.store.close()
        return known, synced, out

    def rollback(self, caller: Principal) -> dict[str, Any]:
        """Serve the previous generation again (no gate: the way back), copying the writes made since."""
        self._model_admin(caller, "rolling the embedding model back")
        generations = self.runtime.generations
        previous = generations.previous()
        if previous is None:
            raise Conflict("no earlier generation to roll back to: the served one is the first")
        generations.check_served(previous)
        copied = self.runtime.switch_generation(previous, known=None, reason="rollback")
        no_answer = self.runtime.relearn_no_answer()
        return {"generation": previous.name, "model": previous.model, "copied": copied, "no_answer": no_answer}

    def model(self, caller: Principal) -> dict[str, Any]:
        """The served generation and model, the previous one, and the switches so far."""
        require(caller, ("eval:run", "eval:admin"), "reading the served model")
        generations = self.runtime.generations
        previous = generations.previous()
        return {
            "serving": generations.serving().to_json(),
            "previous": previous.to_json() if previous else None,
            "history": generations.history(),
        }


def promotion_run(evaluation: Evaluation | None) -> dict[str, Any] | None:
    """A promotion's gated run as the API shows it (its verdict, no cases); None for a set that was not gated."""
    return report_json(evaluation.run, evaluation.report, evaluation.gate, cases=False) if evaluation else None
