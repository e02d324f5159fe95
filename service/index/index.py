"""The index: ingest (validate → chunk → embed + BM25-encode → write), delete, read back, manifest.

A batch is validated and encoded in full before the first write, so bad input changes nothing. Each
batch gets a new generation, written in steps: the chunks, the document records, then each document's
head (the commit marker: one point per document, at an id derived from the document id, naming the
committed generation; readers use only that generation, see `service.retrieval.candidates`), then the deletion of
older generations. A reader therefore sees the old version
or the new one, never a mix, at every moment and after a crash at any step; a failed write deletes what
it wrote and re-raises. Leftovers of a crash are removed the next time the batch holding that document
is ingested, changed or not, and by the integrity check on start (`service.index.integrity`). Every ingest, changed
or not, also recomputes the effective status of the documents it names, so a crash between a commit and its
status update is mended by re-sending either document. `crash_point`s mark each write step for the
kill-point tests.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace

import numpy as np

from service.domain import Chunk, DocStatus, Document
from service.errors import (
    Conflict,
    IndexMismatch,
    IngestFailed,
    InsufficientStorage,
    InvalidRequest,
    NotFound,
    NotReady,
    PayloadTooLarge,
    StoreUnavailable,
)
from service.filters import Clause, Match, MatchAny, NumberRange, of_kind
from service.index import integrity, supersession, upgrade
from service.index.chunking import Chunker
from service.infra.faults import crash_point
from service.retrieval.embedding import Embedder
from service.retrieval.sparse import Bm25Encoder, Bm25Params
from service.retrieval.tokenizer import Tokenizer, TokenizerConfig
from service.settings import declared
from service.stores.base import StorePoint, VectorStore
from service.stores.payload import (
    LISTED_FIELDS,
    MANIFEST_ID,
    DocumentEntry,
    chunk_from_payload,
    chunk_payload,
    chunk_point_id,
    document_from_payload,
    document_payload,
    document_point_id,
    head_payload,
    head_point_id,
)

log = logging.getLogger("plumbline")
DOC_ID = re.compile(r"^[^\x00-\x1f\x7f-\x9f#]{1,512}$")  # no C0 or C1 control characters, no '#'
WRITE_BATCH = 256


@dataclass(frozen=True)
class Manifest:
    """How the index was built; a mismatch with the settings would silently corrupt scores."""

    embedding_model: str
    dimension: int
    tokenizer: TokenizerConfig
    bm25: Bm25Params
    # 3: valid_until always stored (NEVER when open-ended), declared_status/superseded_by, head points
    # 4: fresh_until (status and valid_until in one field), valid_until on heads; 3 is upgraded on open
    schema_version: int = 4


@dataclass(frozen=True)
class IngestResult:
    """Documents in the batch, chunks written, and documents skipped because nothing had changed."""

    documents: int
    chunks: int
    unchanged: int


@dataclass(frozen=True)
class StoredDocument:
    """A document as indexed: the caller's fields, its chunks, and who supersedes it (if a current document does)."""

    document: Document
    chunks: tuple[Chunk, ...]
    generation: int
    superseded_by: str | None = None


@dataclass(frozen=True)
class _Record:
    """A committed document's head, as read before a write (and put back if the write fails)."""

    head: StorePoint

    @property
    def gen(self) -> int:
        return int(self.head.payload["gen"])

    @property
    def fingerprint(self) -> str:
        return str(self.head.payload.get("fingerprint", ""))

    @property
    def supersedes(self) -> str | None:
        return self.head.payload.get("supersedes")


@dataclass(frozen=True)
class IndexLimits:
    """What one ingest may hold; the defaults are those `Settings` declares."""

    max_batch_documents: int = declared("max_batch_documents")
    max_document_chars: int = declared("max_document_chars")
    tenant_max_documents: int = declared("tenant_max_documents")  # 0: no cap


class Index:
    """Documents in, chunk points out; the write side of the service.

    Example:
        >>> index = Index(store, embedder, Chunker(ChunkerConfig()), TokenizerConfig(), Bm25Params())  # doctest: +SKIP
        >>> index.ingest([Document(id="a", title="A", text="Hello")])  # doctest: +SKIP
        IngestResult(documents=1, chunks=1, unchanged=0)
    """

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        chunker: Chunker,
        tokenizer: TokenizerConfig,
        bm25: Bm25Params,
        *,
        measure_avg_len: bool = True,
        limits: IndexLimits | None = None,
        reserve_space: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.chunker = chunker
        self.limits = limits or IndexLimits()
        # called with the bytes a write is about to add; raises InsufficientStorage when the disk cannot take them
        self._reserve_space = reserve_space or (lambda _: None)
        self._write_lock = threading.Lock()
        self._retired: str | None = None  # why this index takes no more writes (another generation is served)
        self._last_gen = 0
        store.ensure_schema(embedder.dimension)
        self._wanted = Manifest(embedder.name, embedder.dimension, tokenizer, bm25)
        # the settings' part of every fingerprint (`_fingerprint`), serialised once: chunker and manifest never change
        both = json.dumps([asdict(chunker.config), asdict(self._wanted)], sort_keys=True, default=str)
        self._settings_json = both[1:-1]
        self._measure = measure_avg_len
        self.manifest: Manifest | None = None
        self.encoder = Bm25Encoder(Tokenizer(tokenizer), bm25)
        self._adopt_manifest()
        self.sizes = self._count()

    def _adopt_manifest(self) -> None:
        """Take the store's manifest (checked against the settings) if it has one: at start, and before a write while
        this index has none yet, since another replica or `plumbline import` may have written it in the meantime."""
        found = self._read_manifest()
        if found is not None and found.schema_version == 3 and self._wanted.schema_version == 4:
            upgrade.to_4(self.store)
            found = replace(found, schema_version=4)
            self.store.upsert([StorePoint(MANIFEST_ID, {"kind": "manifest", **asdict(found)})])
        if found is not None:
            _check_compatible(found, self._wanted, avg_len_set=not self._measure)
            self.manifest, self.encoder = found, Bm25Encoder(self.encoder.tokenizer, found.bm25)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Writes held off for the block (a generation switch copies the last changes under it)."""
        with self._write_lock:
            yield

    def retire(self, reason: str) -> None:
        """Refuse every later write (`NotReady`, 503: the caller retries on the index served now); call it inside
        `held`, so a write waiting for the lock finds it retired."""
        self._retired = reason

    def _writable(self) -> None:
        if self._retired is not None:
            raise NotReady(self._retired)

    def ingest(self, docs: Sequence[Document]) -> IngestResult:
        docs = self._validated(docs)
        with self._write_lock:
            self._writable()
            if self.manifest is None:
                self._adopt_manifest()
            known = self._records([d.id for d in docs])
            self._check_owners(docs, known)
            self._check_tenant_caps(docs, known)
            cycle = supersession.cycle(self.store, docs)
            if cycle:
                raise InvalidRequest(f"supersedes would make a cycle: {' -> '.join(map(repr, cycle))}")
            fingerprints = {d.id: self._fingerprint(d) for d in docs}
            todo = [d for d in docs if d.id not in known or known[d.id].fingerprint != fingerprints[d.id]]
            changed = {d.id for d in todo}
            self._remove_leftovers({d.id: known[d.id].gen for d in docs if d.id not in changed})
            if not todo:
                self._reserve_space(len(docs) * 1024)
                supersession.refresh(self.store, self._affected(docs, known))
                return IngestResult(len(docs), 0, len(docs))
            chunked = [(d, self.chunker.chunk(d)) for d in todo]
            for doc, chunks in chunked:
                if not chunks:
                    raise InvalidRequest(f"document {doc.id!r} has no text to index after parsing")
            self._reserve_space(self._disk_estimate(chunked))  # before the model's work, which would be wasted
            terms = [self.encoder.tokenizer.tokens(c.embed_text) for _, chunks in chunked for c in chunks]
            manifest = self.manifest or self._measured(terms)
            encoder = Bm25Encoder(self.encoder.tokenizer, manifest.bm25)
            gen = self._next_generation()
            ids = tuple(d.id for d in todo)
            superseded_by = self._superseders(todo)
            points, records = self._encode(chunked, terms, fingerprints, gen, encoder, superseded_by)
            if self.manifest is None:
                records.append(StorePoint(MANIFEST_ID, {"kind": "manifest", **asdict(manifest)}))
            heads = [
                StorePoint(head_point_id(d.id), head_payload(d, gen, fingerprints[d.id], superseded_by.get(d.id)))
                for d in todo
            ]
            heads_sent = False
            try:
                # durability is at the commit marker: the chunks and records before it need no flush of their own
                for start in range(0, len(points), WRITE_BATCH):
                    self.store.upsert(points[start : start + WRITE_BATCH], durable=False)
                    crash_point("ingest:chunks-written")
                self.store.upsert(records, durable=False)
                crash_point("ingest:records-written")
                heads_sent = True
                self.store.upsert(heads)  # the commit: from here on readers see this generation
                crash_point("ingest:committed")
            except StoreUnavailable as exc:
                raise self._undo(exc, ids, gen, known, heads_sent=heads_sent) from exc
            except Exception:
                self._roll_back(ids, gen, known)
                self._recount()
                raise
            self.manifest, self.encoder = manifest, encoder
            try:  # committed: readers ignore the old generation already; the next ingest retries both
                older = Clause(must=(MatchAny("doc_id", ids), NumberRange("gen", lt=gen)))
                if self.store.count(older):  # a durable write (flush, optimiser) only when there is something
                    self.store.delete(older)
                crash_point("ingest:old-deleted")
                supersession.refresh(self.store, self._affected(todo, known))
                crash_point("ingest:statuses-set")
            except Exception:
                log.warning("cleanup after ingesting %d document(s) failed", len(ids), exc_info=True)
            self._recount()
        return IngestResult(len(docs), len(points), len(docs) - len(todo))

    @staticmethod
    def _affected(docs: Sequence[Document], known: dict[str, _Record]) -> set[str]:
        """Documents whose effective status a write of `docs` may change: they themselves (someone may
        supersede them) and what they, or their previous versions, name."""
        named = {d.supersedes for d in docs} | {known[d.id].supersedes for d in docs if d.id in known}
        return {d.id for d in docs} | {n for n in named if n}

    def _undo(
        self, failure: StoreUnavailable, ids: tuple[str, ...], gen: int, known: dict[str, _Record], *, heads_sent: bool
    ) -> IngestFailed:
        """Roll a failed write back, and say what became of the batch: nothing committed, or, when the roll-back
        failed too after the commit markers were sent (a server may have applied them), not known."""
        try:
            self._roll_back(ids, gen, known)
        except Exception as exc:
            log.warning("undoing a failed ingest of %d document(s) failed too: %s", len(ids), exc)
            if heads_sent:
                return IngestFailed(
                    f"{failure}. Undoing the write failed too, after its commit markers were sent: each of the "
                    f"{len(ids)} document(s) is either wholly at its new version or wholly at its old one, but which "
                    "is not known. Re-send the batch once the store answers (an ingest is idempotent).",
                    unknown=ids,
                )
        finally:
            self._recount()
        return IngestFailed(
            f"{failure}. None of the {len(ids)} document(s) of this batch was committed: searches still see their "
            "previous versions. Re-send the batch once the store answers.",
            not_committed=ids,
        )

    def _roll_back(self, ids: tuple[str, ...], gen: int, known: dict[str, _Record]) -> None:
        """Put back the heads the failed write replaced, then delete what it wrote (its new heads included). In this
        order a roll-back that fails half-way leaves each document at its old version or its new one: deleting
        first, a failure to put the old heads back would leave a document with no head at all."""
        old_heads = [known[i].head for i in ids if i in known]
        if old_heads:
            self.store.upsert(old_heads)
        self.store.delete(Clause(must=(MatchAny("doc_id", ids), Match("gen", gen))))

    def _check_owners(self, docs: Sequence[Document], known: dict[str, _Record]) -> None:
        """A document id names one document across all tenants: writing it for another tenant is a `Conflict`
        (which says nothing of whose it is), before anything is written."""
        owners = supersession.tenants(self.store, [r.head for r in known.values()])
        for n, d in enumerate(docs):
            if d.id in owners and owners[d.id] != d.tenant:
                raise Conflict(
                    f"documents[{n}]: id {d.id!r} already names a document of a different tenant; a document id is "
                    "unique across tenants and re-ingesting cannot move a document. Choose another id (e.g. prefix "
                    "it with your tenant), or delete it first with a key that can see it. Nothing was written."
                )

    def _superseders(self, docs: Sequence[Document]) -> dict[str, str]:
        """Which of `docs` a current document of its tenant supersedes, counting the batch's own documents."""
        tenant_of = {d.id: d.tenant for d in docs}
        by = supersession.superseders(self.store, tenant_of)
        for d in sorted(docs, key=lambda d: d.id):
            if d.supersedes in tenant_of and tenant_of[d.supersedes] == d.tenant and d.status is DocStatus.CURRENT:
                by[d.supersedes] = min(d.id, by.get(d.supersedes, d.id))
        return by

    def delete(self, doc_id: str, visible: Callable[[str | None], bool] = lambda _: True) -> int:
        """Remove every point of the document; the number of chunks it had. `visible(tenant)` False: `NotFound`, as if
        it did not exist (checked under the write lock, so the id cannot change hands in between)."""
        with self._write_lock:
            self._writable()
            stored = self.get(doc_id)
            if not visible(stored.document.tenant):
                raise NotFound(f"no document with id {doc_id!r}")
            self._reserve_space(len(stored.chunks) * 1024)
            self.store.delete(Clause(must=(Match("doc_id", doc_id),)))
            crash_point("delete:points-deleted")
            if stored.document.supersedes:  # what it retired may be current again
                supersession.refresh(self.store, [stored.document.supersedes])
            self._recount()
        return len(stored.chunks)

    def get(self, doc_id: str) -> StoredDocument:
        heads = self.store.retrieve([head_point_id(doc_id)])
        if not heads:
            raise NotFound(f"no document with id {doc_id!r}")
        gen = int(heads[0].payload["gen"])
        where = Clause(must=(Match("kind", "document"), Match("doc_id", doc_id), Match("gen", gen)))
        found = self.store.scroll(where, limit=1)
        if not found:
            raise StoreUnavailable(
                f"document {doc_id!r} is damaged: run `plumbline doctor --repair`, then re-ingest it"
            )
        record = found[0].payload
        points = self.store.scroll(
            Clause(must=(Match("kind", "chunk"), Match("doc_id", doc_id), Match("gen", gen))),
            limit=int(record["chunks"]) + 1,
        )
        chunks = sorted((chunk_from_payload(p.payload) for p in points), key=lambda c: c.ordinal)
        return StoredDocument(document_from_payload(record), tuple(chunks), gen, heads[0].payload.get("superseded_by"))

    def listing(self, where: Clause, cursor: str | None, limit: int) -> tuple[list[DocumentEntry], str | None]:
        """Up to `limit` committed documents whose records match `where`, in the engine's point order from `cursor`
        (None: the start), and the cursor of the next page (None after the last). A record of a generation that is
        not (or no longer) its document's committed one (a write in flight, a crash's leftover) is skipped."""
        records = _document_records(where)
        found: list[DocumentEntry] = []
        while len(found) < limit:
            page, cursor = self.store.page(cursor, limit - len(found), LISTED_FIELDS, records)
            committed = self.store.committed({p.payload["doc_id"] for p in page})
            found += [
                DocumentEntry.of(p.payload) for p in page if committed.get(p.payload["doc_id"]) == int(p.payload["gen"])
            ]
            if cursor is None:
                break
        return found, cursor

    def _check_tenant_caps(self, docs: Sequence[Document], known: dict[str, _Record]) -> None:
        """Refuse (`InsufficientStorage`, 507) a batch that would take a tenant past `limits.tenant_max_documents`:
        its ids not yet held, counted against the tenant's document records under the write lock, so that two
        batches cannot both slip under the cap. Documents of no tenant are not capped."""
        cap = self.limits.tenant_max_documents
        adding = Counter(d.tenant for d in docs if d.tenant is not None and d.id not in known)
        if not cap or not adding:
            return
        for tenant, new in sorted(adding.items()):
            held = self.count_records(Clause(must=(Match("tenant", tenant),)))
            if held + new > cap:
                raise InsufficientStorage(
                    f"tenant {tenant!r} holds {held:,} documents and this batch adds {new:,} new ones, past its cap "
                    f"of {cap:,} (PLUMBLINE_TENANT_MAX_DOCUMENTS): delete documents it no longer needs, or ask the "
                    "operator to raise the cap"
                )

    def count_records(self, where: Clause) -> int:
        """Document records matching `where` (`listing`'s filter): the committed documents, plus any record a write
        in flight or a crash left, until it is removed."""
        return self.store.count(_document_records(where))

    def documents(self) -> int:
        """Documents committed (one head each), as counted after the last write."""
        return self.sizes["document"]

    def chunks(self) -> int:
        """Chunk points (a crash's invisible leftovers included until removed), as counted after the last write."""
        return self.sizes["chunk"]

    def _count(self) -> dict[str, int]:
        # counted after each write, so that health checks and scrapes never wait on the engine
        return {"document": self.store.count(of_kind("head")), "chunk": self.store.count(of_kind("chunk"))}

    def _recount(self) -> None:
        try:
            self.sizes = self._count()
        except StoreUnavailable:
            log.warning("could not count the index after a write", exc_info=True)

    def check(
        self, *, grace: float = 0.0, repair: bool = False, everything: bool = True
    ) -> tuple[integrity.Report, list[str], integrity.Report]:
        """The integrity check (`service.index.integrity`) with writes held off; with `repair`, also fix what it found
        (all of it, or only leftovers and statuses: see `integrity.repair`), in a few rounds, since removing an
        unreadable head turns its chunks into leftovers. The first report, what was done, and the last report
        (the state after the repairs; the first one when nothing was done)."""
        with self._write_lock:
            found = report = integrity.check(self.store, grace=grace)
            done: list[str] = []
            for _ in range(3):
                actions = integrity.repair(self.store, report, everything=everything) if repair else []
                if not actions:
                    break
                done += actions
                report = integrity.check(self.store, grace=grace)
            self._recount()
        return found, done, report

    def _validated(self, docs: Sequence[Document]) -> list[Document]:
        if not docs:
            raise InvalidRequest("no documents given: send at least one in 'documents'")
        if len(docs) > self.limits.max_batch_documents:
            raise PayloadTooLarge(
                f"{len(docs)} documents in one batch; the limit is {self.limits.max_batch_documents}: split it"
            )
        seen: set[str] = set()
        out = []
        for n, doc in enumerate(docs):
            where = f"documents[{n}]"
            if not DOC_ID.match(doc.id or "") or not doc.id.strip():
                raise InvalidRequest(
                    f"{where}: id must be 1-512 characters, not all spaces, without control characters or '#'"
                )
            if {".", ".."} & set(doc.id.split("/")):
                # /documents/a/../b is /documents/b to every HTTP client: such a document could not be read back
                raise InvalidRequest(f"{where}: id {doc.id!r} has a '.' or '..' segment, which URLs resolve away")
            if doc.id in seen:
                raise InvalidRequest(f"{where}: id {doc.id!r} appears twice in the batch")
            seen.add(doc.id)
            if not any(ch.isprintable() and not ch.isspace() for ch in doc.text):
                raise InvalidRequest(f"{where} ({doc.id!r}): text is empty (it has no visible character)")
            if doc.supersedes == doc.id:
                raise InvalidRequest(f"{where} ({doc.id!r}): a document cannot supersede itself")
            if len(doc.text) > self.limits.max_document_chars:
                raise PayloadTooLarge(
                    f"{where} ({doc.id!r}): text has {len(doc.text)} characters; "
                    f"the limit is {self.limits.max_document_chars}"
                )
            out.append(doc if doc.title.strip() else replace(doc, title=_derived_title(doc)))
        return out

    def _encode(
        self,
        chunked: list[tuple[Document, list[Chunk]]],
        terms: list[list[str]],
        fingerprints: dict[str, str],
        gen: int,
        encoder: Bm25Encoder,
        superseded_by: dict[str, str],
    ) -> tuple[list[StorePoint], list[StorePoint]]:
        """Chunk points (embedded, and BM25-encoded from `terms`, each chunk's in order) and the documents' record
        points."""
        flat = [(doc, chunk) for doc, chunks in chunked for chunk in chunks]
        # one call for the whole batch: the model sorts texts by length, so padding is least this way
        vectors = np.asarray(self.embedder.embed_documents([c.embed_text for _, c in flat]), dtype=np.float32)
        points = [
            StorePoint(
                id=chunk_point_id(chunk.chunk_id, gen),
                payload=chunk_payload(doc, chunk, gen, superseded_by.get(doc.id)),
                dense=array("f", vector.tobytes()),
                sparse=encoder.encode_terms(chunk_terms),
            )
            for (doc, chunk), vector, chunk_terms in zip(flat, vectors, terms, strict=True)
        ]
        records = [
            StorePoint(
                document_point_id(doc.id, gen),
                document_payload(doc, gen, len(chunks), fingerprints[doc.id], superseded_by.get(doc.id)),
            )
            for doc, chunks in chunked
        ]
        return points, records

    def _disk_estimate(self, chunked: list[tuple[Document, list[Chunk]]]) -> int:
        """About the bytes a write adds: per chunk its float32 and int8 vectors, BM25 entries (8 bytes a
        character, generously) and payload; per document its record and head, the text counted again."""
        per_chunk = 5 * self.embedder.dimension + 1024
        return sum(
            len(doc.text) * 2 + 2048 + sum(per_chunk + 9 * len(c.text) for c in chunks) for doc, chunks in chunked
        )

    def _next_generation(self) -> int:
        # Microseconds: exact in the engine's float64 range conditions, and monotonic in this process.
        self._last_gen = max(time.time_ns() // 1000, self._last_gen + 1)
        return self._last_gen

    def _fingerprint(self, doc: Document) -> str:
        """SHA-256 of `json.dumps([asdict(doc), asdict(chunker config), asdict(wanted manifest)], sort_keys=True,
        default=str)`, with the settings' part serialised once (the same text: a list's items join with ", ")."""
        blob = f"[{json.dumps(asdict(doc), sort_keys=True, default=str)}, {self._settings_json}]"
        return hashlib.sha256(blob.encode()).hexdigest()

    def _records(self, ids: list[str]) -> dict[str, _Record]:
        """The head of each document already indexed."""
        heads = self.store.retrieve([head_point_id(i) for i in ids])
        return {h.payload["doc_id"]: _Record(StorePoint(h.id, h.payload)) for h in heads}

    def _remove_leftovers(self, committed: dict[str, int]) -> None:
        """Delete points of generations older than the committed one (a crash left them behind).

        Newer uncommitted points (a writer crashed before its commit) are left alone here, since another
        replica may be writing them right now; the document's next change deletes them."""
        for doc_id, gen in committed.items():
            stale = Clause(must=(Match("doc_id", doc_id), NumberRange("gen", lt=gen)))
            if self.store.count(stale):
                self.store.delete(stale)

    def _read_manifest(self) -> Manifest | None:
        records = self.store.retrieve([MANIFEST_ID])
        if not records:
            return None
        p = records[0].payload
        return Manifest(
            embedding_model=p["embedding_model"],
            dimension=int(p["dimension"]),
            tokenizer=TokenizerConfig(**p["tokenizer"]),
            bm25=Bm25Params(**p["bm25"]),
            schema_version=int(p["schema_version"]),
        )

    def _measured(self, first_terms: list[list[str]]) -> Manifest:
        """The manifest the first batch fixes: the settings, with the mean chunk length (in terms) measured on it."""
        if not self._measure:
            return self._wanted
        mean = sum(map(len, first_terms)) / len(first_terms)
        return replace(self._wanted, bm25=replace(self._wanted.bm25, avg_len=max(1.0, mean)))


def _document_records(where: Clause) -> Clause:
    """`where`, on document records only."""
    return Clause(must=(Match("kind", "document"), *where.must), should=where.should, must_not=where.must_not)


def _derived_title(doc: Document) -> str:
    match = re.search(r"^#\s+(.+)$", doc.text, flags=re.M)
    return match.group(1).strip() if match else doc.id


def _check_compatible(have: Manifest, want: Manifest, *, avg_len_set: bool) -> None:
    problems = []
    if have.schema_version != want.schema_version:
        problems.append(
            f"payload schema version {have.schema_version}, this version of Plumbline writes {want.schema_version}"
        )
    if (have.embedding_model, have.dimension) != (want.embedding_model, want.dimension):
        problems.append(
            f"embedding model {have.embedding_model} ({have.dimension}-dim), settings ask for "
            f"{want.embedding_model} ({want.dimension}-dim)"
        )
    if have.tokenizer != want.tokenizer:
        problems.append(f"tokenizer {have.tokenizer}, settings ask for {want.tokenizer}")
    if (have.bm25.k1, have.bm25.b) != (want.bm25.k1, want.bm25.b) or (
        avg_len_set and have.bm25.avg_len != want.bm25.avg_len
    ):
        problems.append(f"BM25 {have.bm25}, settings ask for {want.bm25}")
    if problems:
        raise IndexMismatch(
            "the index was built with " + "; ".join(problems) + ". Use a new data directory (or collection) "
            "and re-ingest, or change the settings back."
        )
