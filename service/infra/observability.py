"""Prometheus metrics on an injected `CollectorRegistry` (never the global one).

Serving: request latency per endpoint, requests by status, per-stage search latency, readiness.
Index size is read at scrape time by a custom collector, so it is never stale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServiceMetrics:
    """The service's serving metrics.

    Example:
        >>> m = ServiceMetrics(CollectorRegistry())
        >>> m.observe_stage("embed", 0.004)
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.request_seconds = Histogram(
            "plumbline_http_request_duration_seconds",
            "HTTP request latency by endpoint (route template) and method.",
            ["endpoint", "method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "plumbline_http_requests",
            "HTTP requests by endpoint, method and status code.",
            ["endpoint", "method", "status"],
            registry=registry,
        )
        self.stage_seconds = Histogram(
            "plumbline_search_stage_duration_seconds",
            "Search pipeline latency per stage (embed, sparse, retrieve, rescore, fuse, rerank, fetch).",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ready = Gauge(
            "plumbline_ready",
            "1 while /health/ready would answer 200 (models loaded, the store open and answering), read when scraped.",
            registry=registry,
        )
        self.live = Gauge(
            "plumbline_live",
            "0 when /health/live answers 503: the embedded store failed in a way only a restart cures.",
            registry=registry,
        )
        self.build = Info(
            "plumbline_build", "The running build: version, Python, the vector and state backends.", registry=registry
        )
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes, fds, start time
        self.ingested_chunks = Counter("plumbline_ingested_chunks", "Chunks written by ingestion.", registry=registry)
        self.auth_failures = Counter(
            "plumbline_auth_failures",
            "Requests refused for want of a valid API key (401) or of a role, or by a tenant binding (403).",
            ["status"],
            registry=registry,
        )
        self.writes_refused = Counter(
            "plumbline_writes_refused",
            "Writes refused as conflicting with what is stored (409) or invalid (422).",
            ["status"],
            registry=registry,
        )

    def observe_stage(self, stage: str, seconds: float) -> None:
        self.stage_seconds.labels(stage).observe(seconds)

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.request_seconds.labels(endpoint, method).observe(seconds)
        self.requests.labels(endpoint, method, str(status)).inc()


class IndexSizeCollector(Collector):
    """Chunks and documents in the index, counted when Prometheus scrapes."""

    def __init__(self, counts: Callable[[], dict[str, int] | None]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._counts()
        if counts is None:  # not ready: export nothing rather than a false zero
            return
        family = GaugeMetricFamily("plumbline_index_points", "Points in the index by kind.", labels=["kind"])
        for kind, n in sorted(counts.items()):
            family.add_metric([kind], n)
        yield family
