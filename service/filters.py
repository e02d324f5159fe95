"""Search filters: what a request may restrict (`parse_filters` validates a `filters` object as a caller wrote it),
and the engine-neutral condition tree they become.

The tree is applied inside the engine to every candidate list (dense and keyword alike), never to a
fused list afterwards: post-filtering a top-N list silently loses recall. Each store adapter translates
the tree into its client's types (see `service.stores`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from service.domain import DocStatus
from service.errors import InvalidRequest
from service.inputs import FiltersIn

METADATA_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
Scalar = str | int | float | bool


@dataclass(frozen=True)
class Match:
    key: str
    value: str | int | bool


@dataclass(frozen=True)
class MatchAny:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class NumberRange:
    key: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class DateRange:
    key: str
    gt: dt.datetime | None = None
    gte: dt.datetime | None = None
    lt: dt.datetime | None = None
    lte: dt.datetime | None = None


@dataclass(frozen=True)
class HasId:
    """The point is one of `ids` (store point ids)."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class Clause:
    """All of `must`, at least one of `should` (when any), none of `must_not`."""

    must: tuple[Condition, ...] = ()
    should: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()


Condition = Match | MatchAny | NumberRange | DateRange | HasId | Clause


@dataclass(frozen=True)
class MetadataCondition:
    """Equality (`equals`, a scalar or any of a list) or a range on one `metadata` key."""

    key: str
    equals: tuple[Scalar, ...] = ()
    gt: float | dt.datetime | None = None
    gte: float | dt.datetime | None = None
    lt: float | dt.datetime | None = None
    lte: float | dt.datetime | None = None

    def __post_init__(self) -> None:
        if not METADATA_KEY.match(self.key):
            raise InvalidRequest(f"metadata filter key {self.key!r} is invalid: use 1-64 letters, digits, '_' or '-'")
        bounds = [b for b in (self.gt, self.gte, self.lt, self.lte) if b is not None]
        if self.equals and bounds:
            raise InvalidRequest(f"metadata filter {self.key!r}: give either a value or a range, not both")
        if not self.equals and not bounds:
            raise InvalidRequest(f"metadata filter {self.key!r}: give a value, a list of values or a range")
        if len({isinstance(b, dt.datetime) for b in bounds}) > 1:
            raise InvalidRequest(f"metadata filter {self.key!r}: range bounds mix dates and numbers")


@dataclass(frozen=True)
class FilterSpec:
    """The filters of one search: every field given must hold (tags: any of the listed tags).

    Example:
        >>> spec = FilterSpec(tenant="acme", tags=("billing",))
        >>> len(build_filter(spec, fresh_only=True, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)).must)
        3
    """

    tenant: str | None = None
    tags: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] = ()
    status: tuple[DocStatus, ...] = ()
    updated_after: dt.datetime | None = None
    updated_before: dt.datetime | None = None
    metadata: tuple[MetadataCondition, ...] = ()
    # documents left out: these ids, and documents with any of these tags (a what-if run's pruning, a search's)
    exclude_doc_ids: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.updated_after and self.updated_before and self.updated_after >= self.updated_before:
            raise InvalidRequest("filters.updated_after must be earlier than filters.updated_before")

    def merged(self, other: FilterSpec) -> FilterSpec:
        """Both specs at once (a case's own filters on top of a run's): `other` wins on scalar fields."""
        return FilterSpec(
            tenant=other.tenant or self.tenant,
            tags=other.tags or self.tags,
            doc_ids=other.doc_ids or self.doc_ids,
            status=other.status or self.status,
            updated_after=other.updated_after or self.updated_after,
            updated_before=other.updated_before or self.updated_before,
            metadata=self.metadata + other.metadata,
            exclude_doc_ids=tuple(dict.fromkeys(self.exclude_doc_ids + other.exclude_doc_ids)),
            exclude_tags=tuple(dict.fromkeys(self.exclude_tags + other.exclude_tags)),
        )


def to_filters(f: FiltersIn) -> FilterSpec:
    """Validated filters as the search applies them."""
    return FilterSpec(
        tenant=f.tenant,
        tags=tuple(f.tags),
        doc_ids=tuple(f.doc_ids),
        status=tuple(f.status),
        updated_after=f.updated_after,
        updated_before=f.updated_before,
        metadata=parse_metadata_filters(f.metadata),
        exclude_doc_ids=tuple(f.exclude_doc_ids),
        exclude_tags=tuple(f.exclude_tags),
    )


def parse_filters(raw: Mapping[str, Any]) -> FilterSpec:
    """A `filters` object as a caller wrote it (a labelled case's, an incident's), validated exactly like a /search
    request's: `InvalidRequest` names the first problem."""
    try:
        return to_filters(FiltersIn.model_validate(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(f"filters {dict(raw)} are invalid: {where}: {first['msg']}") from None


def of_kind(kind: str) -> Clause:
    """Points of one kind: "chunk", "document", "head" or "manifest" (see `service.stores.base`)."""
    return Clause(must=(Match("kind", kind),))


def build_filter(spec: FilterSpec, *, fresh_only: bool, now: dt.datetime) -> Clause:
    """The condition tree for `spec`, plus freshness when `fresh_only` is on.

    Fresh means status `current` and `valid_until` later than `now` (absent: `payload.NEVER`), one condition on the
    precomputed `fresh_until` (`payload.fresh_until`). Asking for a non-current status while `fresh_only` is on is a
    contradiction and is rejected rather than silently empty.
    """
    must: list[Condition] = []  # only chunk points carry vectors, so no kind condition is needed
    if spec.tenant is not None:
        must.append(Match("tenant", spec.tenant))
    if spec.tags:
        must.append(MatchAny("tags", spec.tags))
    if spec.doc_ids:
        must.append(MatchAny("doc_id", spec.doc_ids))
    if spec.status:
        if fresh_only and set(spec.status) != {DocStatus.CURRENT}:
            raise InvalidRequest(
                "filters.status asks for non-current documents but fresh_only is on: set fresh_only to false"
            )
        must.append(MatchAny("status", tuple(s.value for s in spec.status)))
    if spec.updated_after or spec.updated_before:
        must.append(DateRange("updated_at", gte=spec.updated_after, lt=spec.updated_before))
    must.extend(_metadata_condition(m) for m in spec.metadata)
    if fresh_only:
        must.append(DateRange("fresh_until", gt=now))  # see service.stores.payload.fresh_until
    must_not: list[Condition] = []
    if spec.exclude_doc_ids:
        must_not.append(MatchAny("doc_id", spec.exclude_doc_ids))
    if spec.exclude_tags:
        must_not.append(MatchAny("tags", spec.exclude_tags))
    return Clause(must=tuple(must), must_not=tuple(must_not))


def keyword_corpus(spec: FilterSpec) -> Clause | None:
    """The points whose BM25 statistics (document count and document frequencies) a keyword search is scored with:
    the chunks of its tenant when it is confined to one (a tenant-bound key's always is), so that one tenant's scores
    never depend on another's documents; None (the whole collection) for a search over every tenant.

    Example:
        >>> keyword_corpus(FilterSpec(tenant="acme", tags=("billing",)))
        Clause(must=(Match(key='tenant', value='acme'),), should=(), must_not=())
        >>> keyword_corpus(FilterSpec(tags=("billing",))) is None
        True
    """
    return Clause(must=(Match("tenant", spec.tenant),)) if spec.tenant is not None else None


def _metadata_condition(cond: MetadataCondition) -> Condition:
    key = f"metadata.{cond.key}"
    if cond.equals:
        if len(cond.equals) == 1:
            return _equals(key, cond.equals[0])
        if all(isinstance(v, str) for v in cond.equals):
            return MatchAny(key, tuple(str(v) for v in cond.equals))
        return Clause(should=tuple(_equals(key, v) for v in cond.equals))
    bounds = (cond.gt, cond.gte, cond.lt, cond.lte)
    if any(isinstance(b, dt.datetime) for b in bounds):
        return DateRange(key, *(b if isinstance(b, dt.datetime) else None for b in bounds))
    return NumberRange(key, *(None if b is None or isinstance(b, dt.datetime) else float(b) for b in bounds))


def _equals(key: str, value: Scalar) -> Condition:
    """Numbers compare as numbers (3 finds a stored 3.0); strings and booleans match exactly."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return NumberRange(key, gte=float(value), lte=float(value))
    return Match(key, value)


def parse_metadata_filters(raw: Mapping[str, object]) -> tuple[MetadataCondition, ...]:
    """Request JSON → conditions: `{"k": v}`, `{"k": [v1, v2]}`, `{"k": {"gte": 3, "lt": 9}}`.

    Range bounds are numbers or ISO 8601 datetimes (with a timezone).
    """
    out = []
    for key, value in raw.items():
        if isinstance(value, Mapping):
            unknown = set(value) - {"gt", "gte", "lt", "lte"}
            if unknown:
                raise InvalidRequest(
                    f"metadata filter {key!r}: unknown range operator(s) {sorted(unknown)}; use gt, gte, lt, lte"
                )
            b = {op: _bound(key, op, v) for op, v in value.items()}
            out.append(MetadataCondition(key, gt=b.get("gt"), gte=b.get("gte"), lt=b.get("lt"), lte=b.get("lte")))
        elif isinstance(value, list):
            if not value:
                raise InvalidRequest(f"metadata filter {key!r}: the list of values is empty")
            out.append(MetadataCondition(key, equals=tuple(_scalar(key, v) for v in value)))
        else:
            out.append(MetadataCondition(key, equals=(_scalar(key, value),)))
    return tuple(out)


def _scalar(key: str, value: object) -> Scalar:
    if isinstance(value, int | float) and not isinstance(value, bool) and not _storable(value):
        raise InvalidRequest(f"metadata filter {key!r}: {value} is not a finite number the index can hold")
    if isinstance(value, str | int | float | bool):
        return value
    raise InvalidRequest(f"metadata filter {key!r}: values must be strings, numbers or booleans")


def _storable(value: float) -> bool:
    """An integer within 64 bits, or a finite float: what the engine's payload and ranges can hold."""
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return math.isfinite(value)


def _bound(key: str, op: str, value: object) -> float | dt.datetime:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidRequest(f"metadata filter {key!r}.{op}: give a number or an ISO 8601 datetime")
    if isinstance(value, str):
        return parse_datetime(value, f"metadata filter {key!r}.{op}")
    if not _storable(value):
        raise InvalidRequest(f"metadata filter {key!r}.{op}: {value} is not a finite number in range")
    return float(value)


def parse_datetime(value: str, where: str) -> dt.datetime:
    """An ISO 8601 datetime with a timezone (a bare date means midnight UTC)."""
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"{where}: {value!r} is not an ISO 8601 datetime (e.g. 2026-11-30T10:00:00Z)") from None
    if parsed.tzinfo is None:
        if len(value) == 10:
            return parsed.replace(tzinfo=dt.UTC)
        raise InvalidRequest(f"{where}: {value!r} has no timezone; add Z or an offset such as +01:00")
    try:
        return parsed.astimezone(dt.UTC)
    except OverflowError:
        raise InvalidRequest(f"{where}: {value!r} is out of range once converted to UTC") from None
