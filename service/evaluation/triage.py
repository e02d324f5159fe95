"""Incident triage: replay the reported question through the live pipeline, with the user's filters, and say
where the right source stands and why.

Verdicts, in the order they are decided:
- `retrieved`: the source is in the top k; retrieval did its job, so look at generation.
- `ranked_low`: it is among the top `DEPTH` results, below k: a ranking problem (rerank, fusion weight).
- `filtered_out`: a filter the user had hid it, and `filtered_by` names which: a request filter (tenant, tags,
  doc_ids, status, updated range, metadata), or freshness ("superseded by X" when the document that replaced
  it did not reach the top k either, "expired on ...", "status draft").
- `stale_source`: the reporter pointed at an outdated version: the source is superseded and its current
  version reached the top k, or it is expired, archived or draft by its own fields.
- `not_retrieved`: no filter hid it and it is not among the top `DEPTH`: chunking or keyword search.

Each filter is tested on its own against the source's chunks inside the engine, so "which filter" uses the
very conditions `/search` applies.

The rank, the stages, `filtered_by`, the top hits and the source's status come from searching the index: a key that
may not search the incident's tenant is shown the verdict alone (`Triage.withheld`, `withhold`; the application
layer decides who).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from eval.cases import Label
from eval.matching import Retrieved, judge
from service.domain import DocStatus, Hit
from service.filters import Clause, FilterSpec, Match, build_filter
from service.index.index import StoredDocument
from service.infra.faults import crash_point
from service.retrieval.pipeline import SearchParams, SearchPipeline

DEPTH = 100  # how deep triage looks for the source
TOP = 3  # the hits that came first instead


@dataclass(frozen=True)
class Triage:
    verdict: str
    k: int
    rank: int | None  # the source's final rank (after rerank when reranked), within DEPTH
    stages: Mapping[str, int | None]  # dense, keyword, fused, rerank
    filtered_by: tuple[str, ...]
    top: tuple[Mapping[str, Any], ...]
    source: Mapping[str, Any]
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "k": self.k,
            "rank": self.rank,
            "stages": dict(self.stages),
            "filtered_by": list(self.filtered_by),
            "top": [dict(t) for t in self.top],
            "source": dict(self.source),
            "explanation": self.explanation,
        }

    def withheld(self) -> Triage:
        """What a key that may not search the tenant is shown: the verdict and k, and what to look at."""
        return _withheld(self.verdict, self.k)


def withhold(stored: Mapping[str, Any]) -> dict[str, Any]:
    """`Triage.withheld` of a triage stored as JSON (`Triage.to_json`)."""
    return _withheld(str(stored["verdict"]), int(stored["k"])).to_json()


WITHHELD = "the rank, the hits that came first and the source's status are shown only to keys with the search role"


def _withheld(verdict: str, k: int) -> Triage:
    what = {
        "retrieved": f"the source was within the top {k}: look at generation",
        "ranked_low": f"the source was retrieved, below the top {k}: look at rerank and fusion weights",
        "filtered_out": "a filter the user had (or the freshness guard) hid the source",
        "stale_source": "the reported source is outdated: point the incident at the current version, or reject it",
        "not_retrieved": "the source was not retrieved and no filter hid it: look at chunking and keywords",
    }.get(verdict, verdict)
    return Triage(verdict, k, None, {}, (), (), {}, f"{what} ({WITHHELD} for this tenant)")


def outdated(stored: StoredDocument, now: dt.datetime) -> str | None:
    """Why a document is not current now ("superseded by X", "expired on ...", "status draft"), or None."""
    doc = stored.document
    if stored.superseded_by:
        return f"superseded by {stored.superseded_by}"
    if doc.status is not DocStatus.CURRENT:
        return f"status {doc.status.value}"
    if doc.valid_until is not None and doc.valid_until <= now:
        return f"expired on {doc.valid_until.isoformat().replace('+00:00', 'Z')}"
    return None


def triage(
    pipeline: SearchPipeline, question: str, label: Label, stored: StoredDocument, params: SearchParams, k: int
) -> Triage:
    """Where `label`'s source stands for `question` searched with `params` (the user's filters and freshness)."""
    crash_point("incident:triage")
    now = dt.datetime.now(dt.UTC)
    depth = min(DEPTH, pipeline.limits.max_k)
    wide = replace(params, k=depth, candidates=max(params.candidates, depth), explain=True, distinct_docs=False)
    hits = pipeline.search(question, wide).hits
    ranked = [Retrieved(h.chunk.chunk_id, h.chunk.doc_id, h.chunk.text, h.score) for h in hits]
    rank = judge([label], ranked, "chunk").first_ranks[0]
    stages = _stage_ranks(hits[rank - 1]) if rank is not None else dict.fromkeys(STAGES)
    why_old = outdated(stored, now)
    source = {
        "doc_id": stored.document.id,
        "status": DocStatus.SUPERSEDED.value if stored.superseded_by else stored.document.status.value,
        "superseded_by": stored.superseded_by,
        "valid_until": stored.document.valid_until.isoformat() if stored.document.valid_until else None,
        "current": why_old is None,
    }
    top = tuple(_summary(h) for h in hits[:TOP])
    shown = {h.chunk.doc_id for h in hits[:k]}

    def verdict(name: str, filtered_by: Sequence[str], explanation: str) -> Triage:
        return Triage(name, k, rank, stages, tuple(filtered_by), top, source, explanation)

    if rank is not None and rank <= k:
        return verdict("retrieved", (), f"the source was at rank {rank}, within the top {k}: look at generation")
    if rank is not None:
        return verdict(
            "ranked_low", (), f"the source was at rank {rank}, below the top {k}: look at rerank and fusion weights"
        )
    hidden = _hiding_filters(pipeline, stored, params, now)
    request_filters = [f for f in hidden if f != "freshness"]
    if request_filters:
        return verdict(
            "filtered_out",
            request_filters + ([why_old] if "freshness" in hidden and why_old else []),
            "the user's filters exclude the source: " + ", ".join(request_filters),
        )
    if why_old is not None and (stored.superseded_by is None or stored.superseded_by in shown):
        return verdict(
            "stale_source",
            [why_old] if "freshness" in hidden else [],
            f"the reported source is outdated ({why_old})"
            + (f"; its current version {stored.superseded_by} was shown" if stored.superseded_by else "")
            + ": point the incident at the current version, or reject it",
        )
    if "freshness" in hidden and why_old is not None:
        return verdict(
            "filtered_out",
            [why_old],
            f"the freshness filter hid the source ({why_old}) and its replacement did not reach the top {k}: "
            "check that the supersession is right, and why the replacement is not retrieved",
        )
    return verdict(
        "not_retrieved", (), f"the source is not in the top {depth} and no filter hid it: look at chunking and keywords"
    )


STAGES = ("dense", "keyword", "fused", "rerank")


def _stage_ranks(hit: Hit) -> dict[str, int | None]:
    names = {"dense": "dense", "keyword": "keyword", "fused": "fusion", "rerank": "rerank"}
    return {ours: (hit.stages[theirs].rank if theirs in hit.stages else None) for ours, theirs in names.items()}


def _summary(hit: Hit) -> dict[str, Any]:
    return {
        "chunk_id": hit.chunk.chunk_id,
        "doc_id": hit.chunk.doc_id,
        "title": hit.chunk.title,
        "heading_path": hit.chunk.heading,
        "score": hit.score,
    }


def _hiding_filters(pipeline: SearchPipeline, stored: StoredDocument, p: SearchParams, now: dt.datetime) -> list[str]:
    """The request filter fields, and "freshness", that on their own exclude every chunk of the source."""
    own = Clause(must=(Match("kind", "chunk"), Match("doc_id", stored.document.id), Match("gen", stored.generation)))
    tests: list[tuple[str, Clause]] = []
    for f in fields(FilterSpec):
        value = getattr(p.filters, f.name)
        if value:
            only = FilterSpec(**{f.name: value})
            tests.append((f.name, build_filter(only, fresh_only=False, now=now)))
    if p.fresh_only:
        tests.append(("freshness", build_filter(FilterSpec(), fresh_only=True, now=now)))
    return [name for name, cond in tests if pipeline.store.count(Clause(must=(*own.must, cond))) == 0]
