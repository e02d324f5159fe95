"""How much of a passage's relevance survives a cut to fit the cross-encoder: at its end, or around the query's terms.

    python benchmarks/rerank_window.py [--queries 300] [--tokens 64 96 128]   # about 10 minutes

A rerank's cost grows with the tokens it reads, so the service cuts long passages (PLUMBLINE_RERANK_MAX_TOKENS). No
trained cross-encoder can be installed here (none is packaged on PyPI, and tests and benchmarks download nothing),
so this measures the cut with the trained model that is here: the MiniLM bi-encoder reorders each SciFact test
query's BM25 top 20 by the cosine between the query and the passage as cut, and the table gives nDCG@10 and MRR
(pytrec_eval, document level; MRR over the 20) for each cut. A cut that drops the sentence that answers the query
lowers both. It is a proxy for a cross-encoder, which reads query and passage together, not a measurement of one.

Cuts: the whole chunk (the bi-encoder's own limit is 256 tokens), the first N tokens of the pair's room (what the
model's truncation does), and `PassageWindow` at N (title and heading path kept, the stretch with the most query
terms). The room is N minus the query's tokens and the pair's special tokens, as for a cross-encoder. A last row
scores the widest window with the model's weights quantised to int8, as PLUMBLINE_RERANK_INT8 does a cross-encoder's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pytrec_eval
from rank_bm25 import BM25Okapi
from tokenizers import Tokenizer as ModelTokenizer

from benchmarks.datasets import SCIFACT, require
from eval.trec import read_qrels, read_queries
from service.domain import Chunk
from service.index.chunking import Chunker, ChunkerConfig
from service.index.loaders import iter_documents
from service.retrieval.embedding import Embedder, resolve_model_path
from service.retrieval.onnx_models import OnnxEmbedder
from service.retrieval.rerank import PassageWindow
from service.retrieval.tokenizer import Tokenizer
from service.runtime import build_embedder, tokenizer_config
from service.settings import PACKAGED_MODEL, Settings

DEPTH = 20


def head_cut(model: Any, max_tokens: int) -> Callable[[str, Sequence[str]], list[str]]:
    """What the model's own truncation keeps of each passage: the pair cut at `max_tokens`, longest side first."""
    tokens = ModelTokenizer.from_str(model.to_str())
    tokens.no_padding()
    tokens.enable_truncation(max_length=max_tokens, strategy="longest_first")

    def cut(query: str, passages: Sequence[str]) -> list[str]:
        out = []
        for passage, e in zip(passages, tokens.encode_batch([(query, p) for p in passages]), strict=True):
            end = max(end for (_, end), seq in zip(e.offsets, e.sequence_ids, strict=True) if seq == 1)
            out.append(passage[:end])
        return out

    return cut


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--tokens", type=int, nargs="+", default=[64, 96, 128])
    args = p.parse_args()
    require(SCIFACT)
    settings = Settings(data_dir=Path(tempfile.mkdtemp()), device="cpu", ingest_nice=0)
    chunker = Chunker(ChunkerConfig(settings.chunk_size, settings.chunk_overlap))
    chunks: list[Chunk] = [c for d in iter_documents(SCIFACT / "corpus.jsonl") for c in chunker.chunk(d)]
    analyser = Tokenizer(tokenizer_config(settings))
    bm25 = BM25Okapi([analyser.tokens(c.embed_text) for c in chunks])
    qrels = read_qrels(SCIFACT / "qrels" / "test.tsv")
    queries = {q: t for q, t in read_queries(SCIFACT / "queries.jsonl").items() if q in qrels}
    queries = dict(list(queries.items())[: args.queries])
    embedder = build_embedder(settings)
    # MiniLM's tokenizer: the same WordPiece vocabulary as the MiniLM cross-encoders
    model = ModelTokenizer.from_file(f"{resolve_model_path(PACKAGED_MODEL)}/tokenizer.json")

    candidates = {}
    for qid, text in queries.items():
        scores = bm25.get_scores(analyser.tokens(text))
        candidates[qid] = [chunks[i] for i in np.argsort(-scores, kind="stable")[:DEPTH]]

    cuts: dict[str, Callable[[str, Sequence[str]], list[str]]] = {"whole chunk (256)": lambda _, ps: list(ps)}
    for n in args.tokens:
        cuts[f"first {n} tokens"] = head_cut(model, n)
        cuts[f"window {n} tokens"] = PassageWindow(model, analyser, n).fit

    def run_of(order: Callable[[str, list[Chunk]], list[float]]) -> dict[str, dict[str, float]]:
        run: dict[str, dict[str, float]] = {}
        for qid, text in queries.items():
            run[qid] = {}
            for chunk, score in zip(candidates[qid], order(text, candidates[qid]), strict=True):
                run[qid][chunk.doc_id] = max(score, run[qid].get(chunk.doc_id, -1e9))
        return run

    def reordered(
        cut: Callable[[str, Sequence[str]], list[str]], model: Embedder = embedder
    ) -> Callable[[str, list[Chunk]], list[float]]:
        def order(query: str, found: list[Chunk]) -> list[float]:
            texts = cut(query, [c.embed_text for c in found])
            vectors = model.embed_documents(texts)
            return [float(s) for s in vectors @ model.embed_queries([query])[0]]

        return order

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recip_rank"})
    recall = np.mean([any(c.doc_id in qrels[q] for c in candidates[q]) for q in queries])
    print(f"\n{len(queries)} SciFact test queries, BM25 top {DEPTH} chunks (a relevant one among them: {recall:.1%})")
    print("reordered by the MiniLM bi-encoder on the passage as cut\n")
    print("| order | nDCG@10 | MRR (top 20) |")
    print("|---|---|---|")

    def bm25_order(_: str, found: list[Chunk]) -> list[float]:
        return [float(DEPTH - i) for i in range(len(found))]

    rows = {"BM25 (no reorder)": bm25_order} | {name: reordered(cut) for name, cut in cuts.items()}
    # int8 weights (PLUMBLINE_RERANK_INT8), applied the same way to this MiniLM: what quantising does to its ranking;
    # by hand, since the service quantises only a cross-encoder
    small = OnnxEmbedder(PACKAGED_MODEL, cache=settings.data_dir / "models", int8=True)
    widest = max(args.tokens)
    rows[f"window {widest} tokens, int8 weights"] = reordered(cuts[f"window {widest} tokens"], small)
    for name, order in rows.items():
        measures = evaluator.evaluate(run_of(order))
        ndcg = np.mean([m["ndcg_cut_10"] for m in measures.values()])
        mrr = np.mean([m["recip_rank"] for m in measures.values()])
        print(f"| {name} | {ndcg:.4f} | {mrr:.4f} |")


if __name__ == "__main__":
    main()
