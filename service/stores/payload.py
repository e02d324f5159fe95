"""The point payload schema: the one place that writes and reads it.

Chunk points carry their document's filterable fields (tenant, tags, status, dates, metadata) so that
filters run inside the engine. `gen` is the document's generation (ingest time in microseconds, rising): a re-ingest
writes a new generation, commits it in the document's head, then deletes the old one, and readers keep only the
generation a document's head commits, so no response ever mixes old and new chunks, even across replicas.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.domain import Chunk, DocFormat, DocStatus, Document, Hit, StageScore

_NAMESPACE = uuid.UUID("6c1f5b8e-8f3a-4d55-9a59-6f1e2b9d3c10")
MANIFEST_ID = str(uuid.uuid5(_NAMESPACE, "manifest"))
NEVER = "9999-12-31T23:59:59Z"
STALE = "1970-01-01T00:00:00Z"


def fresh_until(status: str, valid_until: str) -> str:
    """What `fresh_only` compares with now: a current document's end of validity, the epoch for any other. One
    indexed condition instead of two (status and valid_until): a filtered dense scan of 100k chunks took 8 ms
    instead of 11. `service.index.supersession.set_status` keeps it in step with the status."""
    return valid_until if status == DocStatus.CURRENT.value else STALE


@functools.lru_cache(maxsize=1 << 16)  # every search derives one per candidate document, most of them seen before
def head_point_id(doc_id: str) -> str:
    """One head per document, at an id derived from the document id: readers find it without a search."""
    return str(uuid.uuid5(_NAMESPACE, f"head\x00{doc_id}"))


def head_payload(doc: Document, gen: int, fingerprint: str, superseded_by: str | None) -> dict[str, Any]:
    """The commit marker: the generation readers use, and what ingest and `supersedes` need to know."""
    fields = _document_fields(doc, gen, superseded_by)
    return {
        "kind": "head",
        "doc_id": doc.id,
        "gen": gen,
        "fingerprint": fingerprint,
        "supersedes": doc.supersedes,
        **{k: fields[k] for k in ("status", "declared_status", "superseded_by", "valid_until", "fresh_until")},
    }


def chunk_point_id(chunk_id: str, gen: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"chunk\x00{chunk_id}\x00{gen}"))


def document_point_id(doc_id: str, gen: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"document\x00{doc_id}\x00{gen}"))


def _iso(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if value else None


def _parse(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _document_fields(doc: Document, gen: int, superseded_by: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "doc_id": doc.id,
        "gen": gen,
        "title": doc.title,
        "tenant": doc.tenant,
        "tags": list(doc.tags),
        # effective status (filters use it) and the document's own (see service.index.supersession)
        "status": DocStatus.SUPERSEDED.value if superseded_by else doc.status.value,
        "declared_status": doc.status.value,
        "superseded_by": superseded_by,
        "metadata": dict(doc.metadata),
    }
    if doc.updated_at is not None:
        fields["updated_at"] = _iso(doc.updated_at)
    # Never absent: a document without an end date is valid until NEVER, so freshness is one indexed range
    # condition (an "is empty OR later than now" clause made filtered search twice as slow at 100k chunks).
    fields["valid_until"] = _iso(doc.valid_until) or NEVER
    fields["fresh_until"] = fresh_until(fields["status"], fields["valid_until"])
    return fields


def chunk_payload(doc: Document, chunk: Chunk, gen: int, superseded_by: str | None = None) -> dict[str, Any]:
    return {
        **_document_fields(doc, gen, superseded_by),
        "kind": "chunk",
        "chunk_id": chunk.chunk_id,
        "ordinal": chunk.ordinal,
        "heading_path": list(chunk.heading_path),
        "text": chunk.text,
        "start": chunk.start,
        "end": chunk.end,
    }


def document_payload(
    doc: Document, gen: int, chunks: int, fingerprint: str, superseded_by: str | None = None
) -> dict[str, Any]:
    return {
        **_document_fields(doc, gen, superseded_by),
        "kind": "document",
        "text": doc.text,
        "format": doc.format.value,
        "supersedes": doc.supersedes,
        "chunks": chunks,
        "fingerprint": fingerprint,
    }


def chunk_from_payload(p: Mapping[str, Any]) -> Chunk:
    return Chunk(
        chunk_id=p["chunk_id"],
        doc_id=p["doc_id"],
        ordinal=int(p["ordinal"]),
        title=p["title"],
        heading_path=tuple(p.get("heading_path") or ()),
        text=p["text"],
        start=int(p["start"]),
        end=int(p["end"]),
    )


def document_from_payload(p: Mapping[str, Any]) -> Document:
    return Document(
        id=p["doc_id"],
        title=p["title"],
        text=p["text"],
        format=DocFormat(p.get("format", "markdown")),
        metadata=dict(p.get("metadata") or {}),
        tags=tuple(p.get("tags") or ()),
        tenant=p.get("tenant"),
        status=DocStatus(p.get("declared_status") or p.get("status", "current")),
        updated_at=_parse(p.get("updated_at")),
        valid_until=None if p.get("valid_until") in (None, NEVER) else _parse(p["valid_until"]),
        supersedes=p.get("supersedes"),
    )


LISTED_FIELDS = (
    *("doc_id", "gen", "title", "tenant", "tags", "status", "declared_status", "superseded_by", "supersedes"),
    *("updated_at", "valid_until", "fresh_until", "chunks", "format"),
)


@dataclass(frozen=True)
class DocumentEntry:
    """A committed document in a listing (`Index.listing`): its record without the text and metadata."""

    id: str
    title: str
    tenant: str | None
    tags: tuple[str, ...]
    status: str  # effective: what filters and fresh_only see
    declared_status: str
    superseded_by: str | None
    supersedes: str | None
    updated_at: str | None
    valid_until: str | None
    fresh_until: str
    chunks: int
    format: str
    generation: int

    @classmethod
    def of(cls, p: Mapping[str, Any]) -> DocumentEntry:
        return cls(
            id=p["doc_id"],
            title=p["title"],
            tenant=p.get("tenant"),
            tags=tuple(p.get("tags") or ()),
            status=p["status"],
            declared_status=p.get("declared_status") or p["status"],
            superseded_by=p.get("superseded_by"),
            supersedes=p.get("supersedes"),
            updated_at=p.get("updated_at"),
            valid_until=None if p.get("valid_until") in (None, NEVER) else p["valid_until"],
            fresh_until=p["fresh_until"],
            chunks=int(p["chunks"]),
            format=p.get("format", "markdown"),
            generation=int(p["gen"]),
        )


def hit_from_payload(p: Mapping[str, Any], score: float, stages: Mapping[str, StageScore]) -> Hit:
    return Hit(
        chunk=chunk_from_payload(p),
        score=score,
        stages=stages,
        status=DocStatus(p.get("status", "current")),
        tenant=p.get("tenant"),
        tags=tuple(p.get("tags") or ()),
        updated_at=_parse(p.get("updated_at")),
        metadata=dict(p.get("metadata") or {}),
        valid_until=None if p.get("valid_until") in (None, NEVER) else _parse(p["valid_until"]),
    )
