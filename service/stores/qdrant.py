"""The distributed backend: a Qdrant server or cluster through `qdrant-client`.

What the Helm chart deploys when one machine is not enough. Tests run it against
`QdrantClient(":memory:")`, which speaks the same API (too slow to serve, fine to check congruence).
Writes use `wait=True`, so a returned call is applied and durable on the server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as m

from service.filters import Clause, NumberRange
from service.sparse import SparseVector
from service.stores.base import (
    CANDIDATE_FIELDS,
    DENSE,
    PAYLOAD_INDEXES,
    SPARSE,
    FieldType,
    ScoredPoint,
    StorePoint,
    VectorQuery,
    named_vectors,
    translate,
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


class QdrantStore:
    """A `VectorStore` on one collection of a Qdrant server (or `QdrantClient(":memory:")` in tests).

    Example:
        >>> store = QdrantStore(QdrantClient(":memory:"), "plumbline")
        >>> store.ensure_schema(384)
    """

    def __init__(self, client: QdrantClient, collection: str) -> None:
        self.client = client
        self.collection = collection

    def ensure_schema(self, dimension: int) -> None:
        if not self.client.collection_exists(self.collection):
            self.client.create_collection(
                self.collection,
                vectors_config={DENSE: m.VectorParams(size=dimension, distance=m.Distance.COSINE)},
                sparse_vectors_config={SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)},
            )
        existing = self.client.get_collection(self.collection).payload_schema
        for field, kind in PAYLOAD_INDEXES.items():
            if field not in existing:
                self.client.create_payload_index(self.collection, field, _SCHEMA[kind], wait=True)

    def upsert(self, points: Sequence[StorePoint]) -> None:
        self.client.upsert(self.collection, [_point(p) for p in points], wait=True)

    def delete(self, where: Clause) -> None:
        self.client.delete(self.collection, m.FilterSelector(filter=translate(where, _DIALECT)), wait=True)

    def set_payload(self, where: Clause, values: Mapping[str, Any]) -> None:
        self.client.set_payload(
            self.collection, dict(values), points=m.FilterSelector(filter=translate(where, _DIALECT)), wait=True
        )

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        if not queries:
            return []
        requests = [
            m.QueryRequest(
                query=_vector(q.vector),
                using=q.using,
                filter=translate(q.filter, _DIALECT),
                limit=q.limit,
                with_payload=list(CANDIDATE_FIELDS),
            )
            for q in queries
        ]
        results = self.client.query_batch_points(self.collection, requests)
        return [[ScoredPoint(str(p.id), float(p.score), p.payload or {}) for p in r.points] for r in results]

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        payload: list[str] | bool = list(fields) if fields else True
        records = self.client.retrieve(self.collection, list(ids), with_payload=payload, with_vectors=False)
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records]

    def scroll(self, where: Clause, limit: int, fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        records, _ = self.client.scroll(
            self.collection,
            scroll_filter=translate(where, _DIALECT),
            limit=limit,
            with_payload=list(fields or []) or True,
        )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records]

    def page(self, offset: str | None, limit: int, fields: Sequence[str]) -> tuple[list[ScoredPoint], str | None]:
        records, after = self.client.scroll(
            self.collection, offset=offset, limit=limit, with_payload=list(fields) if fields else False
        )
        return [ScoredPoint(str(r.id), 0.0, r.payload or {}) for r in records], None if after is None else str(after)

    def purge(self, ids: Sequence[str]) -> None:
        if ids:
            self.client.delete(self.collection, m.PointIdsList(points=list(ids)), wait=True)

    def health(self) -> str | None:
        return None

    def count(self, where: Clause) -> int:
        return self.client.count(self.collection, count_filter=translate(where, _DIALECT), exact=True).count

    def close(self) -> None:
        self.client.close()


def _sparse(vector: SparseVector) -> Any:
    return m.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _vector(vector: Sequence[float] | SparseVector) -> Any:
    return _sparse(vector) if isinstance(vector, SparseVector) else list(vector)


def _point(p: StorePoint) -> m.PointStruct:
    return m.PointStruct(id=p.id, vector=named_vectors(p, _sparse), payload=dict(p.payload))
