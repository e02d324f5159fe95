"""The service side of evaluation: replay a set through the live pipeline, store runs, gate, export.

`PipelineRetriever` feeds the eval library's runner from `SearchPipeline.search_batch`, the very code
behind `/search`; overrides are the same fields a `/search` request takes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from eval.cases import Case
from eval.errors import UnknownName
from eval.faults import crash_point
from eval.gate import GateConfig, GateResult, compare
from eval.incidents import CASE_PREFIX, incident_id
from eval.matching import Retrieved, Unit
from eval.present import gate_json
from eval.report import Report, build_report
from eval.runner import Query, Run, run_set
from eval.storage import RunStore, SetStore
from service.errors import Busy, TimedOut
from service.filters import FilterSpec
from service.incidents import IncidentService
from service.payload import head_point_id
from service.pipeline import SearchParams, SearchPipeline
from service.stores.base import VectorStore

FilterParser = Callable[[Mapping[str, Any]], FilterSpec]


class PipelineRetriever:
    """A `Retriever` over the in-process pipeline, with `base` as the run's search parameters and
    `parse_filters` turning a case's `filters` object into a FilterSpec (the API's validator).

    Example:
        >>> r = PipelineRetriever(pipeline, SearchParams(mode=Mode.KEYWORD), parse_filters)  # doctest: +SKIP
    """

    def __init__(self, pipeline: SearchPipeline, base: SearchParams, parse_filters: FilterParser) -> None:
        self.pipeline = pipeline
        self.base = base
        self.parse_filters = parse_filters

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
        import datetime as dt  # local, as in `_timestamp` below

        params = [self._params(q) for q in queries]
        # one instant per batch, taken before the search's own, so a hit its freshness filter let through is current
        now = dt.datetime.now(dt.UTC)
        results = self.pipeline.search_batch([q.text for q in queries], params, observe=False)
        return [
            [
                Retrieved(h.chunk.chunk_id, h.chunk.doc_id, h.chunk.text, h.score, stale=not h.current_at(now))
                for h in r.hits
            ]
            for r in results
        ]

    def _params(self, q: Query) -> SearchParams:
        limit = self.pipeline.limits.max_candidates
        wanted = q.k * 3 if q.unit == "doc" else q.k  # collapsing to documents needs a deeper pool
        return replace(
            self.base,
            k=q.k,
            candidates=min(limit, max(self.base.candidates, wanted)),
            filters=self.base.filters.merged(self.parse_filters(q.filters)),
            distinct_docs=q.unit == "doc",
        )


@dataclass(frozen=True)
class Evaluation:
    run: Run
    report: Report
    gate: GateResult | None
    warnings: tuple[str, ...] = ()


def unknown_documents(store: VectorStore, cases: Sequence[Case]) -> list[str]:
    """A warning if some cases' labels name documents the index does not hold: a typo, or a document not ingested
    (yet), which no configuration can ever find; empty if every labelled document is there."""
    wanted = sorted({label.document for c in cases for label in c.positive})
    heads = store.retrieve([head_point_id(d) for d in wanted], fields=("doc_id",))
    present = {h.payload["doc_id"] for h in heads}
    missing = {c.id: sorted({label.document for label in c.positive} - present) for c in cases}
    bad = [(case_id, docs) for case_id, docs in missing.items() if docs]
    if not bad:
        return []
    shown = "; ".join(f"{case_id}: {', '.join(docs)}" for case_id, docs in bad[:10])
    more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
    return [f"{len(bad)} case(s) name documents the index does not hold, so they can never pass: {shown}{more}"]


class EvalService:
    """Runs, stores and gates evaluations; remembers the latest per set for the Prometheus gauges.

    At most `max_concurrent` runs at once (another one is refused with `Busy` at once rather than queued:
    a run holds a worker thread and the model for its whole length), each stopped with `TimedOut` between
    two batches of questions once it has run `timeout` seconds.
    """

    def __init__(
        self,
        sets: SetStore,
        runs: RunStore,
        parse_filters: FilterParser,
        *,
        incidents: IncidentService | None = None,
        max_concurrent: int = 2,
        timeout: float = 600.0,
        reserve_space: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.sets = sets
        self.runs = runs
        self.incidents = incidents
        self.reserve_space = reserve_space  # raises InsufficientStorage before a write the disk cannot take
        self.parse_filters = parse_filters
        self.max_concurrent = max_concurrent
        self.timeout = timeout
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._latest: dict[str, Evaluation] | None = None  # restored from disk on first use
        self._lock = threading.Lock()

    def evaluate(
        self,
        pipeline: SearchPipeline,
        base: SearchParams,
        *,
        set_name: str,
        ks: Sequence[int],
        unit: Unit,
        params_record: Mapping[str, Any],
        baseline: str | None,
        gate_config: GateConfig,
        experiment: bool = False,
    ) -> Evaluation:
        """`evaluate_cases` on a stored set, gated against a stored baseline, both by name (the HTTP path)."""
        cases = self.cases(set_name)
        reference = self.runs.baseline(baseline) if baseline else None  # fail fast, before the run
        return self.evaluate_cases(
            pipeline,
            base,
            cases,
            set_name=set_name,
            ks=ks,
            unit=unit,
            params_record=params_record,
            reference=reference,
            gate_config=gate_config,
            timeout=self.timeout,
            experiment=experiment,
        )

    def evaluate_cases(
        self,
        pipeline: SearchPipeline,
        base: SearchParams,
        cases: Sequence[Case],
        *,
        set_name: str,
        ks: Sequence[int],
        unit: Unit,
        params_record: Mapping[str, Any],
        reference: Run | None,
        gate_config: GateConfig,
        timeout: float | None,
        experiment: bool = False,
    ) -> Evaluation:
        """The one orchestration of an eval run, for HTTP and the CLI alike: replay, gate, then store the run
        with its verdict, and remember it for the gauges. `timeout` None: no time limit (the CLI's). An
        `experiment` (a run with overrides) reports its incident cases' outcomes but does not record them: only
        runs of the served configuration decide that an incident passed, so that it can regress later."""
        gate_config.check_names(ks)
        retriever = PipelineRetriever(pipeline, base, self.parse_filters)
        if not self._slots.acquire(blocking=False):
            raise Busy(f"{self.max_concurrent} evaluation run(s) are already in progress, the limit; retry later")
        try:
            run = run_set(
                cases,
                retriever,
                set_name=set_name,
                ks=ks,
                unit=unit,
                params=params_record,
                before_batch=None if timeout is None else self._deadline(time.monotonic() + timeout),
            )
        finally:
            self._slots.release()
        outcomes = self._incident_outcomes(run)
        run = replace(run, incident_outcomes={f"{CASE_PREFIX}{i}": outcome for i, outcome in outcomes.items()})
        gate = compare(run, reference, gate_config) if reference else None
        if gate is not None:
            run = replace(run, gate=gate_json(gate))  # kept with the run: the gauge survives a restart
        self.reserve_space(4096 * len(run.cases))
        self.runs.save(run)
        if self.incidents is not None and not experiment:
            self.incidents.records.record_outcomes(run.run_id, outcomes)
        evaluation = Evaluation(run, build_report(run), gate, tuple(unknown_documents(pipeline.store, cases)))
        with self._lock:
            self._restore()[set_name] = evaluation
        return evaluation

    def cases(self, set_name: str) -> list[Case]:
        """A set as a run sees it: its stored or packaged cases, then the cases of its counted incidents (an
        incident case whose id the set already holds, e.g. after `plumbline incidents export`, is not added
        twice). A set may consist of incidents alone."""
        try:
            base = self.sets.get(set_name)
        except UnknownName:
            base = []
        held = {c.id for c in base}
        extra = [c for c in (self.incidents.cases(set_name) if self.incidents else []) if c.id not in held]
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

    def _deadline(self, at: float) -> Callable[[int, int], None]:
        def check(done: int, total: int) -> None:
            if time.monotonic() > at:
                raise TimedOut(
                    f"the evaluation stopped after {done} of {total} cases: it ran past its limit of {self.timeout:g} "
                    "s (PLUMBLINE_EVAL_TIMEOUT_SECONDS); evaluate a smaller set, or use `plumbline eval run`"
                )

        return check

    def put_set(self, name: str, text: str) -> list[Case]:
        """Replace a labelled set; every case's filters must be ones /search accepts (else 422, by line)."""
        self.reserve_space(2 * len(text.encode()))
        cases = self.sets.put(name, text, check=lambda case: self.parse_filters(case.filters))
        crash_point("set:written")
        return cases

    def latest(self) -> dict[str, Evaluation]:
        with self._lock:
            return dict(self._restore())

    def _restore(self) -> dict[str, Evaluation]:
        if self._latest is None:
            self._latest = {}
            for run in self.runs.latest():
                self._latest[run.set_name] = Evaluation(run, build_report(run), None)
        return self._latest


class EvalGaugeCollector(Collector):
    """`plumbline_eval_*` gauges from the latest run of each set, read at scrape time."""

    def __init__(self, service: Callable[[], EvalService | None]) -> None:
        self._service = service  # None until the service has started

    def collect(self) -> Iterator[GaugeMetricFamily]:
        score = GaugeMetricFamily(
            "plumbline_eval_metric",
            "Latest evaluation score (0..1) by labelled set, metric, k and category ('all' for the mean).",
            labels=["set", "metric", "k", "category"],
        )
        cases = GaugeMetricFamily("plumbline_eval_cases", "Cases in the latest run.", labels=["set", "category"])
        passed = GaugeMetricFamily(
            "plumbline_eval_gate_passed", "1 if the latest gated run passed, 0 if it failed.", labels=["set"]
        )
        when = GaugeMetricFamily(
            "plumbline_eval_last_run_timestamp_seconds", "When the latest run finished (Unix time).", labels=["set"]
        )
        service = self._service()
        for set_name, ev in sorted(service.latest().items() if service is not None else ()):
            for group in (ev.report.overall, *ev.report.by_category):
                category = "all" if group is ev.report.overall else group.name
                cases.add_metric([set_name, category], group.cases)
                for name, value in group.metrics.items():
                    metric, _, k = name.partition("@")
                    score.add_metric([set_name, metric, k or "all", category], value)
            if ev.run.gate is not None:
                passed.add_metric([set_name], 1.0 if ev.run.gate["verdict"] == "pass" else 0.0)
            when.add_metric([set_name], _timestamp(ev.run.created_at))
        yield from (score, cases, passed, when)


def _timestamp(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
