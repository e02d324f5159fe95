"""The eval gauges on `/metrics`: each monitored set's latest monitoring run (scores per category, gate verdict,
case counts, age), read from the state store at each scrape."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from eval.report import Report
from service.evaluation.runs import EvalService


class EvalGaugeCollector(Collector):
    """`plumbline_eval_*` gauges from the latest monitoring run of each set in the state store (so every replica
    shows the same values), and the baseline it was gated against, read at scrape time. Experiments and manual
    runs never show here. `intervals`: the scheduled sets' intervals, for the overdue alert."""

    def __init__(self, service: Callable[[], EvalService | None], intervals: Mapping[str, float]) -> None:
        self._service = service  # None until the service has started
        self._intervals = intervals

    def collect(self) -> Iterator[GaugeMetricFamily]:
        score = GaugeMetricFamily(
            "plumbline_eval_metric",
            "Latest monitoring run's score (0..1) by labelled set, metric, k and category ('all' for the mean).",
            labels=["set", "metric", "k", "category"],
        )
        reference = GaugeMetricFamily(
            "plumbline_eval_baseline_metric",
            "The same scores of the baseline the latest monitoring run was gated against.",
            labels=["set", "metric", "k", "category"],
        )
        cases = GaugeMetricFamily(
            "plumbline_eval_cases", "Cases in the latest monitoring run.", labels=["set", "category"]
        )
        passed = GaugeMetricFamily(
            "plumbline_eval_gate_passed", "1 if the latest monitoring run passed its gate, 0 if not.", labels=["set"]
        )
        when = GaugeMetricFamily(
            "plumbline_eval_last_run_timestamp_seconds",
            "When the latest monitoring run finished (Unix time).",
            labels=["set"],
        )
        corpus = GaugeMetricFamily(
            "plumbline_eval_corpus_documents",
            "Documents in the corpus when the latest monitoring run ran (read precision against growth).",
            labels=["set"],
        )
        interval = GaugeMetricFamily(
            "plumbline_eval_schedule_interval_seconds",
            "How often a set's monitoring run is scheduled (PLUMBLINE_EVAL_SCHEDULE).",
            labels=["set"],
        )
        for set_name, seconds in sorted(self._intervals.items()):
            interval.add_metric([set_name], seconds)
        stale = GaugeMetricFamily(
            "plumbline_eval_gauges_stale",
            "1 when the state store could not be read at this scrape: the eval gauges show the last values read.",
        )
        jobs = GaugeMetricFamily(
            "plumbline_eval_jobs_recent",
            "Background eval work (runs, syntheses, sweeps, gradings) started in the last 24 hours, by kind and status "
            "(failed, lost: its process stopped answering, cancelled, done, running, queued).",
            labels=["kind", "status"],
        )
        service = self._service()
        monitored = service.monitored() if service is not None else {}
        for (kind, status), n in sorted(service.recent_jobs().items() if service is not None else ()):
            jobs.add_metric([kind, status], n)
        stale.add_metric([], 1.0 if service is not None and service.stale else 0.0)
        for set_name, m in sorted(monitored.items()):
            ev = m.evaluation
            _add_scores(score, set_name, ev.report, cases)
            if m.baseline is not None:
                _add_scores(reference, set_name, m.baseline)
            if ev.run.gate is not None:
                passed.add_metric([set_name], 1.0 if ev.run.gate.passed else 0.0)
            when.add_metric([set_name], _timestamp(ev.run.created_at))
            size = (ev.run.params.get("corpus") or {}).get("documents")
            if size is not None:  # runs stored before the corpus was recorded have none
                corpus.add_metric([set_name], float(size))
        yield from (score, reference, cases, passed, when, corpus, interval, stale, jobs)


def _add_scores(
    family: GaugeMetricFamily, set_name: str, report: Report, cases: GaugeMetricFamily | None = None
) -> None:
    for group in (report.overall, *report.by_category):
        category = "all" if group is report.overall else group.name
        if cases is not None:
            cases.add_metric([set_name, category], group.cases)
        for name, value in group.metrics.items():
            metric, _, k = name.partition("@")
            family.add_metric([set_name, metric, k or "all", category], value)


def _timestamp(iso: str) -> float:

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
