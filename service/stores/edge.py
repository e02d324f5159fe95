"""The embedded default: Qdrant's own engine in-process (`qdrant-edge-py`), one shard in a directory.

The shard is created scanned (int8, rescored: `service.stores.edge_layout`); past `graph_from` points
(`PLUMBLINE_INDEX_GRAPH_FROM`) a durable write reopens it with HNSW graphs and the engine's optimiser rebuilds every
segment with one. The switch is one-way (a shard that shrinks keeps its graphs) and recorded by the engine in the
shard's own configuration, which the store reads back when it opens. Sparse BM25 uses the engine's inverted index and
IDF modifier, its statistics taken over a query's corpus (`VectorQuery.corpus`: the search's tenant). One process per
directory: `service.infra.datadir.DataDirLock` is taken before this store is opened.

Engine errors become `StoreUnavailable` with the file paths taken out (the log keeps them). After a
failed write the engine may refuse every later one ("Not recovered from previous error") until it is
reopened, though a write that touches nothing still succeeds; so a failed write marks the store unhealthy
for good, and readiness stays false until the process restarts (which recovers the engine).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from service.errors import PlumblineError, StoreUnavailable, public
from service.filters import Clause, Match, MatchAny, NumberRange, of_kind
from service.infra.faults import crash_point
from service.stores.base import (
    CANDIDATE_FIELDS,
    DENSE,
    PAYLOAD_INDEXES,
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
from service.stores.edge_layout import DENSE_SEARCH_PARAMS, GRAPH_FROM, SCHEMA, new_shard, with_graphs


class _EdgeDialect:
    def match(self, key: str, value: str | int | bool) -> Any:
        return qe.FieldCondition(key=key, match=qe.MatchValue(value))

    def match_any(self, key: str, values: Sequence[str]) -> Any:
        return qe.FieldCondition(key=key, match=qe.MatchAny(list(values)))

    def number_range(self, c: NumberRange) -> Any:
        return qe.FieldCondition(key=c.key, range=qe.RangeFloat(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))

    def date_range(self, key: str, gt: str | None, gte: str | None, lt: str | None, lte: str | None) -> Any:
        return qe.FieldCondition(key=key, range=qe.RangeDateTime(gt=gt, gte=gte, lt=lt, lte=lte))

    def has_id(self, ids: Sequence[str]) -> Any:
        return qe.HasIdCondition(set(ids))

    def clause(self, must: list[Any], should: list[Any], must_not: list[Any]) -> Any:
        return qe.Filter(must=must or None, should=should or None, must_not=must_not or None)


_DIALECT = _EdgeDialect()
R = TypeVar("R")
log = logging.getLogger("plumbline")

# The binding holds the GIL for a whole engine call, so every other thread of the process (health checks, other
# searches) waits for it, and a whole eval batch in one call would hold it long. A search sends 2-4 queries; an eval
# batch is split into calls of this many.
QUERIES_PER_CALL = 8
# the generation cache: documents whose heads are read at open (about 100 bytes each), and the page size for that
WARM_HEADS = 200_000
HEADS_PAGE = 2_000
# payload fields whose change can change which generation a head names
_GENERATION_FIELDS = frozenset({"gen", "doc_id", "kind"})


class EdgeStore:
    """A `VectorStore` on an embedded Qdrant Edge shard in `path`.

    Example:
        >>> store = EdgeStore(Path(tempfile.mkdtemp()) / "index")  # doctest: +SKIP
        >>> store.ensure_schema(384)  # doctest: +SKIP
    """

    def __init__(self, path: Path, *, graph_from: int = GRAPH_FROM) -> None:
        self.path = path
        self.graph_from = graph_from
        self._shard: Any = None
        self._failure: str | None = None
        # Committed generations read from heads: this process is the only writer of the directory (the data
        # directory lock), and every write goes through `_write`, which forgets those of the documents it touches (all
        # of them when it cannot tell which). A read that overlapped a write is not kept (`_writes` moved on). Filled
        # at open (`_warm`) and by each search's misses: a search then reads no heads for documents it saw before.
        self._generations: dict[str, int] = {}
        self._writes = 0
        self._cache_lock = threading.Lock()
        # reads in the engine now, and whether the shard is being reopened (`_build_graphs_past_threshold`), which
        # waits for those reads and holds new ones until the shard is open again
        self._gate = threading.Condition()
        self._reads = 0
        self._reopening = False
        self.graphs = False  # whether the shard is configured for HNSW graphs
        if path.exists() and any(path.iterdir()):
            with _engine("open the index"):
                self._shard = qe.EdgeShard.load(str(path))  # with the configuration it was created with
            self.graphs = _persisted(path)["hnsw_config"]["m"] > 0
            self._warm()

    def ensure_schema(self, dimension: int) -> None:
        if self._shard is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._shard = qe.EdgeShard.create(str(self.path), new_shard(dimension))
        existing = self._shard.info().payload_schema
        for field, kind in PAYLOAD_INDEXES.items():
            if field not in existing:
                self._shard.update(qe.UpdateOperation.create_field_index(field, SCHEMA[kind]))

    @property
    def _open(self) -> Any:
        if self._shard is None:
            raise PlumblineError(f"the index in {self.path} has no schema yet: call ensure_schema first")
        return self._shard

    @contextmanager
    def _reading(self, doing: str) -> Iterator[Any]:
        """The open shard for a read, engine errors as `StoreUnavailable` (`_engine`); while the shard is being
        reopened, the read waits for it instead of meeting it closed."""
        with self._gate:
            self._gate.wait_for(lambda: not self._reopening)
            self._reads += 1
        try:
            with _engine(doing):
                yield self._open
        finally:
            with self._gate:
                self._reads -= 1
                if self._reopening:
                    self._gate.notify_all()

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        touched = {p.payload["doc_id"] for p in points if "doc_id" in p.payload}
        self._write(qe.UpdateOperation.upsert_points([_point(p) for p in points]), touched, durable=durable)

    def delete(self, where: Clause) -> None:
        self._write(qe.UpdateOperation.delete_points_by_filter(translate(where, _DIALECT)), _documents_in(where))

    def set_payload(self, where: Clause, values: Mapping[str, Any]) -> None:
        touched = _documents_in(where) if _GENERATION_FIELDS & values.keys() else set()  # e.g. a status: no head's gen
        self._write(qe.UpdateOperation.set_payload_by_filter(translate(where, _DIALECT), dict(values)), touched)

    def purge(self, ids: Sequence[str]) -> None:
        # The engine reads a point's payload to delete it, and fails (then refuses every later write) on one
        # it cannot deserialise; overwriting the payload first needs no read. Only ids that exist: the engine refuses
        # a write naming a missing one.
        with self._reading("read from the index") as shard:
            present: list[Any] = [r.id for r in shard.retrieve(list(ids), with_payload=False, with_vector=False)]
        if present:
            self._write(qe.UpdateOperation.overwrite_payload(present, {}), None)
            self._write(qe.UpdateOperation.delete_points(present), None)

    def _write(self, operation: Any, touched: set[str] | None, *, durable: bool = True) -> None:
        """`touched`: the documents whose heads the write may change (None: any)."""
        try:
            self._forget(touched)
            with _engine("write to the index"):
                self._open.update(operation)  # in the write-ahead log once it returns
                if durable:
                    self._open.flush()
                    self._open.optimize()  # a no-op until the appendable segment passes QUANTISE_AFTER_KB
                    if not self.graphs:
                        self._build_graphs_past_threshold()
        except StoreUnavailable as exc:
            self._failure = self._failure or f"{exc}; the engine may refuse writes until reopened: restart the service"
            raise
        finally:
            self._forget(touched)

    def _build_graphs_past_threshold(self) -> None:
        """Past `graph_from` points, reopen the shard with the graph configuration and let the optimiser rebuild
        every segment with one. A crash part-way leaves the configuration switched (the engine writes it at load) and
        some segments without a graph; those are scanned, and the next write's `optimize()` builds the rest."""
        points = self._open.info().points_count
        if points < self.graph_from:
            return
        start = time.perf_counter()
        with self._gate:
            self._reopening = True
            self._gate.wait_for(lambda: not self._reads)
        try:
            self._shard.close()
            self._shard = None
            dimension = _persisted(self.path)["vectors"][DENSE]["size"]
            self._shard = qe.EdgeShard.load(str(self.path), with_graphs(dimension))
        finally:
            with self._gate:
                self._reopening = False
                self._gate.notify_all()
        self.graphs = True
        crash_point("edge:graph-configured")
        self._shard.optimize()
        log.info(
            "%s holds %d points (past %d): built HNSW graphs in %.1f s",
            self.path.name,
            points,
            self.graph_from,
            time.perf_counter() - start,
        )

    def _forget(self, documents: set[str] | None) -> None:
        """Drop the cached generations of `documents` (None: all): called before a write (so no read begun earlier is
        kept) and after it."""
        with self._cache_lock:
            self._writes += 1
            if documents is None:
                self._generations.clear()
            for doc_id in documents or ():
                self._generations.pop(doc_id, None)

    def _warm(self) -> None:
        """Read the committed generation of up to `WARM_HEADS` documents at open, a page at a time (21,000 heads in
        0.4 s at 100k chunks), so that searches start with them cached."""
        offset: str | None = None
        try:
            while len(self._generations) < WARM_HEADS:
                heads, offset = self.page(offset, HEADS_PAGE, ("doc_id", "gen"), of_kind("head"))
                self._generations.update((h.payload["doc_id"], int(h.payload["gen"])) for h in heads)
                if offset is None:
                    return
        except (StoreUnavailable, KeyError, ValueError, TypeError) as exc:  # an unreadable or malformed head (see
            # `plumbline doctor`) must not keep the index from opening: searches read the rest as they go, as before
            log.warning("read the generations of %d document(s) at open, not all: %r", len(self._generations), exc)

    def committed(self, doc_ids: Collection[str]) -> dict[str, int]:
        with self._cache_lock:
            writes, known = self._writes, {d: self._generations[d] for d in doc_ids if d in self._generations}
        missing = [d for d in doc_ids if d not in known]
        if missing:
            read = committed_generations(self, missing)
            with self._cache_lock:
                if self._writes == writes:
                    self._generations.update(read)
            known.update(read)
        return known

    def health(self) -> str | None:
        return self._failure

    def run(self, work: Callable[..., R], *args: Any) -> R:
        return work(self, *args)

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        filters = translated(queries, _DIALECT)
        requests = [
            qe.QueryRequest(
                limit=q.limit,
                query=qe.Query.Nearest(_vector(q.vector), using=q.using),
                filter=filters[id(q.filter)],
                with_payload=qe.PayloadSelector.Include(list(CANDIDATE_FIELDS)) if q.with_payload else False,
                params=DENSE_SEARCH_PARAMS if q.using == DENSE else _idf_over(q.corpus, filters),
            )
            for q in queries
        ]
        results: list[Any] = []
        for start in range(0, len(requests), QUERIES_PER_CALL):
            with self._reading("search the index") as shard:
                results += shard.query_batch(qe.QueryBatchRequest(requests[start : start + QUERIES_PER_CALL]))
        return [[ScoredPoint(str(p.id), float(p.score), p.payload or {}) for p in res] for res in results]

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        payload = qe.PayloadSelector.Include(list(fields)) if fields else True
        with self._reading("read from the index") as shard:
            records = shard.retrieve(list(ids), with_payload=payload, with_vector=False)
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records]

    def scroll(self, where: Clause, limit: int, fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        payload = qe.PayloadSelector.Include(list(fields)) if fields else True
        with self._reading("read from the index") as shard:
            records, _ = shard.scroll(
                qe.ScrollRequest(limit=limit, filter=translate(where, _DIALECT), with_payload=payload)
            )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records]

    def page(
        self, offset: str | None, limit: int, fields: Sequence[str], where: Clause | None = None
    ) -> tuple[list[ScoredPoint], str | None]:
        payload: Any = qe.PayloadSelector.Include(list(fields)) if fields else False
        condition = translate(where, _DIALECT) if where else None
        with self._reading("read from the index") as shard:
            records, after = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=limit, filter=condition, with_payload=payload)
            )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records], None if after is None else str(after)

    def dump(self, offset: str | None, limit: int) -> tuple[list[StorePoint], str | None]:
        with self._reading("read from the index") as shard:
            records, after = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=limit, with_payload=True, with_vector=True)
            )
        return [stored_point(str(r.id), r.payload, r.vector) for r in records], None if after is None else str(after)

    def count(self, where: Clause) -> int:
        with self._reading("count in the index") as shard:
            return int(shard.count(qe.CountRequest(filter=translate(where, _DIALECT), exact=True)))

    def close(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            with _engine("close the index"):
                shard.flush()
                shard.close()


@contextmanager
def _engine(doing: str) -> Iterator[None]:
    """Engine errors as `StoreUnavailable` saying what failed and why, without file paths (logged in full)."""
    try:
        yield
    except PlumblineError:
        raise
    except Exception as exc:
        log.error("the engine failed to %s: %s", doing, exc)
        raise StoreUnavailable(f"the engine failed to {doing}: {_cause(str(exc))}") from exc


def _cause(message: str) -> str:
    for marker, meaning in _KNOWN_CAUSES:
        if marker in message:
            return meaning
    return public(message)


_KNOWN_CAUSES: tuple[tuple[str, str], ...] = (
    ("No space left on device", "the disk holding the data directory is full"),
    ("Read-only file system", "the data directory is on a read-only file system"),
    ("Permission denied", "the data directory is not writable by this process (permission denied)"),
    (
        "Not recovered from previous error",
        "an earlier write failed and the engine refuses writes until it is reopened: restart the service",
    ),
)


def _documents_in(where: Clause) -> set[str] | None:
    """The documents a write by `where` is confined to, when its own conditions name them (None: any)."""
    for condition in where.must:
        if isinstance(condition, Match) and condition.key == "doc_id":
            return {str(condition.value)}
        if isinstance(condition, MatchAny) and condition.key == "doc_id":
            return set(condition.values)
    return None


def _persisted(path: Path) -> Any:
    """The configuration the engine keeps beside the shard's segments (no call of the binding reads it back)."""
    with _engine("read the index's configuration"):
        return json.loads((path / "edge_config.json").read_text())


def _idf_over(corpus: Clause | None, filters: Mapping[int, Any]) -> Any:
    """A sparse query's parameters: the engine's IDF over the points matching `corpus` (translated in `filters`),
    or over the whole shard (None)."""
    return None if corpus is None else qe.SearchParams(idf=qe.IdfParams(corpus=filters[id(corpus)]))


def _sparse(vector: SparseVector) -> Any:
    return qe.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _vector(vector: Sequence[float] | SparseVector) -> Any:
    return _sparse(vector) if isinstance(vector, SparseVector) else list(vector)


def _point(p: StorePoint) -> Any:
    return qe.Point(p.id, named_vectors(p, _sparse), dict(p.payload))
