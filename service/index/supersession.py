"""`supersedes`: a current document retires the one it names, whatever that one's own status says.

A superseded pricing page is semantically perfect and factually wrong; only metadata can exclude it. So
when a current document B names `supersedes: A`, every point of A gets the effective status
`superseded` and `superseded_by: B`, and `fresh_only` search (status = current) drops A. A's own
status is kept as `declared_status`, so deleting B, or B ceasing to name A, restores it. Effective status
is recomputed for every document a write or a delete could affect: the written documents themselves
(someone may already supersede them) and the documents they, or their previous version, named.

Supersession never crosses tenants: B retires A only when both belong to the same tenant (or both to none).
A `supersedes` naming another tenant's document has no effect, exactly as if that document did not exist, so
it neither hides nor reveals anything. A document's tenant is read from its record at the committed generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.domain import DocStatus, Document
from service.filters import Clause, Match, MatchAny
from service.stores.base import ScoredPoint, StorePoint, VectorStore
from service.stores.payload import NEVER, document_point_id, fresh_until, head_point_id

HEAD_FIELDS = ("doc_id", "gen", "supersedes", "declared_status", "status", "superseded_by")


def tenants(store: VectorStore, heads: Iterable[StorePoint | ScoredPoint]) -> dict[str, str | None]:
    """Each committed document's tenant (by id), read from its record at the head's generation."""
    ids = [document_point_id(h.payload["doc_id"], int(h.payload["gen"])) for h in heads]
    return {r.payload["doc_id"]: r.payload.get("tenant") for r in store.retrieve(ids, fields=("doc_id", "tenant"))}


def superseders(store: VectorStore, targets: Mapping[str, str | None]) -> dict[str, str]:
    """For each document of `targets` (id -> its tenant) that a current document of the same tenant supersedes:
    that document's id (the first by id)."""
    ids = tuple(sorted(targets))
    if not ids:
        return {}
    where = Clause(
        must=(Match("kind", "head"), MatchAny("supersedes", ids), Match("declared_status", DocStatus.CURRENT))
    )
    # every head naming them, however many: heads of other tenants must not crowd out the one that counts
    limit = 16 * len(ids) + 16
    while len(heads := store.scroll(where, limit=limit, fields=HEAD_FIELDS)) == limit:
        limit *= 4
    of = tenants(store, heads)
    return _superseded_by(({**h.payload, "tenant": of.get(h.payload["doc_id"])} for h in heads), targets)


def _superseded_by(heads: Iterable[Mapping[str, Any]], tenant_of: Mapping[str, str | None]) -> dict[str, str]:
    """The rule, in one place: a current head naming `supersedes: X` retires X if X (a key of `tenant_of`) is of
    the head's own tenant; the first such head by id wins."""
    out: dict[str, str] = {}
    for h in sorted(heads, key=lambda h: h["doc_id"]):
        target = h.get("supersedes")
        if (
            target
            and h.get("declared_status") == DocStatus.CURRENT
            and target in tenant_of
            and tenant_of[target] == h.get("tenant")
        ):
            out.setdefault(target, h["doc_id"])
    return out


def refresh(store: VectorStore, doc_ids: Iterable[str]) -> None:
    """Recompute and store the effective status of each document in `doc_ids` that is indexed."""
    ids = tuple(sorted(set(doc_ids)))
    if not ids:
        return
    heads = store.retrieve([head_point_id(i) for i in ids], fields=HEAD_FIELDS)
    by = superseders(store, tenants(store, heads))
    current = {h.payload["doc_id"]: h.payload for h in heads}
    for doc_id, p in current.items():
        status = DocStatus.SUPERSEDED.value if doc_id in by else p["declared_status"]
        if (status, by.get(doc_id)) != (p.get("status"), p.get("superseded_by")):
            set_status(store, doc_id, status, by.get(doc_id))


def effective(heads: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """Each head's doc_id → (effective status, superseded_by), derived from all heads' declared fields and
    tenants alone.

    Example:
        >>> effective([{"doc_id": "a", "declared_status": "current", "tenant": "acme"},
        ...            {"doc_id": "b", "declared_status": "current", "supersedes": "a", "tenant": "acme"},
        ...            {"doc_id": "c", "declared_status": "current", "supersedes": "a", "tenant": "evil"}])["a"]
        ('superseded', 'b')
    """
    heads = list(heads)
    by = _superseded_by(heads, {h["doc_id"]: h.get("tenant") for h in heads})
    return {
        h["doc_id"]: (DocStatus.SUPERSEDED.value, by[h["doc_id"]])
        if h["doc_id"] in by
        else (h["declared_status"], None)
        for h in heads
    }


def set_status(store: VectorStore, doc_id: str, status: str, superseded_by: str | None) -> None:
    """Store a document's effective status, and the `fresh_until` that follows from it, on every one of its points."""
    heads = store.retrieve([head_point_id(doc_id)], fields=("valid_until",))
    valid_until = heads[0].payload.get("valid_until", NEVER) if heads else NEVER
    values = {"status": status, "superseded_by": superseded_by, "fresh_until": fresh_until(status, valid_until)}
    store.set_payload(Clause(must=(Match("doc_id", doc_id),)), values)


def cycle(store: VectorStore, docs: Sequence[Document]) -> list[str] | None:
    """A `supersedes` chain through `docs` (and the indexed documents they name) that comes back to its start,
    e.g. ['a', 'b', 'a']; None if there is none. The batch's own fields win over the indexed ones. The chain
    stays within the document's tenant: a link to another tenant's document is no link (see above)."""
    named: dict[str, tuple[str | None, str | None] | None] = {d.id: (d.supersedes, d.tenant) for d in docs}

    def step_from(doc_id: str, tenant: str | None) -> str | None:
        """What `doc_id` supersedes, if it is a document of `tenant` (None if it is not, or not indexed)."""
        if doc_id not in named:
            heads = store.retrieve([head_point_id(doc_id)], fields=HEAD_FIELDS)
            named[doc_id] = (heads[0].payload.get("supersedes"), tenants(store, heads).get(doc_id)) if heads else None
        entry = named[doc_id]
        return entry[0] if entry is not None and entry[1] == tenant else None

    for d in sorted(docs, key=lambda d: d.id):
        chain, step = [d.id], d.supersedes
        while step is not None and len(chain) <= MAX_CHAIN:
            chain.append(step)
            if step == d.id:
                return chain
            step = step_from(step, d.tenant)
    return None


MAX_CHAIN = 100  # longer supersession chains are not followed (and are not cycles we can afford to look for)
