"""POST /documents, GET /documents (a filtered listing), GET /documents/{id}, DELETE /documents/{id}.

Document ids are unique across tenants: a document belongs to the tenant that wrote it, a write of the same id
for another tenant is a 409, and a tenant-bound key sees another tenant's documents as absent (404)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query

from service.api.auth import AUTH_RESPONSES, DocumentReader, Ingester, audited
from service.api.convert import to_document
from service.api.deps import DocumentsDep, RuntimeDep
from service.api.schemas import (
    ChunkOut,
    DeleteResponse,
    DocumentOut,
    DocumentPage,
    DocumentSummary,
    IngestRequest,
    IngestResponse,
    StatusChange,
)
from service.domain import DocStatus
from service.filters import FilterSpec, parse_datetime
from service.inputs import UtcDatetime

router = APIRouter(tags=["documents"], responses=AUTH_RESPONSES)


@router.post("/documents", response_model=IngestResponse)
def ingest(body: IngestRequest, documents: DocumentsDep, runtime: RuntimeDep, caller: Ingester) -> IngestResponse:
    """Index a batch: all or nothing. Re-sending a document id replaces that document atomically; an id another
    tenant holds is a 409. A tenant-bound key writes its own tenant (naming another is a 403)."""
    target = ", ".join(d.id for d in body.documents[:20])
    with audited(runtime, caller, "documents.ingest", target, after=True) as entry:  # the index's commit: no SQL
        docs, result = documents.ingest(caller, [to_document(d) for d in body.documents])
        detail: dict[str, Any] = {
            "documents": [d.id for d in docs],
            "chunks": result.chunks,
            "unchanged": result.unchanged,
        }
        tenants = {d.tenant for d in docs}
        if len(tenants) > 1:  # an unbound key's batch of several tenants' documents: its detail names them
            detail["tenants"] = sorted(tenants, key=lambda tenant: tenant or "")
        entry.fill(target_tenant=tenants.pop() if len(tenants) == 1 else None, detail=detail)
    if runtime.metrics:
        runtime.metrics.ingested_chunks.inc(result.chunks)
    return IngestResponse(documents=result.documents, chunks=result.chunks, unchanged=result.unchanged)


@router.get("/documents", response_model=DocumentPage)
def list_documents(
    documents: DocumentsDep,
    caller: DocumentReader,
    tenant: str | None = None,
    tags: Annotated[list[str], Query(description="any of these tags (repeat the parameter)")] = [],  # noqa: B006
    status: Annotated[list[DocStatus], Query(description="any of these (effective) statuses")] = [],  # noqa: B006
    updated_after: Annotated[
        UtcDatetime | None, Query(description="updated_at at or after (ISO 8601; a date is midnight UTC)")
    ] = None,
    updated_before: Annotated[UtcDatetime | None, Query(description="updated_at before")] = None,
    cursor: Annotated[str | None, Query(max_length=64, description="the previous page's next_cursor")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DocumentPage:
    """Committed documents without their text, filtered, a page at a time in the engine's order (stable while
    nothing is written). A tenant-bound key lists its own tenant's only; naming another is a 403."""
    spec = FilterSpec(tenant, tuple(tags), (), tuple(status), updated_after, updated_before)
    page = documents.listing(caller, spec, cursor, limit)
    return DocumentPage(
        documents=[
            DocumentSummary(**{**asdict(e), "current": parse_datetime(e.fresh_until, "fresh_until") > page.now})
            for e in page.entries
        ],
        total=page.total,
        next_cursor=page.next_cursor,
    )


@router.get("/documents/{doc_id:path}", response_model=DocumentOut)
def get_document(doc_id: str, documents: DocumentsDep, caller: DocumentReader) -> DocumentOut:
    stored = documents.get(caller, doc_id)
    chunks = [
        ChunkOut(chunk_id=c.chunk_id, heading_path=c.heading, start=c.start, end=c.end, text=c.text)
        for c in stored.chunks
    ]
    return DocumentOut(
        **asdict(stored.document), superseded_by=stored.superseded_by, generation=stored.generation, chunks=chunks
    )


@router.post("/documents/{doc_id:path}/archive", response_model=StatusChange)
def archive_document(doc_id: str, documents: DocumentsDep, runtime: RuntimeDep, caller: Ingester) -> StatusChange:
    """Archive a document (status `archived`: search leaves it out, as a what-if run excluding it showed), keeping
    its former status for `restore`, the undo. Audited."""
    with audited(runtime, caller, "documents.archive", doc_id, after=True) as entry:  # the index's commit: no SQL
        doc = documents.archive(caller, doc_id)
        entry.fill(target_tenant=doc.tenant, detail={"from": doc.metadata["archived_from"]})
    return StatusChange(id=doc_id, status=doc.status.value)


@router.post("/documents/{doc_id:path}/restore", response_model=StatusChange)
def restore_document(doc_id: str, documents: DocumentsDep, runtime: RuntimeDep, caller: Ingester) -> StatusChange:
    """Undo an archive: the document's former status back. Audited."""
    with audited(runtime, caller, "documents.restore", doc_id, after=True) as entry:  # the index's commit: no SQL
        doc = documents.restore(caller, doc_id)
        entry.fill(target_tenant=doc.tenant, detail={"to": doc.status.value})
    return StatusChange(id=doc_id, status=doc.status.value)


@router.delete("/documents/{doc_id:path}", response_model=DeleteResponse)
def delete_document(doc_id: str, documents: DocumentsDep, runtime: RuntimeDep, caller: Ingester) -> DeleteResponse:
    with audited(runtime, caller, "documents.delete", doc_id, after=True) as entry:  # the index's commit: no SQL
        deleted, tenant = documents.delete(caller, doc_id)
        entry.fill(target_tenant=tenant, detail={"deleted_chunks": deleted})
    return DeleteResponse(id=doc_id, deleted_chunks=deleted)
