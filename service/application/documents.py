"""Documents as a caller may read and write them: a tenant-bound key writes its own tenant and sees another tenant's
documents as absent (404)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from service.access.principals import Principal, confine, visible, write_tenant
from service.domain import DocStatus, Document
from service.errors import Conflict, InvalidRequest, NotFound
from service.filters import FilterSpec, build_filter
from service.index.index import Index, IngestResult, StoredDocument
from service.stores.payload import DocumentEntry

ARCHIVED_FROM = "archived_from"  # the metadata key an archived document keeps its former status under


@dataclass(frozen=True)
class Page:
    entries: list[DocumentEntry]
    next_cursor: str | None
    total: int  # documents matching the filters, counted by the engine
    now: dt.datetime  # the instant the listing judged freshness at


class Documents:
    def __init__(self, index: Index) -> None:
        self.index = index

    def ingest(self, caller: Principal, docs: Sequence[Document]) -> tuple[list[Document], IngestResult]:
        """Index a batch, all or nothing, each document in the tenant the caller may write; the documents as written."""
        written = [
            replace(doc, tenant=write_tenant(caller, doc.tenant, f"documents[{n}].tenant"))
            for n, doc in enumerate(docs)
        ]
        return written, self.index.ingest(written)

    def listing(self, caller: Principal, spec: FilterSpec, cursor: str | None, limit: int) -> Page:
        """A page of committed documents matching `spec`, from `cursor` (the previous page's `next_cursor`); a bound
        key naming another tenant is `Forbidden`."""
        now = dt.datetime.now(dt.UTC)
        where = build_filter(confine(caller, spec, "tenant"), fresh_only=False, now=now)
        entries, after = self.index.listing(where, _cursor(cursor), limit)
        return Page(entries, after, self.index.count_records(where), now)

    def get(self, caller: Principal, doc_id: str) -> StoredDocument:
        """The document, if the caller may see it; another tenant's reads exactly like a missing one."""
        stored = self.index.get(doc_id)
        if not visible(caller, stored.document.tenant):
            raise NotFound(f"no document with id {doc_id!r}")
        return stored

    def archive(self, caller: Principal, doc_id: str) -> Document:
        """Archive a document the caller may see (status `archived`, which search leaves out), keeping the status it
        had in its metadata (`archived_from`) for `restore`; the document as written. Already archived: `Conflict`."""
        doc = self.get(caller, doc_id).document
        if doc.status == DocStatus.ARCHIVED:
            raise Conflict(f"document {doc_id!r} is archived already: restore it with POST /documents/{doc_id}/restore")
        archived = replace(doc, status=DocStatus.ARCHIVED, metadata={**doc.metadata, ARCHIVED_FROM: doc.status.value})
        self.index.ingest([archived])
        return archived

    def restore(self, caller: Principal, doc_id: str) -> Document:
        """Undo `archive`: the status the document had before, its metadata as it was; the document as written. A
        document not archived this way (no `archived_from`) is a `Conflict` saying how to set its status instead."""
        doc = self.get(caller, doc_id).document
        before = doc.metadata.get(ARCHIVED_FROM)
        if doc.status != DocStatus.ARCHIVED or before not in {s.value for s in DocStatus}:
            raise Conflict(
                f"document {doc_id!r} was not archived by POST /documents/{doc_id}/archive ({doc.status.value}): "
                "set its status by sending it again with POST /documents"
            )
        restored = replace(
            doc, status=DocStatus(before), metadata={k: v for k, v in doc.metadata.items() if k != ARCHIVED_FROM}
        )
        self.index.ingest([restored])
        return restored

    def delete(self, caller: Principal, doc_id: str) -> tuple[int, str | None]:
        """Remove a document the caller may see; the number of chunks it had, and its tenant."""
        owner: list[str | None] = []  # the tenant the index checks the caller against, under its write lock

        def may(tenant: str | None) -> bool:
            owner.append(tenant)
            return visible(caller, tenant)

        return self.index.delete(doc_id, may), owner[0]


def _cursor(value: str | None) -> str | None:
    """A cursor is a point id the last page returned: a UUID; anything else is a 422, not an engine error."""
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidRequest("cursor: not a cursor this listing returned; start again without one") from None
