"""The integrity check behind `plumbline doctor` and the server's start: what a crash or an old bug left behind.

One pass over every point (in id order, a page at a time, only the fields the protocol needs) finds:
- **unreadable** points: the engine cannot deserialise their payload (an earlier version accepted metadata
  nested deeper than the engine can read back); such a point cannot even be deleted the normal way;
- **leftovers**: chunks and records of a generation that is not the document's committed one (a crash between
  the commit and the deletion of the old generation, or before the commit), which readers ignore but which
  cost candidate slots and count in BM25 statistics;
- **damaged** documents: a head whose committed generation lacks its record or some of its chunks;
- **status** disagreements: a document's stored effective status (`service.index.supersession`) differs from what
  the heads imply (a crash between the commit and the status update).

`repair` removes unreadable points, leftovers and damaged documents (each reported by id, so that they can be
re-ingested) and rewrites wrong statuses. Points of a generation newer than the committed one are only
leftovers once older than `grace`: on a shared Qdrant server another replica may be writing them right now.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from service.errors import StoreUnavailable
from service.filters import Clause, Match
from service.index import supersession
from service.stores.base import ScoredPoint, VectorStore

log = logging.getLogger("plumbline")
FIELDS = ("kind", "doc_id", "gen", "status", "superseded_by", "declared_status", "supersedes", "chunks", "tenant")
PAGE = 1024


@dataclass(frozen=True)
class Report:
    """What `check` found; `clean` when there is nothing to repair.

    Example:
        >>> Report(points=3, documents=1).clean
        True
    """

    points: int
    documents: int
    unreadable: tuple[str, ...] = ()
    leftovers: tuple[str, ...] = ()
    damaged: tuple[str, ...] = ()
    statuses: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    manifest: str | None = None

    @property
    def clean(self) -> bool:
        return not (self.unreadable or self.leftovers or self.damaged or self.statuses or self.manifest)

    def lines(self) -> list[str]:
        out = [f"{self.points} points, {self.documents} documents"]
        if self.manifest:
            out.append(f"manifest: {self.manifest}")
        if self.unreadable:
            out.append(f"{len(self.unreadable)} unreadable point(s): {_some(self.unreadable)}")
        if self.leftovers:
            out.append(f"{len(self.leftovers)} leftover point(s) of uncommitted or replaced generations")
        if self.damaged:
            out.append(f"{len(self.damaged)} damaged document(s), re-ingest them: {_some(self.damaged)}")
        for doc_id, (status, by) in sorted(self.statuses.items())[:20]:
            out.append(f"status of {doc_id!r} should be {status}" + (f" (superseded by {by!r})" if by else ""))
        return out


def check(store: VectorStore, *, grace: float = 0.0, manifest: str | None = None) -> Report:
    """Scan every point; `manifest` is a problem with the index manifest found by the caller (see `Index`)."""
    now_gen = (time.time() - grace) * 1e6  # generations are microseconds since the epoch
    heads: dict[str, Mapping[str, Any]] = {}
    records: dict[tuple[str, int], int] = {}
    tenants: dict[tuple[str, int], str | None] = {}  # supersession stays within a tenant
    chunks: dict[tuple[str, int], int] = defaultdict(int)
    members: dict[tuple[str, int], list[str]] = defaultdict(list)
    statuses: dict[tuple[str, int], set[tuple[str | None, str | None]]] = defaultdict(set)
    unreadable: list[str] = []
    junk: list[str] = []  # no kind we know: e.g. a purge that died between its two steps
    points = 0
    for p in _points(store, unreadable):
        points += 1
        kind, doc_id = p.payload.get("kind"), str(p.payload.get("doc_id"))
        if kind == "head":
            heads[doc_id] = p.payload
        elif kind in ("chunk", "document"):
            key = (doc_id, int(p.payload["gen"]))
            members[key].append(p.id)
            if kind == "document":
                records[key] = int(p.payload.get("chunks", 0))
                tenants[key] = p.payload.get("tenant")
            else:
                chunks[key] += 1
            statuses[key].add((p.payload.get("status"), p.payload.get("superseded_by")))
        elif kind != "manifest":
            junk.append(p.id)
    committed = {doc_id: int(h["gen"]) for doc_id, h in heads.items()}
    leftovers = junk + [
        point
        for key, ids in members.items()
        if committed.get(key[0]) != key[1] and (key[1] < committed.get(key[0], 0) or key[1] < now_gen)
        for point in ids
    ]
    damaged = {d for d, gen in committed.items() if records.get((d, gen)) != chunks.get((d, gen), 0)}
    wanted = supersession.effective({**h, "tenant": tenants.get((d, committed[d]))} for d, h in heads.items())
    wrong = {
        doc_id: want
        for doc_id, want in wanted.items()
        if doc_id not in damaged
        and (
            (heads[doc_id].get("status"), heads[doc_id].get("superseded_by")) != want
            or statuses.get((doc_id, committed[doc_id]), {want}) != {want}
        )
    }
    return Report(points, len(heads), tuple(unreadable), tuple(leftovers), tuple(sorted(damaged)), wrong, manifest)


def repair(store: VectorStore, report: Report, *, everything: bool = True) -> list[str]:
    """Fix what `report` found (not the manifest: that needs a settings change or a new index); what was done.
    Without `everything`, only what loses nothing a reader could see: leftovers and statuses (what the
    server does on start); unreadable points and damaged documents are left for `plumbline doctor --repair`."""
    done = []
    purge = [*report.unreadable, *report.leftovers] if everything else list(report.leftovers)
    if purge:
        store.purge(purge)
        done.append(
            f"removed {len(purge) - len(report.leftovers)} unreadable and {len(report.leftovers)} leftover point(s)"
        )
    for doc_id in report.damaged if everything else ():
        store.delete(Clause(must=(Match("doc_id", doc_id),)))
        done.append(f"removed damaged document {doc_id!r}: re-ingest it")
    for doc_id, (status, by) in sorted(report.statuses.items()):
        supersession.set_status(store, doc_id, status, by)
    if report.statuses:
        done.append(f"corrected the status of {len(report.statuses)} document(s)")
    return done


def _points(store: VectorStore, unreadable: list[str]) -> Iterator[ScoredPoint]:
    """Every point with `FIELDS`; ids of points whose payload the engine cannot read go to `unreadable`."""
    offset: str | None = None
    while True:
        try:
            page, after = store.page(offset, PAGE, FIELDS)
        except StoreUnavailable:  # a point on this page cannot be read: find it, point by point
            ids, after = store.page(offset, PAGE, ())
            page = []
            for p in ids:
                try:
                    page += store.retrieve([p.id], fields=FIELDS)
                except StoreUnavailable:
                    unreadable.append(p.id)
        yield from page
        if after is None:
            return
        offset = after


def _some(ids: tuple[str, ...]) -> str:
    return ", ".join(repr(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
