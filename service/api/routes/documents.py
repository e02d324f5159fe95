"""POST /documents, GET /documents/{id}, DELETE /documents/{id}."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from service.api.convert import to_document
from service.api.deps import IndexDep, RuntimeDep
from service.api.schemas import ChunkOut, DeleteResponse, DocumentOut, IngestRequest, IngestResponse

router = APIRouter(tags=["documents"])


@router.post("/documents", response_model=IngestResponse)
def ingest(body: IngestRequest, index: IndexDep, runtime: RuntimeDep) -> IngestResponse:
    """Index a batch: all or nothing. Re-sending a document id replaces that document atomically."""
    result = index.ingest([to_document(d) for d in body.documents])
    if runtime.metrics:
        runtime.metrics.ingested_chunks.inc(result.chunks)
    return IngestResponse(documents=result.documents, chunks=result.chunks, unchanged=result.unchanged)


@router.get("/documents/{doc_id:path}", response_model=DocumentOut)
def get_document(doc_id: str, index: IndexDep) -> DocumentOut:
    stored = index.get(doc_id)
    chunks = [
        ChunkOut(chunk_id=c.chunk_id, heading_path=c.heading, start=c.start, end=c.end, text=c.text)
        for c in stored.chunks
    ]
    return DocumentOut(
        **asdict(stored.document), superseded_by=stored.superseded_by, generation=stored.generation, chunks=chunks
    )


@router.delete("/documents/{doc_id:path}", response_model=DeleteResponse)
def delete_document(doc_id: str, index: IndexDep) -> DeleteResponse:
    return DeleteResponse(id=doc_id, deleted_chunks=index.delete(doc_id))
