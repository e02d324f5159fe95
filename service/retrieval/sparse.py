"""BM25 as sparse vectors: term-frequency saturation on the document side, IDF in the engine.

A document (chunk) vector holds, for each term t with frequency tf in a text of dl terms,
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; a query vector holds each query term's count.
The store's sparse vector uses Qdrant's IDF modifier, so the engine multiplies by
``idf(t) = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))`` at query time: the dot product is then Lucene's BM25. N and n_t
are counted over the search's tenant (`service.filters.keyword_corpus`); avgdl is a constant of the index (its
manifest), baked into every chunk's vector, so no statistic of another tenant's can move a tenant's scores.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from service.retrieval.tokenizer import Tokenizer, term_id
from service.stores.base import SparseVector


@dataclass(frozen=True)
class Bm25Params:
    """BM25 constants; `avg_len` is the mean document length in terms (a corpus statistic)."""

    k1: float = 0.9
    b: float = 0.4
    avg_len: float = 120.0

    def __post_init__(self) -> None:
        if self.k1 <= 0 or not 0 <= self.b <= 1 or self.avg_len <= 0:
            raise ValueError(f"invalid BM25 parameters {self}: need k1 > 0, 0 <= b <= 1, avg_len > 0")


class Bm25Encoder:
    """Encodes documents and queries into the sparse vectors the engine scores with IDF.

    Example:
        >>> from service.retrieval.tokenizer import TokenizerConfig
        >>> enc = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params())
        >>> len(enc.encode_query("refund refund window").indices)
        2
    """

    def __init__(self, tokenizer: Tokenizer, params: Bm25Params) -> None:
        self.tokenizer = tokenizer
        self.params = params

    def encode_document(self, text: str) -> SparseVector:
        return self.encode_terms(self.tokenizer.tokens(text))

    def encode_terms(self, terms: list[str]) -> SparseVector:
        """A document's vector from its terms as `Tokenizer.tokens` gives them (an ingest tokenizes each chunk once:
        the first batch of an index also measures its mean length from them)."""
        counts = Counter(map(term_id, terms))
        k1, b, avg_len = self.params.k1, self.params.b, self.params.avg_len
        norm = k1 * (1 - b + b * sum(counts.values()) / avg_len)
        return _vector({tid: tf * (k1 + 1) / (tf + norm) for tid, tf in counts.items()})

    def encode_query(self, text: str, drop_filler: bool = False) -> SparseVector:
        """A query's vector: each term's count; with `drop_filler`, without the words of a question that name no
        topic (`service.retrieval.tokenizer.QUESTION_FILLER`)."""
        terms = self.tokenizer.query_tokens(text, drop_filler)
        return _vector({tid: float(tf) for tid, tf in Counter(map(term_id, terms)).items()})


def _vector(weights: dict[int, float]) -> SparseVector:
    ordered = sorted(weights.items())
    return SparseVector(tuple(i for i, _ in ordered), tuple(v for _, v in ordered))
