"""The search pipeline on the demo handbook with the real packaged embedding model."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest

from service.domain import DocStatus, Document, FusionMethod, Mode
from service.errors import InvalidRequest
from service.filters import FilterSpec, parse_metadata_filters
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.options import SearchOverrides
from service.retrieval.pipeline import RERANK_OFF, SearchParams, SearchPipeline, search_params
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.settings import Settings
from service.stores.edge import EdgeStore
from tests.fakes import FakeEmbedder

SUPERSEDED = {"billing/pricing-2025", "hr/remote-work-policy-2024", "security/password-policy-2024"}
NOT_SERVED = SUPERSEDED | {"product/roadmap-2027-draft", "it/legacy-vpn-setup", "hr/travel-freeze-2026"}
CHANGED_POLICY_QUERIES = [
    "minimum password length",
    "how often do I rotate my password",
    "password lockout attempts",
    "how many office days per week",
    "home office stipend amount",
    "internet allowance remote work",
    "price of pro monthly",
    "enterprise annual price per seat",
    "premium connector pack price",
    "work from anywhere days",
    "travel freeze essential trips",
]


@pytest.fixture(scope="module")
def pipeline(handbook_index: Index) -> SearchPipeline:
    return SearchPipeline(handbook_index.store, handbook_index.embedder, handbook_index.encoder, None)


def doc_ids(pipeline: SearchPipeline, query: str, params: SearchParams) -> list[str]:
    return [h.chunk.doc_id for h in pipeline.search(query, params).hits]


@pytest.mark.parametrize("mode", list(Mode))
def test_superseded_and_unpublished_documents_never_come_back_fresh_only(pipeline: SearchPipeline, mode: Mode) -> None:
    for query in CHANGED_POLICY_QUERIES:
        result = pipeline.search(query, SearchParams(k=20, mode=mode))
        assert result.hits
        assert not {h.chunk.doc_id for h in result.hits} & NOT_SERVED, query
        assert all(h.status is DocStatus.CURRENT for h in result.hits)


def test_without_fresh_only_the_old_versions_are_found(pipeline: SearchPipeline) -> None:
    found = doc_ids(pipeline, "minimum password length", SearchParams(k=10, fresh_only=False))
    assert "security/password-policy-2024" in found
    only_old = SearchParams(k=10, fresh_only=False, filters=FilterSpec(status=(DocStatus.SUPERSEDED,)))
    assert set(doc_ids(pipeline, "minimum password length", only_old)) <= SUPERSEDED
    expired = doc_ids(pipeline, "travel freeze essential trips", SearchParams(k=10, fresh_only=False))
    assert "hr/travel-freeze-2026" in expired  # current status, but valid_until has passed


def test_tenant_tags_ids_dates_and_metadata_filters(pipeline: SearchPipeline) -> None:
    q = "expense receipts and claim deadline"
    assert set(doc_ids(pipeline, q, SearchParams(filters=FilterSpec(tenant="fjord")))) <= {
        "fjord/expenses",
        "fjord/holidays",
        "fjord/it-onboarding",
    }
    assert "fjord/expenses" not in doc_ids(pipeline, q, SearchParams(filters=FilterSpec(tenant="larkspur")))
    tagged = pipeline.search(q, SearchParams(filters=FilterSpec(tags=("security",))))
    assert tagged.hits
    assert all("security" in h.tags for h in tagged.hits)
    assert set(doc_ids(pipeline, q, SearchParams(filters=FilterSpec(doc_ids=("it/vpn", "hr/travel"))))) <= {
        "it/vpn",
        "hr/travel",
    }
    cutoff = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
    recent = pipeline.search(q, SearchParams(filters=FilterSpec(updated_after=cutoff)))
    assert recent.hits
    assert all(h.updated_at and h.updated_at >= cutoff for h in recent.hits)
    by_meta = pipeline.search(
        q,
        SearchParams(
            filters=FilterSpec(
                metadata=parse_metadata_filters({"department": "security", "review_cycle_days": {"lte": 180}})
            )
        ),
    )
    assert by_meta.hits
    assert all(h.metadata["department"] == "security" and h.metadata["review_cycle_days"] <= 180 for h in by_meta.hits)


def test_keyword_search_finds_internal_codes(pipeline: SearchPipeline) -> None:
    assert doc_ids(pipeline, "LC-419", SearchParams(k=1, mode=Mode.KEYWORD)) == ["it/vpn"]
    assert doc_ids(pipeline, "E-ING-207", SearchParams(k=1, mode=Mode.KEYWORD))[0] in {
        "product/error-codes",
        "product/data-connectors",
    }


def test_explain_gives_every_stage(pipeline: SearchPipeline) -> None:
    result = pipeline.search("vpn keeps disconnecting LC-419", SearchParams(k=5, explain=True))
    for rank, hit in enumerate(result.hits, start=1):
        assert hit.stages["fusion"].rank == rank
        assert hit.stages["fusion"].score == hit.score
        assert {"dense", "keyword"} <= set(hit.stages)
    # weighted fusion rescored every candidate on both sides; some were not in one side's top list
    assert {"embed", "sparse", "retrieve", "rescore", "fuse", "fetch", "total"} <= set(result.timings_ms)


@pytest.mark.parametrize("rrf_k", [1, 60])
def test_rrf_fusion_ranks(pipeline: SearchPipeline, rrf_k: int) -> None:
    """Each hit's score is sum over the lists that hold it of 1 / (rrf_k + rank), and hits come best first."""
    result = pipeline.search("vpn error", SearchParams(k=5, fusion=FusionMethod.RRF, rrf_k=rrf_k))
    assert len(result.hits) == 5
    sides = [[s.rank for name, s in h.stages.items() if name in ("dense", "keyword") and s.rank] for h in result.hits]
    assert all(sides)  # every hit came from at least one list
    expected = [sum(1 / (rrf_k + rank) for rank in ranks) for ranks in sides]
    assert [h.score for h in result.hits] == pytest.approx(expected, rel=1e-12)
    assert expected == sorted(expected, reverse=True)
    assert [h.stages["fusion"].rank for h in result.hits] == [1, 2, 3, 4, 5]


def test_results_are_deterministic_and_batch_equals_single(pipeline: SearchPipeline) -> None:
    queries = ["parental leave weeks", "refund annual plan", "LRK-4012"]
    params = [SearchParams(k=7), SearchParams(k=5, mode=Mode.DENSE), SearchParams(k=3, mode=Mode.KEYWORD)]
    batch = pipeline.search_batch(queries, params)
    for query, p, together in zip(queries, params, batch, strict=True):
        alone = pipeline.search(query, p)
        assert [h.chunk.chunk_id for h in alone.hits] == [h.chunk.chunk_id for h in together.hits]
        assert [h.score for h in alone.hits] == pytest.approx([h.score for h in together.hits], rel=1e-5)
        assert len(together.hits) == p.k


def test_distinct_docs(pipeline: SearchPipeline) -> None:
    hits = pipeline.search("password", SearchParams(k=8, distinct_docs=True)).hits
    assert len({h.chunk.doc_id for h in hits}) == len(hits) == 8


def test_stopword_only_query_warns_and_dense_still_answers(pipeline: SearchPipeline) -> None:
    result = pipeline.search("is it the", SearchParams(k=3))
    assert any("no keyword terms" in w for w in result.warnings)
    assert len(result.hits) == 3


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        # from the plain-language set (eval/sets/plain.jsonl): the filler words brought up FAQ entries and other
        # documents phrased as questions; without them the keyword side finds the table that answers
        ("how do I raise a ticket with IT for something that isn't urgent?", "it/helpdesk"),
        ("how often does someone check who still has access to our AWS accounts?", "security/access-reviews"),
    ],
)
def test_keyword_side_leaves_out_a_questions_filler(pipeline: SearchPipeline, question: str, answer: str) -> None:
    keyword = SearchParams(k=3, mode=Mode.KEYWORD)
    assert keyword.drop_filler  # the served default
    assert doc_ids(pipeline, question, keyword)[0] == answer
    assert doc_ids(pipeline, question, replace(keyword, drop_filler=False))[0] != answer


def test_search_params_take_the_filler_setting() -> None:
    asked = SearchOverrides()
    assert search_params(Settings(), asked, reranker_configured=False).drop_filler
    assert not search_params(Settings(keyword_drop_filler=False), asked, reranker_configured=False).drop_filler


def test_rerank_without_a_model_says_so(pipeline: SearchPipeline) -> None:
    result = pipeline.search("vpn", SearchParams(k=3, rerank=True))
    assert not result.reranked
    assert RERANK_OFF in result.warnings


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"k": 0}, "k must be"),
        ({"k": 101}, "k must be"),
        ({"candidates": 5000}, "candidates"),
        ({"alpha": 1.5}, "alpha"),
        ({"rerank_depth": 0}, "rerank_depth"),
        ({"rrf_k": 0}, "rrf_k"),
        ({"k": 50, "candidates": 10}, "at least k"),
    ],
)
def test_bad_parameters(pipeline: SearchPipeline, change: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        pipeline.search("vpn", replace(SearchParams(), **change))


def test_bad_queries(pipeline: SearchPipeline) -> None:
    with pytest.raises(InvalidRequest, match="empty"):
        pipeline.search("   ", SearchParams())
    with pytest.raises(InvalidRequest, match="characters long"):
        pipeline.search("x" * 2001, SearchParams())


ACME = [
    Document(id="acme/refunds", title="Refunds", text="Refunds of annual plans within thirty days.", tenant="acme"),
    Document(
        id="acme/plans",
        title="Plans",
        text="Annual plans renew every year; monthly plans renew monthly.",
        tenant="acme",
    ),
    Document(id="acme/vpn", title="VPN", text="The VPN client refunds nothing; it connects.", tenant="acme"),
]
GLOBEX = [
    Document(id=f"globex/{n}", title="Refunds", text=f"Refunds desk number {n}: annual refunds.", tenant="globex")
    for n in range(6)
]


def _index(path: Path) -> Index:
    # a fixed mean chunk length: measured on the first batch, it would differ between the two indexes compared
    return Index(
        EdgeStore(path),
        FakeEmbedder(),
        Chunker(ChunkerConfig(size=200, overlap=0)),
        TokenizerConfig(),
        Bm25Params(avg_len=6.0),
        measure_avg_len=False,
    )


def _keyword_scores(index: Index, tenant: str | None) -> dict[str, float]:
    pipeline = SearchPipeline(index.store, index.embedder, index.encoder, None)
    params = SearchParams(k=10, mode=Mode.KEYWORD, filters=FilterSpec(tenant=tenant))
    return {h.chunk.chunk_id: h.score for h in pipeline.search("annual refunds", params).hits}


def test_a_tenants_keyword_scores_depend_on_its_own_documents_only(tmp_path: Path) -> None:
    shared = _index(tmp_path / "shared")
    shared.ingest(ACME)
    acme, everyone = _keyword_scores(shared, "acme"), _keyword_scores(shared, None)
    assert set(acme) == {"acme/refunds#0", "acme/plans#0", "acme/vpn#0"}
    shared.ingest(GLOBEX)  # another tenant's documents full of the query's terms
    assert _keyword_scores(shared, "acme") == pytest.approx(acme, rel=1e-6)
    # a search over every tenant is scored over the whole collection, where the terms are now common
    assert _keyword_scores(shared, None)["acme/refunds#0"] < everyone["acme/refunds#0"]
    shared.store.close()
    reopened = _index(tmp_path / "shared")  # the statistics are the engine's own: a restart keeps them
    assert _keyword_scores(reopened, "acme") == pytest.approx(acme, rel=1e-6)
    # acme's own changes (a deletion, a new version, a superseding document) and another tenant's deletion
    reopened.delete("acme/vpn")
    changed = [
        replace(ACME[0], text="Refunds of annual plans within sixty days, refunds in full."),
        Document(
            id="acme/plans-2027", title="Plans", text="Annual plans renew.", tenant="acme", supersedes="acme/plans"
        ),
    ]
    reopened.ingest(changed)
    reopened.delete("globex/0")
    alone = _index(tmp_path / "alone")  # acme's documents as they now stand, and nobody else's
    alone.ingest([ACME[1], *changed])
    expected = _keyword_scores(alone, "acme")
    assert set(expected) == {"acme/refunds#0", "acme/plans-2027#0"}  # fresh only: acme/plans is superseded
    assert _keyword_scores(reopened, "acme") == pytest.approx(expected, rel=1e-6)
    reopened.store.close()
    alone.store.close()
