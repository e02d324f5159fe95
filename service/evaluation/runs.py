"""Eval runs as a service: a run asked for resolved over the served configuration (`run_spec`), a set's cases and
baseline resolved, the run executed in the foreground or in the background (slots, the monitoring lease, progress,
heartbeat, cancel), gated, stored, and its incident outcomes recorded."""

from __future__ import annotations

import copy
import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

from eval.cases import Case
from eval.errors import EvalError, UnknownName
from eval.gate import Judging, judging
from eval.incidents import CASE_PREFIX, incident_id
from eval.matching import Unit
from eval.report import Report, build_report
from eval.runner import Run, new_run_id, run_set
from eval.storage import Baseline, RunStore, SetStore
from eval.verdict import BaselineRef, GatePolicy, GateRequest
from service.errors import (
    Busy,
    Cancelled,
    Conflict,
    InsufficientStorage,
    InvalidRequest,
    NotReady,
    PlumblineError,
    StoreUnavailable,
    TimedOut,
    public,
)
from service.evaluation.admission import Admission, Ticket, withdrawn
from service.evaluation.incidents import IncidentService
from service.evaluation.retriever import Evaluation, PipelineRetriever, tenant_cases, unknown_documents
from service.filters import parse_filters
from service.infra.faults import crash_point
from service.options import RunOptions, SearchOverrides
from service.retrieval.pipeline import SearchParams, SearchPipeline, describe, search_params
from service.settings import Settings
from service.state.jobs import LIVE, Job, JobRecords, LeaseRecords

log = logging.getLogger("plumbline")


RECENT_JOBS_SECONDS = 86_400.0  # the window of `plumbline_eval_jobs_recent`
LEASE_SECONDS = 300.0  # a monitoring run renews its set's lease before every batch; a dead replica's expires


PROGRESS_LOG_SECONDS = 10.0  # a run logs its progress this often


# a queued background run writes its job's heartbeat this often (well under jobs.LOST_AFTER), and learns then of a
# cancel asked for on another replica
QUEUE_HEARTBEAT_SECONDS = 30.0


@dataclass(frozen=True)
class RunSpec:
    """What to run besides the cases: the pipeline and its parameters, the set, and how to gate and file it.
    `baseline` None on a monitoring run means the baseline named like the set, when there is one. The gate judges by
    the baseline's policy (`default_policy` for one that carries none) made stricter as `gate` asks: `judging`, once
    the baseline is loaded."""

    pipeline: SearchPipeline
    base: SearchParams
    set_name: str
    ks: Sequence[int]
    unit: Unit
    params_record: Mapping[str, Any]
    gate: GateRequest
    default_policy: GatePolicy
    kind: str = "manual"  # eval.runner.KINDS
    baseline: str | None = None
    tenant: str | None = None  # a tenant-bound caller's: the run sees that tenant's cases and documents only
    judging: Judging | None = None  # set with the baseline (`EvalService._prepare`)


def run_spec(options: RunOptions, s: Settings, pipeline: SearchPipeline) -> RunSpec:
    """The run `options` asks for, over `pipeline` and the served configuration; a monitoring run that overrides
    anything is an `InvalidRequest`."""
    if options.search.given and options.monitoring:
        raise InvalidRequest(
            "a monitoring run replays the served configuration: drop `overrides`, or run it as an experiment"
        )
    base = search_params(s, options.search, reranker_configured=pipeline.reranker is not None)
    return RunSpec(
        pipeline,
        base,
        options.set_name,
        tuple(options.ks),
        options.unit,
        {**_run_params(base, options.search), "model": pipeline.embedder.name},
        options.gate,
        GatePolicy(fail_on_regressed=s.fail_on_regressed_incidents),
        kind="experiment" if options.search.given else ("monitoring" if options.monitoring else "manual"),
        baseline=options.baseline,
        tenant=options.tenant,
    )


def _run_params(params: SearchParams, asked: SearchOverrides) -> dict[str, Any]:
    """The search parameters an eval run records (per-query fields left out), and the overrides asked for."""
    out = describe(params, asked)
    for per_query in ("k", "explain", "distinct_docs"):
        del out[per_query]
    if asked.given:
        out["overrides"] = copy.deepcopy(dict(asked.given))
    return out


@dataclass(frozen=True)
class Monitored:
    """A set's latest monitoring run as the gauges show it, and the baseline it was gated against."""

    evaluation: Evaluation
    baseline: Report | None


class EvalService:
    """Runs, stores and gates evaluations; runs them in the background with progress and cancel; keeps one
    replica at a time on a set's monitoring run; and gives the gauges the latest monitoring run of each set.

    At most `max_concurrent` runs at once in this process, admitted fairly (`admission.Admission`): with more than
    one slot the last is kept for monitoring runs, which never queue; another run that finds no slot waits in its
    caller group's queue (a tenant; the unbound keys; at most `queue_per_group` runs), and the group served least
    recently has the next slot. A run waited on waits at most `queue_wait` seconds for its turn (then `Busy`); a
    background run's job reads `queued` until its turn. A run asked for over HTTP, waited on or in the background, is
    stopped between two batches of questions once it has run `timeout` seconds (`TimedOut`; a background run's job
    ends `failed`); the scheduler's and the CLI's runs (`limited=False`) have no limit. A background run can be
    cancelled, queued or running.
    """

    def __init__(
        self,
        sets: SetStore,
        runs: RunStore,
        *,
        jobs: JobRecords | None = None,
        leases: LeaseRecords | None = None,
        incidents: IncidentService | None = None,
        max_concurrent: int = 2,
        queue_per_group: int = 4,
        queue_wait: float = 30.0,
        tenant_max_runs: int = 0,
        timeout: float = 600.0,
        reserve_space: Callable[[int], None] = lambda _: None,
        corpus: Callable[[str | None], Mapping[str, int]] | None = None,
    ) -> None:
        self.sets = sets
        # the corpus a run replays over (documents, chunks; a tenant's documents for a run confined to it), recorded
        # in its params, so a precision drop can be read against growth
        self.corpus = corpus
        self.runs = runs
        self.jobs = jobs
        self.leases = leases
        self.incidents = incidents
        self.reserve_space = reserve_space  # raises InsufficientStorage before a write the disk cannot take
        self.timeout = timeout
        self.tenant_max_runs = tenant_max_runs  # runs stored per tenant (runs confined to one); 0: no cap
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"  # this process, in leases and jobs
        self._admission = Admission(max_concurrent, queue_per_group, wait=queue_wait)  # this process's slots
        self._monitored: dict[str, Monitored] = {}  # by set, for the gauges; reloaded when a newer run lands
        self.stale = False  # the last read of the state store for the gauges failed: they show the last known
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._leased: set[str] = set()  # leases this process holds for its runs

    def evaluate(
        self,
        spec: RunSpec,
        *,
        if_older_than: float | None = None,
        limited: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> Evaluation | None:
        """Run a stored set, gated against a stored baseline, both by name, and wait for it (HTTP, the scheduler,
        the CLI). `if_older_than` (seconds): run only if the set's latest monitoring run is older, checked under
        the set's lease, so that replicas sharing a schedule run it once; None if it was not due. `limited`: stop
        past the `timeout` (a caller waiting on HTTP). `progress(done, total)` is called before each batch."""
        if if_older_than is not None and not self.monitoring_due(spec.set_name, if_older_than):
            return None  # the cheap check first; it is made again under the lease
        spec, cases, reference = self._prepare(spec)
        with self._slot(spec), self._monitoring_lease(spec):
            if if_older_than is not None and not self.monitoring_due(spec.set_name, if_older_than):
                return None
            deadline = self.timeout if limited else None
            return self._execute(spec, cases, reference, run_id=new_run_id(), deadline=deadline, progress=progress)

    def submit(self, spec: RunSpec, *, started_by: str | None = None) -> str:
        """Start a run in the background and return its id at once; `job(id)` shows its progress, `cancel(id)`
        stops it. With no slot free for it, it waits its turn in its caller group's queue (its job reads `queued`).
        Refused at once (`Busy`) when that queue is full, or, for a monitoring run, when no slot is free or the set's
        monitoring lease is taken. Like a run waited on, it stops past `timeout` seconds once started (its job ends
        `failed`, naming the limit). `started_by`: the id of the API key that asked for it (its job records it: who
        may cancel it)."""
        if self.jobs is None:
            raise NotReady("background runs need the state store")
        spec, cases, reference = self._prepare(spec)
        run_id = new_run_id()
        # under the foreground's limit, so a background run cannot hold a slot for ever; a monitoring run (eval:admin
        # only, e.g. the CronJob's) may take as long as its set needs, as the scheduler's does
        limit = None if spec.kind == "monitoring" else self.timeout

        def work() -> None:
            self._execute(spec, cases, reference, run_id=run_id, deadline=limit, jobs=self.jobs)

        return self._background(
            run_id,
            kind=spec.kind,
            set_name=spec.set_name,
            total=len(cases),
            tenant=spec.tenant,
            started_by=started_by,
            work=work,
            lease=self._monitoring_lease(spec),
        )

    def submit_work(
        self,
        job_id: str,
        *,
        kind: str,
        set_name: str,
        total: int,
        tenant: str | None,
        started_by: str | None,
        work: Callable[[Callable[[int, int], None]], None],
    ) -> str:
        """Start eval work other than a run (a synthesis, a sweep, an answer grading) in the background under job
        `job_id`, admitted like a run (a slot, or its turn in its caller group's queue). `work(progress)` does it,
        calling `progress(done, total)` as it goes, which records the job's progress and raises `Cancelled` once a
        cancel is asked for (or the service shuts down); the job ends `done` when `work` returns, else `failed`."""
        if self.jobs is None:
            raise NotReady("background work needs the state store")
        jobs = self.jobs

        def tracked() -> None:
            def progress(done: int, total_now: int) -> None:
                if jobs.progress(job_id, done):
                    raise Cancelled(f"{kind} {job_id} was cancelled after {done} of {total_now}")
                if self._stopping.is_set():
                    raise Cancelled(
                        f"{kind} {job_id} stopped after {done} of {total_now}: the service is shutting down"
                    )

            work(progress)
            self._finish_job(job_id, "done")

        return self._background(
            job_id, kind=kind, set_name=set_name, total=total, tenant=tenant, started_by=started_by, work=tracked
        )

    def _background(
        self,
        job_id: str,
        *,
        kind: str,
        set_name: str,
        total: int,
        tenant: str | None,
        started_by: str | None,
        work: Callable[[], None],
        lease: AbstractContextManager[None] | None = None,
    ) -> str:
        """Admit `work` (a slot, or a place in its caller group's queue: its job reads `queued`), record its job, and
        run it in a thread that waits its turn first; a failure or a cancel ends the job `failed` or `cancelled`."""
        jobs = self.jobs
        assert jobs is not None  # the callers checked
        held = ExitStack()  # the slot (or place in the queue) and the lease, handed to the thread, released at its end
        with held:
            ticket = self._admission.ask(tenant, monitoring=kind == "monitoring", label=job_id)
            held.callback(self._admission.leave, ticket)
            if lease is not None:
                held.enter_context(lease)
            queued = not ticket.granted
            jobs.start(job_id, set_name, kind, total, self.owner, tenant, started_by=started_by, queued=queued)
            held = held.pop_all()

        def body() -> None:
            with held:
                try:
                    if queued:
                        self._await_turn(ticket, job_id, jobs)
                    work()
                except Exception as exc:  # the job records it; nobody waits on this thread
                    cancelled = isinstance(exc, Cancelled)
                    if isinstance(exc, TimedOut):
                        log.warning("%s %s failed: %s", kind, job_id, exc)
                    elif not cancelled:
                        log.exception("%s %s failed", kind, job_id)
                    self._finish_job(job_id, "cancelled" if cancelled else "failed", public(str(exc)))

        thread = threading.Thread(target=body, name=f"plumbline-eval-{job_id}", daemon=True)
        thread.start()
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        return job_id

    def _await_turn(self, ticket: Ticket, run_id: str, jobs: JobRecords) -> None:
        """Wait for a queued background run's turn, writing its job's heartbeat every QUEUE_HEARTBEAT_SECONDS (so that
        it does not read as lost), then mark it running. `Cancelled` if it is cancelled meanwhile (here: at once; on
        another replica: by the next heartbeat, its job already `cancelled`) or the process shuts down."""
        while not self._admission.wait(ticket, QUEUE_HEARTBEAT_SECONDS):
            if jobs.progress(run_id, 0):
                raise Cancelled(withdrawn(run_id))
        if not jobs.begin(run_id):
            raise Cancelled(withdrawn(run_id))

    def forget_job(self, run_id: str) -> None:
        """Drop an ended (or lost) job's record, so that work resumed under its id can start a new one."""
        if self.jobs is not None:
            self.jobs.forget(run_id)

    def job(self, run_id: str) -> Job | None:
        return self.jobs.get(run_id) if self.jobs is not None else None

    def cancel(self, run_id: str) -> None:
        """Ask a background run to stop; it does before its next batch of questions, or before it is stored (on
        whichever replica runs it). A queued run ends `cancelled` at once, and leaves its queue (on another replica:
        by its next heartbeat). A run that is neither (finished, or lost with its replica) is a 409."""
        job = self.job(run_id)
        if job is None:
            self.runs.get(run_id)  # UnknownName (404) for an id nothing knows
            raise Conflict(f"run {run_id} is not a background run in progress: there is nothing to cancel")
        if job.status not in LIVE or self.jobs is None or not self.jobs.cancel(run_id, withdrawn(run_id)):
            raise Conflict(f"run {run_id} is not running ({job.status}): there is nothing to cancel")
        self._admission.cancel(run_id)

    def wait(self, timeout: float | None = None) -> None:
        """Wait up to `timeout` seconds in all for this process's background runs to end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop this process's background runs at their next batch, and end its queued ones (their jobs read
        `cancelled`, saying why), and wait."""
        self._stopping.set()
        self._admission.close()
        self.wait(timeout)

    def evaluate_cases(
        self,
        spec: RunSpec,
        cases: Sequence[Case],
        reference: Baseline | None,
        *,
        timeout: float | None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Evaluation:
        """Run `cases` (the CLI's path, which may load them from a file), gated against `reference`, and wait.
        `timeout` None: no time limit."""
        spec = self._judged(spec, reference)
        with self._slot(spec), self._monitoring_lease(spec):
            return self._execute(spec, cases, reference, run_id=new_run_id(), deadline=timeout, progress=progress)

    def _prepare(self, spec: RunSpec) -> tuple[RunSpec, list[Case], Baseline | None]:
        """The set's cases and the baseline to gate against (a monitoring run's default: the one named like the
        set, if any) with the policy it judges by, loaded before the run so that a bad name or a gate looser than
        the baseline's policy fails fast."""
        self._check_tenant_cap(spec.tenant)
        cases = tenant_cases(self.cases(spec.set_name, tenant=spec.tenant), spec.tenant)
        if not cases:
            raise EvalError(f"set {spec.set_name!r} has no case for tenant {spec.tenant!r}")
        record = {**spec.params_record, "set_source": self.sets.source(spec.set_name)}
        if self.corpus is not None:
            record["corpus"] = dict(self.corpus(spec.tenant))
        spec = replace(spec, params_record=record)
        reference = None
        if spec.baseline is None and spec.kind == "monitoring":
            with suppress(UnknownName):
                reference = self.runs.located(spec.set_name)
                spec = replace(spec, baseline=spec.set_name)
        elif spec.baseline:
            reference = self.runs.located(spec.baseline)
        return self._judged(spec, reference), cases, reference

    def _check_tenant_cap(self, tenant: str | None) -> None:
        """Refuse (507) a run confined to a tenant that has `tenant_max_runs` runs stored, before it starts (runs
        over every tenant are not capped)."""
        if tenant is None or not self.tenant_max_runs:
            return
        held = self.runs.count(tenant)
        if held >= self.tenant_max_runs:
            raise InsufficientStorage(
                f"tenant {tenant!r} has {held:,} eval runs stored, its cap (PLUMBLINE_TENANT_MAX_RUNS): no run for it "
                "is stored until the operator removes old runs or raises the cap"
            )

    @staticmethod
    def _judged(spec: RunSpec, reference: Baseline | None) -> RunSpec:
        """`spec` with the policy its gate judges by: `reference`'s, made stricter as the caller asked (refused,
        `LooserThanPolicy`, if anything asked is looser)."""
        GatePolicy(metrics=spec.gate.metrics).check_names(spec.ks)
        if reference is None:
            return spec
        return replace(spec, judging=judging(reference.run, reference.policy, spec.default_policy, spec.gate))

    @contextmanager
    def _slot(self, spec: RunSpec) -> Iterator[None]:
        """Hold a slot for a run waited on: at once, or in its turn within `queue_wait` seconds (`Admission.take`;
        else `Busy`, naming the rule)."""
        ticket = self._admission.take(spec.tenant, monitoring=spec.kind == "monitoring")
        try:
            yield
        finally:
            self._admission.leave(ticket)

    @contextmanager
    def _monitoring_lease(self, spec: RunSpec) -> Iterator[None]:
        """For a monitoring run, hold the set's lease (one replica at a time; `Busy` if another holds it)."""
        if spec.kind != "monitoring" or self.leases is None:
            yield
            return
        name = f"monitoring:{spec.set_name}"
        with self._lock:  # the lease is this process's: a second run here must not take it over
            taken = name in self._leased or not self.leases.acquire(name, self.owner, LEASE_SECONDS)
            if not taken:
                self._leased.add(name)
        if taken:
            raise Busy(
                f"a monitoring run of set {spec.set_name!r} is already in progress "
                f"({self.leases.holder(name) or 'another replica'}); it will refresh the gauges when it ends"
            )
        try:
            yield
        finally:
            with self._lock:
                self._leased.discard(name)
            try:
                self.leases.release(name, self.owner)
            except PlumblineError as exc:  # the store is down: the lease expires by itself
                log.warning("could not release lease %s: %s", name, exc)

    def monitoring_due(self, set_name: str, interval: float) -> bool:
        """True if the set has no monitoring run, or its latest started over `interval` seconds ago."""
        latest = self.runs.latest_ids("monitoring").get(set_name)
        if latest is None:
            return True
        started = dt.datetime.strptime(latest.split("-")[0], "%Y%m%dT%H%M%S%f").replace(tzinfo=dt.UTC)
        return (dt.datetime.now(dt.UTC) - started).total_seconds() >= interval

    def _execute(
        self,
        spec: RunSpec,
        cases: Sequence[Case],
        reference: Baseline | None,
        *,
        run_id: str,
        deadline: float | None,
        progress: Callable[[int, int], None] | None = None,
        jobs: JobRecords | None = None,
    ) -> Evaluation:
        """The one orchestration of an eval run: replay (reporting progress, renewing the lease, honouring a
        deadline or a cancel), gate, store the run with its verdict, record its incident outcomes. Only runs
        of the served configuration (not experiments) decide that an incident passed, so that it can regress."""
        retriever = PipelineRetriever(spec.pipeline, spec.base, spec.tenant)
        check = self._progress(spec, run_id, deadline, progress, jobs)
        run = run_set(
            cases,
            retriever,
            set_name=spec.set_name,
            ks=spec.ks,
            unit=spec.unit,
            params=spec.params_record,
            before_batch=check,
            run_id=run_id,
        )
        check(len(cases), len(cases))  # once more before it is stored: a cancel, the lease, the deadline
        run = replace(run, kind=spec.kind, tenant=spec.tenant)
        outcomes = self._incident_outcomes(run)
        run = replace(run, incident_outcomes={f"{CASE_PREFIX}{i}": outcome for i, outcome in outcomes.items()})
        gate = spec.judging.compare(run, reference.run) if reference and spec.judging else None
        if gate is not None and reference is not None:
            run = replace(run, gate=replace(gate, baseline=self._baseline_identity(spec, reference)))
        self.reserve_space(4096 * len(run.cases))
        self.runs.save(run)
        if jobs is not None:  # stored: its report is what GET /eval/runs/{id} shows from now on
            self._finish_job(run_id, "done")
        # only runs of the served configuration decide an incident's outcome: over every tenant, those of the
        # incidents they count (no tenant, or promoted); confined to a tenant, those of its incidents not promoted
        if self.incidents is not None and spec.kind != "experiment":
            records = self.incidents.records
            if spec.tenant is not None:
                own = records.tenant_scoped(list(outcomes), spec.tenant) if outcomes else set()
                outcomes = {i: outcome for i, outcome in outcomes.items() if i in own}
            records.record_outcomes(run.run_id, outcomes)
        log.info(
            "eval run %s (%s, set %s) finished: %d cases, gate %s",
            run_id,
            spec.kind,
            spec.set_name,
            len(run.cases),
            run.gate.verdict if run.gate else "none",
        )
        warnings = unknown_documents(spec.pipeline.store, cases, spec.tenant)
        if "shadowing" in str(spec.params_record.get("set_source")):
            warnings.append(f"set {spec.set_name!r} is a stored set shadowing the packaged one of that name")
        return Evaluation(run, build_report(run), gate, tuple(warnings))

    def _baseline_identity(self, spec: RunSpec, reference: Baseline) -> BaselineRef:
        """What a verdict was compared with: the baseline's name, run id, content hash (of its run and policy), and
        where it came from, as loaded (a promotion during the run does not relabel it)."""
        return BaselineRef(spec.baseline, reference.run.run_id, reference.sha256, reference.source)

    def _progress(
        self,
        spec: RunSpec,
        run_id: str,
        deadline: float | None,
        report: Callable[[int, int], None] | None,
        jobs: JobRecords | None,
    ) -> Callable[[int, int], None]:
        """Before each batch: stop past the deadline; for a background run (its `jobs` given), record progress and
        stop if cancelled; for a monitoring run, renew the lease; log the progress every PROGRESS_LOG_SECONDS."""
        start = time.monotonic()
        last_log = start
        leases = self.leases if spec.kind == "monitoring" else None

        def check(done: int, total: int) -> None:
            nonlocal last_log
            now = time.monotonic()
            if deadline is not None and now - start > deadline:
                raise TimedOut(
                    f"the evaluation stopped after {done} of {total} cases: it ran past its limit of {deadline:g} "
                    "s (PLUMBLINE_EVAL_TIMEOUT_SECONDS), which holds for background runs too; evaluate a smaller "
                    "set, or run it in-process with `plumbline eval run --data-dir`, which has no limit"
                )
            if jobs is not None and jobs.progress(run_id, done):
                raise Cancelled(f"run {run_id} was cancelled after {done} of {total} cases")
            if self._stopping.is_set():
                raise Cancelled(f"run {run_id} stopped after {done} of {total} cases: the service is shutting down")
            # renew the lease; if it expired and another replica took it, that one runs the set now
            if leases is not None and not leases.acquire(f"monitoring:{spec.set_name}", self.owner, LEASE_SECONDS):
                raise Busy(f"run {run_id} lost the lease of set {spec.set_name!r} after {done} of {total} cases")
            if report is not None:
                report(done, total)
            if now - last_log >= PROGRESS_LOG_SECONDS:
                last_log = now
                rate = done / (now - start)
                log.info("eval run %s: %d/%d cases (%.1f cases/s)", run_id, done, total, rate)

        return check

    def _finish_job(self, run_id: str, status: str, error: str | None = None) -> None:
        """Record how a background run ended (a no-op for a run without a job); a job already done stays done."""
        if self.jobs is None:
            return
        try:
            self.jobs.finish(run_id, status, error)
        except Exception:  # the store is down: the job reads as lost once its heartbeat is old
            log.exception("could not record the end of eval run %s", run_id)

    def cases(self, set_name: str, *, tenant: str | None = None) -> list[Case]:
        """A set as a run confined to `tenant` (None: over every tenant) sees it, before `tenant_cases`: its stored or
        packaged cases, then the cases of its counted incidents (`IncidentService.cases`: over every tenant, a
        tenant's incidents only once promoted; an incident case whose id the set already holds, e.g. after
        `plumbline incidents export`, is not added twice). A set may consist of incidents alone."""
        try:
            base = self.sets.get(set_name)
        except UnknownName:
            base = []
        held = {c.id for c in base}
        counted = self.incidents.cases(set_name, tenant=tenant) if self.incidents else []
        extra = [c for c in counted if c.id not in held]
        if not base and not extra:
            self.sets.get(set_name)  # raises UnknownName listing the known sets
        return [*base, *extra]

    def set_names(self) -> list[str]:
        """Stored, packaged, and sets that only incidents have filled so far."""
        names = set(self.sets.names())
        if self.incidents is not None:
            names.update(self.incidents.records.set_names(self.incidents.counted_statuses()))
        return sorted(names)

    def _incident_outcomes(self, run: Run) -> dict[int, str]:
        """Each incident case's outcome in `run`: passed (a relevant result within the incident's own k, the number
        of results its assistant used, or the run's largest k), failed, or regressed (failed, having passed in an
        earlier run of its set)."""
        if self.incidents is None:
            return {}
        ids = {i: c for c in run.cases if (i := incident_id(c.case_id)) is not None}
        if not ids:
            return {}
        known = self.incidents.records.outcome_inputs(list(ids))
        out = {}
        for i, c in ids.items():
            passed_before, k = known.get(i, (False, None))
            within = min(k or max(run.ks), max(run.ks))
            if c.first_relevant_rank is not None and c.first_relevant_rank <= within:
                out[i] = "passed"
            else:
                out[i] = "regressed" if passed_before else "failed"
        return out

    def put_set(self, name: str, text: str, *, shadow: bool = False) -> list[Case]:
        """Replace a labelled set; every case's filters must be ones /search accepts (else 422, by line). A
        packaged set's name only with `shadow`."""
        self.reserve_space(2 * len(text.encode()))
        cases = self.sets.put(name, text, check=lambda case: parse_filters(case.filters), shadow=shadow)
        crash_point("set:written")
        return cases

    def recent_jobs(self) -> dict[tuple[str, str], int]:
        """Background work started in the last day by (kind, status), for the gauges; {} when the store does not
        answer (the scrape goes on; `stale` says so)."""
        if self.jobs is None:
            return {}
        try:
            return self.jobs.recent_counts(RECENT_JOBS_SECONDS)
        except StoreUnavailable as exc:
            log.warning("recent eval jobs could not be counted: %s", exc)
            self.stale = True
            return {}

    def monitored(self) -> dict[str, Monitored]:
        """The latest monitoring run of each set, from the state store, so that every replica shows the same.
        A run's record is read once, when it becomes the latest; a scrape otherwise costs one small query."""
        try:
            latest = self.runs.latest_ids("monitoring")
        except StoreUnavailable as exc:  # keep showing what was last read: a store blip must not clear alerts
            log.warning("the latest monitoring runs could not be read, the gauges show the last known: %s", exc)
            with self._lock:
                self.stale = True
                return dict(self._monitored)
        with self._lock:
            self.stale = False
            for set_name, run_id in latest.items():
                if set_name not in self._monitored or self._monitored[set_name].evaluation.run.run_id != run_id:
                    self._monitored[set_name] = self._load_monitored(run_id)
            for gone in set(self._monitored) - set(latest):
                del self._monitored[gone]
            return dict(self._monitored)

    def _load_monitored(self, run_id: str) -> Monitored:
        run = self.runs.get(run_id)
        named = run.gate.baseline if run.gate else None
        reference = None
        if named is not None and named.name:
            with suppress(UnknownName):  # the baseline as it is now, if it is still the one the run was gated against
                reference = self.runs.baseline(named.name)
            if reference is None or reference.run_id != named.run_id:
                reference = None
                with suppress(UnknownName):  # replaced since: the run it was, if that run is stored
                    reference = self.runs.get(named.run_id) if named.run_id else None
        return Monitored(Evaluation(run, build_report(run), None), build_report(reference) if reference else None)
