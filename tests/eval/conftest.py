"""Fixtures for the eval tests: SciFact (test split) and a small BM25 to rank it without the service.

The eval library must not import `service/`, so the differential tests against pytrec_eval rank
SciFact with the sparse BM25 below (numpy + scipy, about a second for the whole test split).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

from eval.cases import Case
from eval.trec import Qrels, cases_from_qrels, read_qrels, read_queries

# The public collections sit beside the checkout (../shared/datasets); PLUMBLINE_DATASETS points elsewhere.
DATASETS = Path(os.environ.get("PLUMBLINE_DATASETS", Path(__file__).resolve().parents[3] / "shared" / "datasets"))
SCIFACT = DATASETS / "scifact"


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class SparseBm25:
    """Okapi BM25 (k1 = 0.9, b = 0.4, Lucene's idf) as one sparse matrix: scores = W[:, query terms].sum()."""

    def __init__(self, texts: Sequence[str], k1: float = 0.9, b: float = 0.4) -> None:
        self.vocab: dict[str, int] = {}
        rows, cols, counts, lengths = [], [], [], []
        for i, text in enumerate(texts):
            tf = Counter(tokenize(text))
            lengths.append(sum(tf.values()))
            for term, n in tf.items():
                rows.append(i)
                cols.append(self.vocab.setdefault(term, len(self.vocab)))
                counts.append(n)
        n_docs = len(texts)
        tf_matrix = sparse.csr_matrix((np.array(counts, dtype=float), (rows, cols)), shape=(n_docs, len(self.vocab)))
        df = np.bincount(cols, minlength=len(self.vocab))
        idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        length = np.array(lengths, dtype=float)
        norm = k1 * (1 - b + b * length / length.mean())
        row_norm = np.repeat(norm, np.diff(tf_matrix.indptr))
        tf_matrix.data = tf_matrix.data * (k1 + 1) / (tf_matrix.data + row_norm)
        self.weights = (tf_matrix @ sparse.diags(idf)).tocsc()

    def top(self, query: str, n: int) -> list[tuple[int, float]]:
        """The `n` best (row, score) pairs, ties broken by row: a deterministic ranking."""
        terms = [self.vocab[t] for t in tokenize(query) if t in self.vocab]
        scores = np.asarray(self.weights[:, terms].sum(axis=1)).ravel()
        order = np.lexsort((np.arange(scores.size), -scores))[:n]
        return [(int(i), float(scores[i])) for i in order]


@dataclass(frozen=True)
class Scifact:
    corpus: dict[str, dict[str, str]]  # doc id -> title, text
    qrels: Qrels
    cases: list[Case]


@pytest.fixture(scope="session")
def scifact() -> Scifact:
    if not SCIFACT.is_dir():
        pytest.skip(
            f"SciFact is not at {SCIFACT}: put BEIR's SciFact there (corpus.jsonl, queries.jsonl, qrels/test.tsv), or "
            "set PLUMBLINE_DATASETS to the folder that holds scifact/"
        )
    corpus = {}
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            corpus[str(row["_id"])] = {"title": row["title"], "text": row["text"]}
    qrels = read_qrels(SCIFACT / "qrels" / "test.tsv")
    cases = cases_from_qrels(qrels, read_queries(SCIFACT / "queries.jsonl"), category="scifact")
    return Scifact(corpus, qrels, cases)


@pytest.fixture(scope="session")
def scifact_doc_bm25(scifact: Scifact) -> tuple[list[str], SparseBm25]:
    ids = list(scifact.corpus)
    return ids, SparseBm25([f"{d['title']} {d['text']}" for d in scifact.corpus.values()])


def split_sentences(text: str, per_chunk: int = 3) -> list[str]:
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    return [" ".join(sentences[i : i + per_chunk]) for i in range(0, len(sentences), per_chunk)] or [""]


@pytest.fixture(scope="session")
def scifact_chunk_bm25(scifact: Scifact) -> tuple[list[tuple[str, str, str]], SparseBm25]:
    """SciFact split into chunks (`<doc>#<n>`, title first, then three sentences a chunk)."""
    chunks: list[tuple[str, str, str]] = []
    for doc_id, d in scifact.corpus.items():
        parts = [d["title"], *split_sentences(d["text"])]
        chunks.extend((f"{doc_id}#{n}", doc_id, part) for n, part in enumerate(parts))
    return chunks, SparseBm25([text for _, _, text in chunks])
