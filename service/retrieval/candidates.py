"""Candidate lists: from raw engine points to one query's dense and keyword lists, keyed by chunk id.

A document's *committed* generation is the one its head names: the index writes a generation's chunks
and records first and the head last, so the head is the commit marker. Candidates of any
other generation are dropped before the lists are cut to depth: a re-ingest half-way (old and new
chunks both in the engine), a write that failed or crashed before its commit, and the leftovers of a
crash before the old generation was deleted are all invisible to readers, on every backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.stores.base import ScoredPoint

# Candidates are fetched this much deeper than asked and cut by (score, chunk id) here, so that ties at
# the cut, and points of uncommitted generations, cost no depth and break the same way everywhere.
TIE_MARGIN = 16


@dataclass
class Candidates:
    """One query's candidate lists ({chunk id: score} per vector name), the point and document behind
    each chunk, and, for weighted fusion, both scores of every candidate.

    Example:
        >>> c = Candidates()
        >>> c.add("dense", [], committed={}, limit=10)
        >>> c.lists
        {'dense': {}}
    """

    lists: dict[str, dict[str, float]] = field(default_factory=dict)
    points: dict[str, str] = field(default_factory=dict)
    documents: dict[str, str] = field(default_factory=dict)
    rescored: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, using: str, points: Sequence[ScoredPoint], committed: Mapping[str, int], limit: int) -> None:
        """Keep points of committed generations, best first by (score, chunk id), up to `limit`."""
        live = [p for p in points if committed.get(p.payload["doc_id"]) == int(p.payload["gen"])]
        scores: dict[str, float] = {}
        for p in sorted(live, key=lambda p: (-p.score, p.payload["chunk_id"]))[:limit]:
            chunk_id = p.payload["chunk_id"]
            scores[chunk_id] = p.score
            self.points[chunk_id] = p.id
            self.documents[chunk_id] = p.payload["doc_id"]
        self.lists[using] = scores

    @property
    def union(self) -> list[str]:
        return sorted({k for scores in self.lists.values() for k in scores})

    def first_per_document(self, order: Sequence[str]) -> list[str]:
        """`order` with only the first (best) chunk of each document."""
        seen: set[str] = set()
        out = []
        for key in order:
            if self.documents[key] not in seen:
                seen.add(self.documents[key])
                out.append(key)
        return out
