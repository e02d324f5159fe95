"""BM25 end to end against a reference: our document weights plus the engine's IDF must equal
Lucene's BM25 computed directly (bm25s-style differential test on the demo handbook's chunks), over the whole
collection and, for a search confined to a tenant, over that tenant's chunks alone."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from service.domain import Document
from service.filters import FilterSpec, build_filter, keyword_corpus
from service.index.chunking import Chunker, ChunkerConfig
from service.retrieval.sparse import Bm25Encoder, Bm25Params
from service.retrieval.tokenizer import Tokenizer, TokenizerConfig
from service.stores.base import SPARSE, StorePoint, VectorQuery
from service.stores.edge import EdgeStore

QUERIES = [
    "refund annual plan",
    "vpn error LC-419",
    "password minimum length",
    "parental leave weeks",
    "laptop replacement",
    "invoice VAT number",
    "on-call SEV1 page",
]


def reference_bm25(query: list[str], docs: list[list[str]], k1: float, b: float, avg_len: float) -> np.ndarray:
    n = len(docs)
    df = Counter(t for d in docs for t in set(d))
    scores = np.zeros(n)
    for i, d in enumerate(docs):
        tf = Counter(d)
        for t in query:
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                scores[i] += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / avg_len))
    return scores


@pytest.mark.parametrize("tenant", [None, "larkspur", "fjord"])
def test_engine_scores_equal_reference_bm25(handbook_docs: list[Document], tmp_path: Path, tenant: str | None) -> None:
    tokenizer = Tokenizer(TokenizerConfig())
    pairs = [(d, c) for d in handbook_docs for c in Chunker(ChunkerConfig()).chunk(d)]
    chunks = [c for _, c in pairs]
    tokens = [tokenizer.tokens(c.embed_text) for c in chunks]
    params = Bm25Params(k1=0.9, b=0.4, avg_len=float(np.mean([len(t) for t in tokens])))
    encoder = Bm25Encoder(tokenizer, params)
    store = EdgeStore(tmp_path / "index")
    store.ensure_schema(4)
    store.upsert(
        [
            StorePoint(
                f"00000000-0000-0000-0000-{i:012d}",
                {"kind": "chunk", "chunk_id": c.chunk_id, "doc_id": c.doc_id, "gen": 1, "tenant": d.tenant},
                dense=[1.0, 0.0, 0.0, 0.0],
                sparse=encoder.encode_document(c.embed_text),
            )
            for i, (d, c) in enumerate(pairs)
        ]
    )
    spec = FilterSpec(tenant=tenant)
    where, corpus = build_filter(spec, fresh_only=False, now=dt.datetime.now(dt.UTC)), keyword_corpus(spec)
    scope = [i for i, (d, _) in enumerate(pairs) if tenant is None or d.tenant == tenant]  # what the search sees
    assert 0 < len(scope) < len(pairs) or tenant is None
    for q in QUERIES:
        # the reference knows only the chunks in scope: its N and document frequencies are theirs
        in_scope = reference_bm25(tokenizer.tokens(q), [tokens[i] for i in scope], params.k1, params.b, params.avg_len)
        [hits] = store.query([VectorQuery(SPARSE, encoder.encode_query(q), where, 50, corpus=corpus)])
        got = {h.payload["chunk_id"]: h.score for h in hits}
        top = np.argsort(-in_scope, kind="stable")[:50]
        ref = {chunks[scope[i]].chunk_id: in_scope[i] for i in top if in_scope[i] > 0}
        assert set(got) == set(ref), q
        ids = sorted(got)
        assert np.allclose([got[i] for i in ids], [ref[i] for i in ids], rtol=1e-4), q
    store.close()


def test_document_weights_saturate_and_normalise_length() -> None:
    enc = Bm25Encoder(Tokenizer(TokenizerConfig(stemmer=None, stopwords="none")), Bm25Params(k1=1.2, b=0.75, avg_len=4))
    one, three = enc.encode_document("refund"), enc.encode_document("refund refund refund")
    assert three.values[0] > one.values[0]
    assert three.values[0] < 3 * one.values[0]  # saturation
    long = enc.encode_document("refund " + "other " * 20)
    assert long.values[long.indices.index(one.indices[0])] < one.values[0]  # longer texts weigh a term less


def test_query_vector_counts_repeated_terms_and_can_be_empty() -> None:
    enc = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params())
    v = enc.encode_query("refund refund window")
    assert sorted(v.values) == [1.0, 2.0]
    assert list(v.indices) == sorted(v.indices)
    assert enc.encode_query("the of and").is_empty


def test_query_vector_can_leave_out_a_questions_filler() -> None:
    enc = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params())
    question = "how do I raise a ticket with IT?"
    assert len(enc.encode_query(question).indices) == 5  # how, do, i, rais, ticket ("it" is a stopword)
    assert enc.encode_query(question, drop_filler=True) == enc.encode_query("raise ticket")


def test_invalid_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="BM25"):
        Bm25Params(k1=0)
    with pytest.raises(ValueError, match="BM25"):
        Bm25Params(b=1.5)
