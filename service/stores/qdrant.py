"""The distributed backend: a Qdrant server or cluster through `qdrant-client`.

What the Helm chart deploys when one machine is not enough. Tests run it against
`QdrantClient(":memory:")`, which speaks the same API (too slow to serve, fine to check congruence), and over real
HTTP against a fake server backed by it (`tests/service/stores/fake_qdrant.py`) for the network's failures.
Writes use `wait=True`, so a returned call is applied and durable on the server; every call is idempotent
(points have fixed ids), so a transient failure (no connection, a timeout, 429, 502-504) is retried with
exponential backoff, `QdrantOptions.retries` times. Past them the call raises `StoreUnavailable` (HTTP 503) and
the store is marked down: `health()` says why (readiness turns false), later calls make a single attempt (a
downed server answers 503 at once instead of after the retries), and a background probe clears the mark when the
server answers again. The collection's layout (shards, replicas, quantisation, HNSW, on-disk storage) is set
when it is created; an existing collection keeps its own. The server must be Qdrant 1.19 or later, the first whose
searches take an IDF corpus (a tenant's keyword statistics); an older one is refused when the store is opened.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models as m
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from service.errors import StoreUnavailable, StoreUnreachable
from service.filters import Clause, NumberRange
from service.stores.base import (
    CANDIDATE_FIELDS,
    DENSE,
    PAYLOAD_INDEXES,
    SPARSE,
    FieldType,
    ScoredPoint,
    SparseVector,
    StorePoint,
    VectorQuery,
    committed_generations,
    named_vectors,
    stored_point,
    translate,
    translated,
)

_SCHEMA = {
    FieldType.KEYWORD: m.PayloadSchemaType.KEYWORD,
    FieldType.INTEGER: m.PayloadSchemaType.INTEGER,
    FieldType.DATETIME: m.PayloadSchemaType.DATETIME,
}


class _ClientDialect:
    def match(self, key: str, value: str | int | bool) -> Any:
        return m.FieldCondition(key=key, match=m.MatchValue(value=value))

    def match_any(self, key: str, values: Sequence[str]) -> Any:
        return m.FieldCondition(key=key, match=m.MatchAny(any=list(values)))

    def number_range(self, c: NumberRange) -> Any:
        return m.FieldCondition(key=c.key, range=m.Range(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))

    def date_range(self, key: str, gt: str | None, gte: str | None, lt: str | None, lte: str | None) -> Any:
        return m.FieldCondition(key=key, range=m.DatetimeRange(gt=gt, gte=gte, lt=lt, lte=lte))

    def has_id(self, ids: Sequence[str]) -> Any:
        return m.HasIdCondition(has_id=list(ids))

    def clause(self, must: list[Any], should: list[Any], must_not: list[Any]) -> Any:
        return m.Filter(must=must or None, should=should or None, must_not=must_not or None)


_DIALECT = _ClientDialect()
log = logging.getLogger("plumbline")
T = TypeVar("T")
BACKOFF_SECONDS = 0.1  # before the first retry; doubled before each further one
PROBE_SECONDS = 2.0  # how often a store marked down is probed
RETRY_AFTER_CAP = 2.0  # the longest a 429's Retry-After makes a request wait before its next attempt
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
MIN_SERVER = (1, 19)  # the first release whose searches take an IDF corpus (`params.idf`)


@dataclass(frozen=True)
class QdrantOptions:
    """How requests behave (timeouts in seconds, retries) and how the collection is created (`Settings.qdrant_*`)."""

    timeout: float = 5.0
    connect_timeout: float = 2.0
    retries: int = 2
    shards: int = 1
    replication_factor: int = 1
    write_consistency: int = 1
    on_disk: bool = False
    quantization: bool = True
    hnsw_m: int = 16
    hnsw_ef_construct: int = 100
    hnsw_ef: int = 128
    rescore: bool = True

    @property
    def worst_case_seconds(self) -> float:
        """The longest one call can take before it raises: every attempt waiting out each phase's timeout (a pooled
        connection and the connection itself: `connect_timeout`; sending and answering: `timeout`), plus the waits
        between attempts (the backoff, or a 429's Retry-After of at most 2 s)."""
        attempts = self.retries + 1
        waits = sum(max(BACKOFF_SECONDS * float(2**n), RETRY_AFTER_CAP) for n in range(attempts - 1))
        return attempts * 2 * (self.connect_timeout + self.timeout) + waits


def connect(url: str, api_key: str | None, options: QdrantOptions) -> QdrantClient:
    """A REST client for the server at `url` whose every request has `options`' connect and read timeouts."""
    client = QdrantClient(url=url, api_key=api_key, timeout=math.ceil(options.timeout), check_compatibility=False)
    o = options
    timeout = httpx.Timeout(
        connect=o.connect_timeout, pool=o.connect_timeout, read=o.timeout, write=o.timeout
    ).as_dict()

    def timeouts(request: httpx.Request, call_next: Callable[[httpx.Request], httpx.Response]) -> httpx.Response:
        request.extensions["timeout"] = timeout  # qdrant-client itself only takes whole seconds, for both
        return call_next(request)

    client.http.client.add_middleware(timeouts)
    return client


class QdrantStore:
    """A `VectorStore` on one collection of a Qdrant server (or `QdrantClient(":memory:")` in tests).

    Example:
        >>> store = QdrantStore(QdrantClient(":memory:"), "plumbline")
        >>> store.ensure_schema(384)
    """

    def __init__(self, client: QdrantClient, collection: str, options: QdrantOptions | None = None) -> None:
        self.client = client
        self.collection = collection
        self.options = options or QdrantOptions()
        self._down: str | None = None  # why the last call failed, until a call or the probe succeeds
        self._probing = False  # a probe thread runs (started and stopped under _lock)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        o = self.options
        self._dense_params = m.SearchParams(
            hnsw_ef=o.hnsw_ef,
            quantization=m.QuantizationSearchParams(rescore=o.rescore, oversampling=2.0) if o.quantization else None,
        )

    def ensure_schema(self, dimension: int) -> None:
        self._check_version()
        if not self._call("read the collection", lambda: self.client.collection_exists(self.collection)):
            self._create(dimension)
        existing = self._call("read the collection", lambda: self.client.get_collection(self.collection)).payload_schema
        for field in PAYLOAD_INDEXES:
            if field not in existing:
                self._index_field(field)

    def _check_version(self) -> None:
        """Refuse a server older than `MIN_SERVER`, which cannot take a search's IDF corpus (`_idf_over`)."""
        version = self._call("read its version", self.client.info).version
        if _older_than_needed(version):
            raise StoreUnavailable(
                f"the Qdrant server runs version {version}; Plumbline needs {MIN_SERVER[0]}.{MIN_SERVER[1]} or later, "
                "which scores a tenant's keyword searches over that tenant's documents only. Upgrade the server (its "
                "collections are kept as they are), then start Plumbline again."
            )

    def _index_field(self, field: str) -> None:
        schema: Any = _SCHEMA[PAYLOAD_INDEXES[field]]
        if field == "tenant":  # the server keeps each tenant's points together: a tenant's filtered search is faster
            schema = m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True)
        self._call(
            "index a payload field", lambda: self.client.create_payload_index(self.collection, field, schema, wait=True)
        )

    def _create(self, dimension: int) -> None:
        o = self.options
        quantization = m.ScalarQuantization(
            scalar=m.ScalarQuantizationConfig(type=m.ScalarType.INT8, quantile=0.99, always_ram=True)
        )
        try:
            self._call(
                "create the collection",
                lambda: self.client.create_collection(
                    self.collection,
                    vectors_config={
                        DENSE: m.VectorParams(size=dimension, distance=m.Distance.COSINE, on_disk=o.on_disk)
                    },
                    sparse_vectors_config={
                        SPARSE: m.SparseVectorParams(
                            modifier=m.Modifier.IDF, index=m.SparseIndexParams(on_disk=o.on_disk)
                        )
                    },
                    shard_number=o.shards,
                    replication_factor=o.replication_factor,
                    write_consistency_factor=o.write_consistency,
                    on_disk_payload=o.on_disk,
                    hnsw_config=m.HnswConfigDiff(m=o.hnsw_m, ef_construct=o.hnsw_ef_construct),
                    quantization_config=quantization if o.quantization else None,
                ),
            )
        except StoreUnavailable:  # another replica created it in between
            if not self._call("read the collection", lambda: self.client.collection_exists(self.collection)):
                raise
        log.info("created collection %s: %s", self.collection, o)

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:  # noqa: ARG002 (all are durable)
        batch = [_point(p) for p in points]
        self._call("write points", lambda: self.client.upsert(self.collection, batch, wait=True))

    def delete(self, where: Clause) -> None:
        selector = m.FilterSelector(filter=translate(where, _DIALECT))
        self._call("delete points", lambda: self.client.delete(self.collection, selector, wait=True))

    def set_payload(self, where: Clause, values: Mapping[str, Any]) -> None:
        selector = m.FilterSelector(filter=translate(where, _DIALECT))
        self._call(
            "set a payload",
            lambda: self.client.set_payload(self.collection, dict(values), points=selector, wait=True),
        )

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        if not queries:
            return []
        filters = translated(queries, _DIALECT)
        requests = [
            m.QueryRequest(
                query=_vector(q.vector),
                using=q.using,
                filter=filters[id(q.filter)],
                limit=q.limit,
                with_payload=list(CANDIDATE_FIELDS) if q.with_payload else False,
                params=self._dense_params if q.using == DENSE else _idf_over(q.corpus, filters),
            )
            for q in queries
        ]
        results = self._call("search", lambda: self.client.query_batch_points(self.collection, requests))
        return [[ScoredPoint(str(p.id), float(p.score), p.payload or {}) for p in r.points] for r in results]

    def committed(self, doc_ids: Collection[str]) -> dict[str, int]:
        return committed_generations(self, doc_ids)  # never cached: other replicas write

    def run(self, work: Callable[..., T], *args: Any) -> T:
        return work(self, *args)

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        payload: list[str] | bool = list(fields) if fields else True
        records = self._call(
            "read points",
            lambda: self.client.retrieve(self.collection, list(ids), with_payload=payload, with_vectors=False),
        )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records]

    def scroll(self, where: Clause, limit: int, fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        records, _ = self._call(
            "read points",
            lambda: self.client.scroll(
                self.collection,
                scroll_filter=translate(where, _DIALECT),
                limit=limit,
                with_payload=list(fields or []) or True,
            ),
        )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records]

    def page(
        self, offset: str | None, limit: int, fields: Sequence[str], where: Clause | None = None
    ) -> tuple[list[ScoredPoint], str | None]:
        records, after = self._call(
            "read points",
            lambda: self.client.scroll(
                self.collection,
                scroll_filter=translate(where, _DIALECT) if where else None,
                offset=offset,
                limit=limit,
                with_payload=list(fields) if fields else False,
            ),
        )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records], None if after is None else str(after)

    def dump(self, offset: str | None, limit: int) -> tuple[list[StorePoint], str | None]:
        records, after = self._call(
            "read points",
            lambda: self.client.scroll(
                self.collection, offset=offset, limit=limit, with_payload=True, with_vectors=True
            ),
        )
        points = [stored_point(str(r.id), r.payload, r.vector if isinstance(r.vector, dict) else None) for r in records]
        return points, None if after is None else str(after)

    def purge(self, ids: Sequence[str]) -> None:
        if ids:
            selector = m.PointIdsList(points=list(ids))
            self._call("delete points", lambda: self.client.delete(self.collection, selector, wait=True))

    def health(self) -> str | None:
        return self._down

    def count(self, where: Clause) -> int:
        counted = self._call(
            "count points",
            lambda: self.client.count(self.collection, count_filter=translate(where, _DIALECT), exact=True),
        )
        return counted.count

    def close(self) -> None:
        self._closed.set()
        self.client.close()

    def _call(self, doing: str, request: Callable[[], T]) -> T:
        """`request()`, retried on transient failures (a single attempt while the store is marked down). A transient
        failure past the retries raises `StoreUnreachable`; any other failure of the server's `StoreUnavailable`;
        both say what failed and why, without the server's URL."""
        attempts = 1 if self._down else self.options.retries + 1
        started, attempt = time.monotonic(), 0
        while True:
            try:
                result = request()
            except (ResponseHandlingException, UnexpectedResponse, ResourceExhaustedResponse, httpx.HTTPError) as exc:
                attempt += 1
                status = 429 if isinstance(exc, ResourceExhaustedResponse) else getattr(exc, "status_code", None)
                transient = status is None or status in TRANSIENT_STATUSES
                if transient and attempt < attempts:
                    time.sleep(_backoff(exc, attempt))
                    continue
                reason = _reason(exc)
                if transient or status in (401, 403):
                    took = time.monotonic() - started
                    self._mark_down(
                        f"the Qdrant server is unavailable ({reason}; {attempt} attempt(s) in {took:.1f} s)"
                    )
                error = StoreUnreachable if transient else StoreUnavailable
                raise error(f"the Qdrant server could not {doing}: {reason}") from exc
            if self._down:
                self._mark_up()
            return result

    def _mark_down(self, reason: str) -> None:
        with self._lock:
            if self._down is None:
                log.error("%s; probing every %.0f s until it answers", reason, PROBE_SECONDS)
            self._down = f"{reason}; searches and writes answer 503 until it is back"
            if not self._probing:
                self._probing = True
                threading.Thread(target=self._probe_until_up, name="qdrant-probe", daemon=True).start()

    def _mark_up(self) -> None:
        with self._lock:
            if self._down is not None:
                log.warning("the Qdrant server answers again")
            self._down = None

    def _probe_until_up(self) -> None:
        """Ask the server every `PROBE_SECONDS` until it answers (or the mark is cleared by a call, or the store
        closes). Whether to stop is decided under the lock that `_mark_down` takes to start a probe, so a failure
        can never find a probe about to stop and start none."""
        while True:
            closed = self._closed.wait(PROBE_SECONDS)
            answered = False
            if not closed:
                try:
                    self.client.collection_exists(self.collection)
                    answered = True
                except Exception:  # still down: the next round tries again
                    log.debug("the Qdrant server still does not answer", exc_info=True)
            if answered:
                self._mark_up()
            with self._lock:
                if closed or self._down is None:
                    self._probing = False
                    return


def _older_than_needed(version: str) -> bool:
    """Whether a server's version ("1.18.2", "v1.19.0-rc1") is before `MIN_SERVER` (one it does not say is let by)."""
    release = re.match(r"v?(\d+)\.(\d+)", version)
    return release is not None and (int(release[1]), int(release[2])) < MIN_SERVER


def _backoff(exc: Exception, attempt: int) -> float:
    """Seconds to wait before the next attempt: the server's Retry-After (at most 2 s), else exponential."""
    if isinstance(exc, ResourceExhaustedResponse):
        return float(min(max(exc.retry_after_s, 0), RETRY_AFTER_CAP))
    return BACKOFF_SECONDS * float(2 ** (attempt - 1))


def _reason(exc: Exception) -> str:
    """What went wrong, in words: a status and the server's own error message (never the body as such: a proxy's
    page could name internal hosts), or the connection's failure."""
    if isinstance(exc, ResourceExhaustedResponse):
        return "it is rate limiting requests (429)"
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code in (401, 403):
            return f"it refused the API key ({exc.status_code}): check PLUMBLINE_QDRANT_API_KEY"
        return f"it answered {exc.status_code} {exc.reason_phrase}{_server_error(exc.content)}"
    cause = exc.source if isinstance(exc, ResponseHandlingException) else exc
    if isinstance(cause, httpx.TimeoutException):
        return f"no answer in time ({type(cause).__name__})"
    if isinstance(cause, httpx.ConnectError):
        return "ConnectError: the connection was refused or could not be made"
    return type(cause).__name__


def _server_error(content: bytes) -> str:
    """Qdrant's own error text from a JSON error body (`{"status": {"error": ...}}`), if that is what came back."""
    try:
        error = json.loads(content)["status"]["error"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f": {str(error)[:200]}" if isinstance(error, str) else ""


def _idf_over(corpus: Clause | None, filters: Mapping[int, Any]) -> m.SearchParams | None:
    """A sparse query's parameters: the server's IDF over the points matching `corpus` (translated in `filters`; Qdrant
    1.19 or later), or over the whole shard (None)."""
    return None if corpus is None else m.SearchParams(idf=m.IdfCorpusParams(corpus=filters[id(corpus)]))


def _sparse(vector: SparseVector) -> Any:
    return m.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _vector(vector: Sequence[float] | SparseVector) -> Any:
    return _sparse(vector) if isinstance(vector, SparseVector) else list(vector)


def _point(p: StorePoint) -> m.PointStruct:
    return m.PointStruct(id=p.id, vector=named_vectors(p, _sparse), payload=dict(p.payload))
