"""Upgrades of an index written by an earlier payload schema, run when the index is opened (idempotent: a crash
half-way repeats it at the next start, and the manifest's version is raised last).

3 -> 4: every point gets `fresh_until` (`service.stores.payload.fresh_until`), the one field `fresh_only` search
reads, and heads get `valid_until`, from the document's record at its committed generation. Documents that share
the same values are written together, so an index of open-ended current documents takes a handful of writes.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from service.filters import Clause, MatchAny
from service.stores.base import VectorStore
from service.stores.payload import NEVER, document_point_id, fresh_until

log = logging.getLogger("plumbline")
_PAGE = 1024


def to_4(store: VectorStore) -> None:
    """Store `fresh_until` on every document's points."""
    heads: dict[str, tuple[int, str]] = {}
    offset: str | None = None
    while True:
        points, offset = store.page(offset, _PAGE, ("kind", "doc_id", "gen", "status"))
        for p in points:
            if p.payload.get("kind") == "head":
                heads[p.payload["doc_id"]] = (int(p.payload["gen"]), p.payload.get("status", "current"))
        if offset is None:
            break
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    ids = sorted(heads)
    for start in range(0, len(ids), _PAGE):
        part = ids[start : start + _PAGE]
        records = store.retrieve([document_point_id(i, heads[i][0]) for i in part], fields=("doc_id", "valid_until"))
        valid = {r.payload["doc_id"]: r.payload.get("valid_until") or NEVER for r in records}
        for doc_id in part:
            until = valid.get(doc_id, NEVER)
            groups[(fresh_until(heads[doc_id][1], until), until)].append(doc_id)
    for (fresh, until), doc_ids in sorted(groups.items()):
        for start in range(0, len(doc_ids), _PAGE):
            where = Clause(must=(MatchAny("doc_id", tuple(doc_ids[start : start + _PAGE])),))
            store.set_payload(where, {"fresh_until": fresh, "valid_until": until})
    log.info("upgraded the index to payload schema 4: fresh_until on the points of %d document(s)", len(heads))
