"""The vector-store contract: what the index and the search pipeline need from an engine.

One collection holds four kinds of points, told apart by the payload field `kind`:
`chunk` (named vectors "dense" and "bm25"), `document` (the caller's record, one per generation),
`head` (one per document, id derived from the document id: which generation is committed) and
`manifest` (how the index was built); only chunks carry vectors. Adapters are thin: they translate the engine-neutral
filter tree of `service.filters` and move points; all policy lives above them. Every adapter runs the
same contract suite (`tests/service/stores/test_contract.py`) and must return the same hits.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Literal, Protocol, TypeVar

from service.filters import Clause, Condition, DateRange, HasId, Match, MatchAny, NumberRange
from service.stores.payload import head_point_id

R = TypeVar("R")
DENSE: Literal["dense"] = "dense"
SPARSE: Literal["bm25"] = "bm25"
VectorName = Literal["dense", "bm25"]
# Payload fields of candidates: enough to fuse and to drop stale generations; the rest is fetched
# for the final hits only.
CANDIDATE_FIELDS = ("chunk_id", "doc_id", "gen")


@dataclass(frozen=True)
class SparseVector:
    """Sorted, unique term ids with their weights (a chunk's BM25 vector: `service.retrieval.sparse`)."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    @property
    def is_empty(self) -> bool:
        return not self.indices


class FieldType(StrEnum):
    KEYWORD = "keyword"
    INTEGER = "integer"
    DATETIME = "datetime"


# Payload indexes on every filterable field.
PAYLOAD_INDEXES: Mapping[str, FieldType] = {
    "kind": FieldType.KEYWORD,
    "doc_id": FieldType.KEYWORD,
    "chunk_id": FieldType.KEYWORD,
    "tenant": FieldType.KEYWORD,
    "tags": FieldType.KEYWORD,
    "status": FieldType.KEYWORD,
    "declared_status": FieldType.KEYWORD,
    "supersedes": FieldType.KEYWORD,
    "gen": FieldType.INTEGER,
    "updated_at": FieldType.DATETIME,
    "valid_until": FieldType.DATETIME,
    "fresh_until": FieldType.DATETIME,
}


@dataclass(frozen=True)
class StorePoint:
    """A point to write: `dense`/`sparse` are None for record points without vectors. An ingest's `dense` is an
    `array("f")`: pickled to the engine processes (`service.stores.mirrored`) as one block of float32, under half the
    bytes of a list and no float objects to build until the engine's binding wants them (about 0.04 ms a chunk)."""

    id: str
    payload: Mapping[str, Any]
    dense: Sequence[float] | None = None
    sparse: SparseVector | None = None


@dataclass(frozen=True)
class VectorQuery:
    """One nearest-neighbour query on the named vector `using`, filtered inside the engine. A sparse query's IDF is
    the engine's, over the chunks matching `corpus` (a search's tenant: `service.filters.keyword_corpus`), or over
    the whole collection when it is None."""

    using: VectorName
    vector: Sequence[float] | SparseVector
    filter: Clause
    limit: int
    # False: ids and scores only (payload {}), for rescoring known candidates: reading the payload of 400 points
    # cost the rescoring step 4 of its 5 ms at 100k chunks
    with_payload: bool = True
    corpus: Clause | None = None


@dataclass(frozen=True)
class ScoredPoint:
    id: str
    score: float
    payload: Mapping[str, Any]


class VectorStore(Protocol):
    """What an engine adapter provides. Implementations: `EdgeStore`, `QdrantStore`."""

    def ensure_schema(self, dimension: int) -> None:
        """Create the collection and payload indexes if missing; idempotent."""

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        """Insert or replace points; durable once it returns. `durable=False` (the chunks of an ingest, before its
        commit marker) lets the engine defer its flush and segment work to the next durable write; a killed
        process still keeps such points (the engine's write-ahead log), as every adapter's writes do."""

    def delete(self, where: Clause) -> None:
        """Delete every point matching `where`; durable once it returns."""

    def set_payload(self, where: Clause, values: Mapping[str, Any]) -> None:
        """Set payload fields on every point matching `where`; durable once it returns."""

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        """Run queries; each result holds only `CANDIDATE_FIELDS` of the payload (none without `with_payload`),
        best first."""

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        """The given points (score 0) with their payload, or only `fields` of it; missing ids are skipped."""

    def committed(self, doc_ids: Collection[str]) -> dict[str, int]:
        """The committed generation of each indexed document among `doc_ids`, as its head says
        (`committed_generations`); an adapter may cache it while no write could have changed it."""

    def run(self, work: Callable[..., R], *args: Any) -> R:
        """`work(store, *args)` where the index lives, its engine calls made there: in a copy's engine process for
        `MirroredStore` (one round trip for all of them: `work` is a module-level function, and it, its arguments and
        its answer pickle), in this process for the others (`work(self, *args)`; a wrapper of a store does the same,
        so that `work` calls the wrapper). `service.retrieval.gather.gather` is the work a search sends."""

    def scroll(self, where: Clause, limit: int, fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        """Up to `limit` points matching `where` (score 0), with only `fields` of the payload if given."""

    def count(self, where: Clause) -> int:
        """Exact number of points matching `where`."""

    def page(
        self, offset: str | None, limit: int, fields: Sequence[str], where: Clause | None = None
    ) -> tuple[list[ScoredPoint], str | None]:
        """Every point (matching `where`, if given) in id order, `limit` at a time from `offset` (None: the start),
        with only `fields` of the payload (none if empty); returns the page and the next offset (None after the
        last page)."""

    def dump(self, offset: str | None, limit: int) -> tuple[list[StorePoint], str | None]:
        """Like `page`, with each point's whole payload and its vectors (dense normalised, as the engine keeps
        cosine vectors): what `plumbline export` writes and `upsert` takes back."""

    def purge(self, ids: Sequence[str]) -> None:
        """Delete the given points, also ones whose payload can no longer be read; durable once it returns."""

    def health(self) -> str | None:
        """Why the store cannot take writes now (e.g. the engine refused one), or None when it can."""

    def close(self) -> None:
        """Flush and release the engine."""


def committed_generations(store: VectorStore, doc_ids: Collection[str]) -> dict[str, int]:
    """The committed generation of each document, read from its head by id (see `service.retrieval.candidates`)."""
    heads = store.retrieve([head_point_id(d) for d in sorted(doc_ids)], fields=("doc_id", "gen"))
    return {h.payload["doc_id"]: int(h.payload["gen"]) for h in heads}


def named_vectors(p: StorePoint, sparse: Callable[[SparseVector], Any]) -> dict[str, Any]:
    """A point's vectors by name, the sparse one built by the client's `sparse` constructor; a record point
    has none, and an empty BM25 vector (a chunk of stopwords only) is left out rather than stored empty."""
    vectors: dict[str, Any] = {}
    if p.dense is not None:
        vectors[DENSE] = p.dense.tolist() if isinstance(p.dense, array) else list(p.dense)
    if p.sparse is not None and not p.sparse.is_empty:
        vectors[SPARSE] = sparse(p.sparse)
    return vectors


def stored_point(id_: str, payload: Mapping[str, Any] | None, vectors: Mapping[str, Any] | None) -> StorePoint:
    """A point read back from an engine, its vectors given by name (the sparse one with `indices` and `values`)."""
    vectors = vectors or {}
    dense, sparse = vectors.get(DENSE), vectors.get(SPARSE)
    return StorePoint(
        id_,
        payload or {},
        dense=list(dense) if dense is not None else None,
        sparse=SparseVector(tuple(sparse.indices), tuple(sparse.values)) if sparse is not None else None,
    )


T = TypeVar("T")


class FilterDialect(Protocol, Generic[T]):
    """How one client library spells each node of the neutral filter tree."""

    def match(self, key: str, value: str | int | bool) -> T: ...
    def match_any(self, key: str, values: Sequence[str]) -> T: ...
    def number_range(self, c: NumberRange) -> T: ...
    def date_range(self, key: str, gt: str | None, gte: str | None, lt: str | None, lte: str | None) -> T: ...
    def has_id(self, ids: Sequence[str]) -> T: ...
    def clause(self, must: list[T], should: list[T], must_not: list[T]) -> T: ...


def translate(node: Condition, dialect: FilterDialect[T]) -> T:
    """The neutral filter tree in a client's own types (dates as RFC 3339 strings)."""
    if isinstance(node, Clause):
        return dialect.clause(
            [translate(c, dialect) for c in node.must],
            [translate(c, dialect) for c in node.should],
            [translate(c, dialect) for c in node.must_not],
        )
    if isinstance(node, Match):
        return dialect.match(node.key, node.value)
    if isinstance(node, MatchAny):
        return dialect.match_any(node.key, node.values)
    if isinstance(node, NumberRange):
        return dialect.number_range(node)
    if isinstance(node, DateRange):
        iso = [d.isoformat() if d else None for d in (node.gt, node.gte, node.lt, node.lte)]
        return dialect.date_range(node.key, *iso)
    if isinstance(node, HasId):
        return dialect.has_id(node.ids)
    raise TypeError(f"unknown filter node {node!r}")


def translated(queries: Sequence[VectorQuery], dialect: FilterDialect[T]) -> dict[int, T]:
    """Each distinct filter and IDF corpus of `queries` translated once, by identity: a search's dense and keyword
    queries share their filter (an id filter of 200 candidates took 1 ms to build)."""
    out: dict[int, T] = {}
    for q in queries:
        for clause in (q.filter, q.corpus):
            if clause is not None and id(clause) not in out:
                out[id(clause)] = translate(clause, dialect)
    return out
