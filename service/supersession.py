"""`supersedes`: a current document retires the one it names, whatever that one's own status says.

A superseded pricing page is semantically perfect and factually wrong; only metadata can exclude it. So
when a current document B names `supersedes: A`, every point of A gets the effective status
`superseded` and `superseded_by: B`, and `fresh_only` search (status = current) drops A. A's own
status is kept as `declared_status`, so deleting B, or B ceasing to name A, restores it. Effective status
is recomputed for every document a write or a delete could affect: the written documents themselves
(someone may already supersede them) and the documents they, or their previous version, named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.domain import DocStatus, Document
from service.filters import Clause, Match, MatchAny
from service.payload import head_point_id
from service.stores.base import VectorStore


def superseders(store: VectorStore, doc_ids: Iterable[str]) -> dict[str, str]:
    """For each of `doc_ids` that a current document supersedes: that document's id (the first by id)."""
    ids = tuple(sorted(set(doc_ids)))
    if not ids:
        return {}
    where = Clause(
        must=(Match("kind", "head"), MatchAny("supersedes", ids), Match("declared_status", DocStatus.CURRENT))
    )
    heads = store.scroll(where, limit=16 * len(ids) + 16, fields=("doc_id", "supersedes", "declared_status"))
    return _superseded_by(h.payload for h in heads)


def _superseded_by(heads: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The rule, in one place: a current head naming `supersedes: X` retires X; the first such head by id wins."""
    out: dict[str, str] = {}
    for h in sorted(heads, key=lambda h: h["doc_id"]):
        if h.get("supersedes") and h.get("declared_status") == DocStatus.CURRENT:
            out.setdefault(h["supersedes"], h["doc_id"])
    return out


def refresh(store: VectorStore, doc_ids: Iterable[str]) -> None:
    """Recompute and store the effective status of each document in `doc_ids` that is indexed."""
    ids = tuple(sorted(set(doc_ids)))
    if not ids:
        return
    by = superseders(store, ids)
    fields = ("doc_id", "declared_status", "status", "superseded_by")
    current = {h.payload["doc_id"]: h.payload for h in store.retrieve([head_point_id(i) for i in ids], fields=fields)}
    for doc_id, p in current.items():
        status = DocStatus.SUPERSEDED.value if doc_id in by else p["declared_status"]
        if (status, by.get(doc_id)) != (p.get("status"), p.get("superseded_by")):
            set_status(store, doc_id, status, by.get(doc_id))


def effective(heads: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """Each head's doc_id → (effective status, superseded_by), derived from all heads' declared fields alone.

    Example:
        >>> effective([{"doc_id": "a", "declared_status": "current"},
        ...            {"doc_id": "b", "declared_status": "current", "supersedes": "a"}])["a"]
        ('superseded', 'b')
    """
    heads = list(heads)
    by = _superseded_by(heads)
    return {
        h["doc_id"]: (DocStatus.SUPERSEDED.value, by[h["doc_id"]])
        if h["doc_id"] in by
        else (h["declared_status"], None)
        for h in heads
    }


def set_status(store: VectorStore, doc_id: str, status: str, superseded_by: str | None) -> None:
    """Store a document's effective status on every one of its points."""
    store.set_payload(Clause(must=(Match("doc_id", doc_id),)), {"status": status, "superseded_by": superseded_by})


def cycle(store: VectorStore, docs: Sequence[Document]) -> list[str] | None:
    """A `supersedes` chain through `docs` (and the indexed documents they name) that comes back to its start,
    e.g. ['a', 'b', 'a']; None if there is none. The batch's own fields win over the indexed ones."""
    named: dict[str, str | None] = {d.id: d.supersedes for d in docs}

    def next_of(doc_id: str) -> str | None:
        if doc_id not in named:
            heads = store.retrieve([head_point_id(doc_id)], fields=("supersedes",))
            named[doc_id] = heads[0].payload.get("supersedes") if heads else None
        return named[doc_id]

    for d in sorted(docs, key=lambda d: d.id):
        chain, step = [d.id], d.supersedes
        while step is not None and len(chain) <= MAX_CHAIN:
            chain.append(step)
            if step == d.id:
                return chain
            step = next_of(step)
    return None


MAX_CHAIN = 100  # longer supersession chains are not followed (and are not cycles we can afford to look for)
