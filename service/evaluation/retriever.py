"""A labelled set replayed through the live pipeline: `PipelineRetriever` feeds the eval library's runner from
`SearchPipeline.search_batch`, the very code behind `/search`; overrides are the same fields a `/search` request
takes. Also which cases a tenant's run replays, and which labelled documents the index does not hold."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace

from eval.cases import Case
from eval.matching import Retrieved
from eval.report import Report
from eval.runner import Query, Run
from eval.verdict import GateResult
from service.filters import parse_filters
from service.index import supersession
from service.retrieval.no_answer import answer_signal
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.stores.base import VectorStore
from service.stores.payload import head_point_id


class PipelineRetriever:
    """A `Retriever` over the in-process pipeline, with `base` as the run's search parameters and each case's own
    `filters` validated as /search validates them (`service.filters.parse_filters`). With `tenant`, every question
    searches that tenant alone, whatever its case's filters say. With `signals`, each search's "nothing matches"
    signal (`service.retrieval.no_answer.answer_signal`) is appended to it, in the order of the queries. With
    `embedded`, each hit's text as the models see it (`Chunk.embed_text`) is kept in it by chunk id.

    Example:
        >>> r = PipelineRetriever(pipeline, SearchParams(mode=Mode.KEYWORD))  # doctest: +SKIP
    """

    def __init__(
        self,
        pipeline: SearchPipeline,
        base: SearchParams,
        tenant: str | None = None,
        signals: list[float | None] | None = None,
        embedded: dict[str, str] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.base = base
        self.tenant = tenant
        self.signals = signals
        self.embedded = embedded

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:

        params = [self._params(q) for q in queries]
        # one instant per batch, taken before the search's own, so a hit its freshness filter let through is current
        now = dt.datetime.now(dt.UTC)
        results = self.pipeline.search_batch([q.text for q in queries], params, observe=False)
        if self.signals is not None:
            self.signals.extend(answer_signal(r.hits) for r in results)
        if self.embedded is not None:
            self.embedded.update((h.chunk.chunk_id, h.chunk.embed_text) for r in results for h in r.hits)
        return [
            [
                Retrieved(h.chunk.chunk_id, h.chunk.doc_id, h.chunk.text, h.score, stale=not h.current_at(now))
                for h in r.hits
            ]
            for r in results
        ]

    def _params(self, q: Query) -> SearchParams:
        limit = self.pipeline.limits.max_candidates
        wanted = q.k * 3 if q.unit == "doc" else q.k  # collapsing to documents needs a deeper pool
        filters = self.base.filters.merged(parse_filters(q.filters))
        return replace(
            self.base,
            k=q.k,
            candidates=min(limit, max(self.base.candidates, wanted)),
            filters=replace(filters, tenant=self.tenant) if self.tenant is not None else filters,
            distinct_docs=q.unit == "doc",
        )


@dataclass(frozen=True)
class Evaluation:
    run: Run
    report: Report
    gate: GateResult | None
    warnings: tuple[str, ...] = ()


def tenant_cases(cases: Sequence[Case], tenant: str | None) -> list[Case]:
    """The cases a run confined to `tenant` replays: those filed for it (their filters name it); None: all. A case
    filed for no tenant may name any tenant's documents, so a tenant's key neither sees nor replays it.

    Example:
        >>> from eval.cases import Label
        >>> label = (Label(doc_id="d"),)
        >>> cases = [Case("a", "q", label, filters={"tenant": "acme"}), Case("b", "q", label)]
        >>> [c.id for c in tenant_cases(cases, "acme")], tenant_cases(cases, "evil")
        (['a'], [])
    """
    if tenant is None:
        return list(cases)
    return [c for c in cases if c.filters.get("tenant") == tenant]


def unknown_documents(store: VectorStore, cases: Sequence[Case], tenant: str | None = None) -> list[str]:
    """A warning if some cases' labels name documents the index does not hold (for a run confined to `tenant`: that
    the tenant does not hold, so the warning says nothing of other tenants): a typo, or a document not ingested
    (yet), which no configuration can ever find; empty if every labelled document is there."""
    wanted = sorted({label.document for c in cases for label in c.positive})
    heads = store.retrieve([head_point_id(d) for d in wanted], fields=("doc_id", "gen"))
    if tenant is None:
        present = {h.payload["doc_id"] for h in heads}
    else:
        present = {doc_id for doc_id, owner in supersession.tenants(store, heads).items() if owner == tenant}
    missing = {c.id: sorted({label.document for label in c.positive} - present) for c in cases}
    bad = [(case_id, docs) for case_id, docs in missing.items() if docs]
    if not bad:
        return []
    shown = "; ".join(f"{case_id}: {', '.join(docs)}" for case_id, docs in bad[:10])
    more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
    return [f"{len(bad)} case(s) name documents the index does not hold, so they can never pass: {shown}{more}"]
