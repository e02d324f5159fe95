"""`supersedes`: a current document retires the one it names, whatever that one's own status says.

A superseded pricing page is semantically perfect and factually wrong; only metadata can exclude it. So
when a current document B names `supersedes: A`, every point of A gets the effective status
`superseded` and `superseded_by: B`, and `fresh_only` search (status = current) drops A. A's own
status is kept as `declared_status`, so deleting B, or B ceasing to name A, restores it. Effective status
is recomputed for every document a write or a delete could affect: the written documents themselves
(someone may already supersede them) and the documents they, or their previous version, named.
"""

from __future__ import annotations

from collections.abc import Iterable

from service.domain import DocStatus
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
    out: dict[str, str] = {}
    for r in sorted(
        store.scroll(where, limit=16 * len(ids) + 16, fields=("doc_id", "supersedes")),
        key=lambda r: r.payload["doc_id"],
    ):
        out.setdefault(r.payload["supersedes"], r.payload["doc_id"])
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
            store.set_payload(
                Clause(must=(Match("doc_id", doc_id),)), {"status": status, "superseded_by": by.get(doc_id)}
            )
