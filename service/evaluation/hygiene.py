"""Corpus hygiene: which documents crowd the top k of a set's runs without answering, with their freshness metadata
and their near-duplicates, read from the index (`eval.distractors` computes the report itself).

A document a caller may not see (another tenant's) is never named: `visible(tenant)` decides, and a row for a
document it cannot see is left out of the report and of the duplicate groups. A document deleted since the run is
shown as `deleted`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from eval.distractors import DistractorReport, DocSketch, distractor_report_over, duplicate_groups
from eval.runner import Run
from service.errors import NotFound
from service.index.index import Index, StoredDocument
from service.retrieval.embedding import Embedder

SKETCH_CHARS = 4000  # of a document's text embedded for near-duplicate detection
OWNER_KEYS = ("owner", "author", "maintainer")  # metadata keys read as a document's owner


@dataclass(frozen=True)
class Hygiene:
    """A distractor report (`eval.distractors`) completed from the index: each distractor's freshness (status,
    updated_at, age in days, valid_until, owner, superseded_by, supersedes) and the near-duplicate groups among the
    distractors and the documents they crowded out."""

    report: DistractorReport
    freshness: dict[str, dict[str, Any]]
    groups: list[tuple[str, ...]]

    def to_json(self) -> dict[str, Any]:
        out = self.report.to_json()
        out["freshness"] = self.freshness
        out["duplicate_groups"] = [list(g) for g in self.groups]
        return out


class HygieneService:
    def __init__(self, index: Index, embedder: Embedder) -> None:
        self.index = index
        self.embedder = embedder

    def distractors(
        self, runs: Sequence[Run], *, k: int | None, limit: int, visible: Callable[[str | None], bool]
    ) -> Hygiene:
        """The report over `runs` (one, or a set's recent monitoring runs), its rows the documents `visible`
        allows."""
        report = distractor_report_over(runs, k=k, limit=limit * 2)  # room for rows the caller may not see
        stored: dict[str, StoredDocument | None] = {}
        for row in report.rows:
            stored[row.doc_id] = self._get(row.doc_id)
        shown = tuple(
            row
            for row in report.rows
            if (doc := stored[row.doc_id]) is None or visible(doc.document.tenant)  # a deleted one has no tenant left
        )[:limit]
        report = replace(report, rows=shown)
        freshness = {row.doc_id: _freshness(stored[row.doc_id]) for row in shown}
        # the documents the crowded cases should have found: a distractor that duplicates one is a common cause
        answers = {
            r.doc_id
            for run in runs
            for case in run.cases
            if case.relevant is not None
            for r, ok in zip(case.retrieved, case.relevant, strict=False)
            if ok
        }
        for doc_id in sorted(answers - set(stored)):
            doc = self._get(doc_id)
            if doc is not None and visible(doc.document.tenant):
                stored[doc_id] = doc
        sketches = {
            d: _sketch(doc) for d, doc in stored.items() if doc is not None and (d in freshness or d in answers)
        }
        groups = [g for g in duplicate_groups(self._embedded(sketches)) if any(d in freshness for d in g)]
        return Hygiene(report, freshness, groups)

    def _get(self, doc_id: str) -> StoredDocument | None:
        try:
            return self.index.get(doc_id)
        except NotFound:
            return None

    def _embedded(self, sketches: dict[str, DocSketch]) -> dict[str, DocSketch]:
        if not sketches:
            return sketches
        ids = sorted(sketches)
        vectors = np.asarray(self.embedder.embed_documents([sketches[d].text[:SKETCH_CHARS] for d in ids]))
        return {d: replace(sketches[d], vector=tuple(float(x) for x in v)) for d, v in zip(ids, vectors, strict=True)}


def _sketch(doc: StoredDocument) -> DocSketch:
    return DocSketch(doc.document.text, tuple(sorted({c.heading for c in doc.chunks if c.heading})))


def _freshness(doc: StoredDocument | None) -> dict[str, Any]:
    if doc is None:
        return {"status": "deleted"}
    d = doc.document
    updated = d.updated_at
    age = (dt.datetime.now(dt.UTC) - updated).days if updated is not None else None
    owner = next((str(d.metadata[k]) for k in OWNER_KEYS if d.metadata.get(k)), None)
    return {
        "title": d.title,
        "tenant": d.tenant,
        "status": d.status.value,
        "updated_at": updated.isoformat() if updated is not None else None,
        "age_days": age,
        "valid_until": d.valid_until.isoformat() if d.valid_until is not None else None,
        "owner": owner,
        "superseded_by": doc.superseded_by,
        "supersedes": d.supersedes,
        "tags": list(d.tags),
    }
