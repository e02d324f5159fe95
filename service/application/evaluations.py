"""Eval runs, sets and baselines as a caller may use them. A tenant-bound key's runs replay its tenant's cases over
its tenant's documents; it sees its own tenant's runs and cases only (other runs read as absent) and cannot start a
monitoring run. A monitoring run, and cancelling one, need `eval:admin`; cancelling another key's run too (the key
that started a background run may cancel it); shadowing a packaged set or baseline, `admin`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from eval.cases import Case, dump_jsonl
from eval.distractors import WhatIf, what_if
from eval.gate import Judging, judging
from eval.runner import KINDS, Run
from eval.storage import Baseline, RunSummary
from eval.verdict import GatePolicy, GateRequest
from service.access.principals import Principal, require, visible
from service.errors import Conflict, Forbidden, InvalidRequest, NotFound, NotReady
from service.evaluation.hygiene import Hygiene, HygieneService
from service.evaluation.retriever import Evaluation, tenant_cases
from service.evaluation.runs import EvalService, RunSpec, run_spec
from service.filters import FilterSpec
from service.options import RunOptions
from service.retrieval.pipeline import SearchPipeline
from service.settings import Settings
from service.state.jobs import Job


@dataclass(frozen=True)
class SetInfo:
    name: str
    cases: int  # the cases the caller's runs would replay, counted incidents included
    source: str | None


RECENT_RUNS = 50  # the most monitoring runs of a set one distractor report reads


class Evaluations:
    def __init__(
        self, evals: EvalService, settings: Settings, hygiene: Callable[[], HygieneService] | None = None
    ) -> None:
        self.evals = evals
        self.settings = settings
        self.hygiene = hygiene  # the index's side of distractor reports (None where there is no index)

    def authorize(self, caller: Principal, *, monitoring: bool) -> None:
        """Refuse a run the caller may not start, before anything it asks for is looked at (the API calls this before
        it turns a request into options, so that a caller without the right learns nothing from a 422)."""
        if monitoring:
            if caller.tenant is not None:
                raise Forbidden("a monitoring run covers every tenant: a tenant-bound key cannot start one")
            # it feeds the gauges and alerts with its own tolerance and baseline: not for a key that merely runs evals
            require(caller, ("eval:admin",), "a monitoring run")

    def _spec(self, caller: Principal, options: RunOptions, pipeline: SearchPipeline) -> RunSpec:
        self.authorize(caller, monitoring=options.monitoring)
        return run_spec(replace(options, tenant=caller.tenant), self.settings, pipeline)

    def run(self, caller: Principal, options: RunOptions, pipeline: SearchPipeline) -> tuple[RunSpec, Evaluation]:
        """Run the set and wait (within the service's time limit)."""
        spec = self._spec(caller, options, pipeline)
        ev = self.evals.evaluate(spec)
        if ev is None:  # only a scheduled run asks to run just when due
            raise Conflict("the run was not due")
        return spec, ev

    def what_if(
        self, caller: Principal, options: RunOptions, exclude: FilterSpec, pipeline: SearchPipeline
    ) -> tuple[Evaluation, Evaluation, WhatIf]:
        """Run the set twice, as asked and with the documents `exclude` names left out (ids, or any of its tags), as
        experiments that no gate judges, and compare them case by case (`eval.distractors.what_if`): what pruning
        those documents would do, before anything is archived. The run without the exclusion, the one with it, and
        the comparison."""
        if options.monitoring or options.baseline:
            raise InvalidRequest(
                "a what-if run (exclude) is an experiment: no baseline, no monitoring; gate the configuration you "
                "adopt afterwards"
            )
        if not exclude.exclude_doc_ids and not exclude.exclude_tags:
            raise InvalidRequest("exclude names nothing: give doc_ids or tags to leave out")
        filters = options.search.filters.merged(exclude)
        given = {**options.search.given}
        given["filters"] = {
            **dict(given.get("filters", {})),
            "exclude_doc_ids": list(filters.exclude_doc_ids),
            "exclude_tags": list(filters.exclude_tags),
        }
        pruned = replace(options, search=replace(options.search, filters=filters, given=given))
        base = self.evals.evaluate(self._spec(caller, options, pipeline))
        after = self.evals.evaluate(self._spec(caller, pruned, pipeline))
        if base is None or after is None:  # only a scheduled run asks to run just when due
            raise Conflict("the run was not due")
        return base, after, what_if(base.run, after.run)

    def distractors(
        self,
        caller: Principal,
        *,
        run_id: str | None = None,
        set_name: str | None = None,
        recent: int = 5,
        k: int | None = None,
        limit: int = 20,
    ) -> Hygiene:
        """The documents that took top-k slots without answering in run `run_id`, or over set `set_name`'s `recent`
        monitoring runs (for a tenant-bound key, the runs confined to its tenant: its manual and experiment runs,
        since monitoring runs cover every tenant); a tenant-bound key never sees another tenant's document."""
        if self.hygiene is None:
            raise NotReady("distractor reports need the index")
        if run_id is not None:
            runs = [self.stored_run(caller, run_id)]
        else:
            kind = "monitoring" if caller.tenant is None else None
            listed = self.evals.runs.summaries(min(recent, RECENT_RUNS), 0, set_name, kind, caller.tenant)
            runs = [self.evals.runs.get(r.run_id) for r in listed]
            if not runs:
                raise NotFound(f"set {set_name!r} has no {kind or 'stored'} run to report on: run it first")
        return self.hygiene().distractors(runs, k=k, limit=limit, visible=lambda t: visible(caller, t))

    def submit(self, caller: Principal, options: RunOptions, pipeline: SearchPipeline) -> tuple[RunSpec, str]:
        """Start the run in the background; its id."""
        spec = self._spec(caller, options, pipeline)
        return spec, self.evals.submit(spec, started_by=caller.key_id)

    def job(self, caller: Principal, run_id: str) -> Job:
        """A background run's state, if the caller may see it."""
        job = self.evals.job(run_id)
        if job is None or job.kind not in KINDS or (caller.tenant is not None and job.tenant != caller.tenant):
            raise NotFound(f"no run with id {run_id!r}")
        return job

    def stored_run(self, caller: Principal, run_id: str) -> Run:
        """A stored run the caller may read: a tenant-bound key reads its tenant's runs only (others are absent)."""
        run = self.evals.runs.get(run_id)
        if caller.tenant is not None and run.tenant != caller.tenant:
            raise NotFound(f"no run with id {run_id!r}")
        return run

    def delete_run(self, caller: Principal, run_id: str) -> Run:
        """Remove a stored run; the run as it was. A tenant-bound key removes its tenant's runs (what frees its
        `PLUMBLINE_TENANT_MAX_RUNS`); a run over every tenant, or a monitoring run, needs `eval:admin`."""
        run = self.stored_run(caller, run_id)
        if run.tenant is None or run.kind == "monitoring":
            require(caller, ("eval:admin",), "deleting a run over every tenant, or a monitoring run")
        self.evals.runs.delete(run_id)
        return run

    def runs(
        self, caller: Principal, limit: int, offset: int, set_name: str | None, kind: str | None
    ) -> list[RunSummary]:
        return self.evals.runs.summaries(limit, offset, set_name, kind, caller.tenant)

    def cancel(self, caller: Principal, run_id: str) -> Job:
        """Ask a background run to stop; the job as it was. The key that started it may, and an `eval:admin` key
        (a monitoring run: only an `eval:admin` key); a run without a recorded key (started with auth off, or
        before keys were recorded) only an `eval:admin` key."""
        job = self.job(caller, run_id)
        if job.kind == "monitoring":
            require(caller, ("eval:admin",), "cancelling a monitoring run")
        elif not caller.has("eval:admin") and (job.started_by is None or job.started_by != caller.key_id):
            raise Forbidden(
                f"run {run_id} was started by another key: only that key, or one with the role 'eval:admin', may "
                "cancel it"
            )
        self.evals.cancel(run_id)
        return job

    def promote(
        self, caller: Principal, run_id: str, name: str, policy: GatePolicy, *, replace: bool, shadow: bool
    ) -> tuple[Baseline, str | None]:
        """Promote a run over every tenant to baseline `name`, judged by `policy`; the baseline as stored and the run
        id it replaced, if any."""
        if shadow:
            require(caller, ("admin",), "shadowing a packaged baseline")
        if self.evals.runs.get(run_id).tenant is not None:
            raise InvalidRequest(f"run {run_id} was confined to one tenant: it cannot be a baseline for all")
        return self.evals.runs.promote(run_id, name, policy, replace=replace, shadow=shadow)

    def baseline(self, name: str) -> tuple[Baseline, Judging]:
        """A baseline, and the policy a run gated against it is judged by unless it asks for a stricter one (its own,
        or the service's default for a baseline stored before policies were)."""
        found = self.evals.runs.located(name)
        default = GatePolicy(fail_on_regressed=self.settings.fail_on_regressed_incidents)
        return found, judging(found.run, found.policy, default, GateRequest())

    def sets(self, caller: Principal) -> list[SetInfo]:
        return [
            SetInfo(
                n,
                len(tenant_cases(self.evals.cases(n, tenant=caller.tenant), caller.tenant)),
                self.evals.sets.source(n),
            )
            for n in self.evals.set_names()
        ]

    def export_set(self, caller: Principal, name: str, *, incidents: bool) -> str:
        """The set as JSON Lines, as stored or packaged, or with `incidents` as a run sees it; for a tenant-bound key,
        its tenant's cases only."""
        evals = self.evals
        if caller.tenant is not None:
            cases = evals.cases(name, tenant=caller.tenant) if incidents else evals.sets.get(name)
            return dump_jsonl(tenant_cases(cases, caller.tenant))
        return dump_jsonl(evals.cases(name)) if incidents else evals.sets.text(name)

    def put_set(self, caller: Principal, name: str, body: bytes, *, shadow: bool) -> list[Case]:
        """Replace a set with a JSON Lines body."""
        if shadow:
            require(caller, ("admin",), "shadowing a packaged set")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("the body is not UTF-8 text: send the set as JSON Lines") from None
        return self.evals.put_set(name, text, shadow=shadow)
