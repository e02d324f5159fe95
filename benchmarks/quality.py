"""Retrieval quality on public collections, through the service's own pipeline, beside published numbers.

    python benchmarks/quality.py                 # SciFact, CMRC 2018 and the analyzer study (about 40 minutes)
    python benchmarks/quality.py --only scifact  # or cmrc, or tokenizers (stemming/stopwords on SciFact train)
    python benchmarks/quality.py --only scifact --tenant t1  # the collection as one tenant's, searched as that tenant

SciFact: the corpus is ingested like any user's documents (chunked, title + heading prefix, MiniLM
embeddings, our BM25), evaluated at unit="doc" on the test split. Every parameter (RRF k, weighted
alpha) is chosen on the train split only. CMRC 2018: paragraphs chunked small (200 characters), one
evidence label per question (its first answer that occurs in the paragraph), unit="chunk".
Indexes are cached under --work-dir, so a second run skips the embedding. With --tenant every document belongs to
that tenant and every question searches it alone, as a tenant-bound key's would: keyword scores then come from the
tenant's own statistics (`service.filters.keyword_corpus`) rather than the whole collection's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.datasets import CMRC, SCIFACT, require
from eval.cases import Case, Label
from eval.matching import Unit
from eval.report import mean_metrics
from eval.runner import run_set
from eval.trec import cases_from_qrels, read_qrels, read_queries
from service.domain import FusionMethod, Mode
from service.evaluation.retriever import PipelineRetriever
from service.filters import of_kind
from service.index.chunking import Chunker, ChunkerConfig
from service.index.loaders import iter_documents
from service.retrieval.embedding import Embedder
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Encoder, Bm25Params
from service.retrieval.tokenizer import Tokenizer
from service.runtime import Components, Runtime, build_embedder, build_store, tokenizer_config
from service.settings import Settings
from service.stores.base import StorePoint
from service.stores.payload import (
    chunk_payload,
    chunk_point_id,
    document_payload,
    document_point_id,
    head_payload,
    head_point_id,
)

RRF_GRID = (10, 20, 30, 60, 100)
ALPHA_GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def build(
    name: str, corpus: Path, chunking: ChunkerConfig, settings: Settings, embedder: Embedder, tenant: str | None
) -> SearchPipeline:
    """The service over `corpus` (every document `tenant`'s, if given), wired as the server wires it, in its own data
    directory under the work directory."""
    folder = settings.data_dir / (f"{name}-{tenant}" if tenant else name)
    own = {"data_dir": folder, "chunk_size": chunking.size, "chunk_overlap": chunking.overlap}
    runtime = Runtime(settings.model_copy(update=own), Components(embedder=lambda _: embedder))
    runtime.warm_up()
    index = runtime.index
    docs = [replace(d, tenant=tenant) for d in iter_documents(corpus)]
    start, chunks = time.perf_counter(), 0
    for i in range(0, len(docs), 256):
        chunks += index.ingest(docs[i : i + 256]).chunks
    print(
        f"[{name}] {len(docs)} documents, {index.chunks()} chunks "
        f"({chunks} embedded now, {time.perf_counter() - start:.0f} s)",
        file=sys.stderr,
    )
    return runtime.pipeline


def score(
    pipeline: SearchPipeline,
    cases: Sequence[Case],
    params: SearchParams,
    ks: Sequence[int],
    unit: Unit,
    tenant: str | None,
) -> dict[str, float]:
    run = run_set(cases, PipelineRetriever(pipeline, params, tenant), set_name="bench", ks=ks, unit=unit)
    return mean_metrics(run.cases)


def setting(base: SearchParams, field: str, value: float) -> SearchParams:
    """`base` with one field set: a grid search's step."""
    changed: dict[str, Any] = {field: value}
    return replace(base, **changed)


def best(
    pipeline: SearchPipeline,
    cases: Sequence[Case],
    base: SearchParams,
    field: str,
    grid: Sequence[float],
    metric: str,
    tenant: str | None,
) -> tuple[float, dict[float, float]]:
    results = {v: score(pipeline, cases, setting(base, field, v), (10,), "doc", tenant)[metric] for v in grid}
    return max(grid, key=lambda v: results[v]), results  # ties: the first in the grid


def scifact(settings: Settings, embedder: Embedder, sizes: Sequence[int], tenant: str | None) -> None:
    root = SCIFACT
    queries = read_queries(root / "queries.jsonl")
    train = cases_from_qrels(read_qrels(root / "qrels" / "train.tsv"), queries)
    test = cases_from_qrels(read_qrels(root / "qrels" / "test.tsv"), queries)
    # the chunk size is chosen like every other parameter: on the train split, for the default (hybrid) mode
    print("\n### SciFact chunk size, train split nDCG@10 (unit=doc)\n")
    print("| chunk size | chunks | keyword | dense | hybrid weighted alpha=0.5 |")
    print("|---|---|---|---|---|")
    by_size = {}
    for size in sizes:
        chunking = ChunkerConfig(size, size // 10)
        pipeline = build(f"scifact-{size}", root / "corpus.jsonl", chunking, settings, embedder, tenant)
        m = {mode: score(pipeline, train, SearchParams(mode=mode), (10,), "doc", tenant)["ndcg@10"] for mode in Mode}
        chunks = pipeline.store.count(of_kind("chunk"))
        print(f"| {size} | {chunks} | {m[Mode.KEYWORD]:.4f} | {m[Mode.DENSE]:.4f} | {m[Mode.HYBRID]:.4f} |")
        by_size[size] = (m[Mode.HYBRID], pipeline)
    size = max(sizes, key=lambda s: by_size[s][0])
    pipeline = by_size[size][1]
    hybrid = SearchParams(mode=Mode.HYBRID)
    rrf_k, rrf_grid = best(
        pipeline, train, replace(hybrid, fusion=FusionMethod.RRF), "rrf_k", RRF_GRID, "ndcg@10", tenant
    )
    alpha, alpha_grid = best(
        pipeline, train, replace(hybrid, fusion=FusionMethod.WEIGHTED), "alpha", ALPHA_GRID, "ndcg@10", tenant
    )
    print(f"[scifact] train nDCG@10 by rrf_k: {_fmt(rrf_grid)} -> {rrf_k}", file=sys.stderr)
    print(f"[scifact] train nDCG@10 by alpha: {_fmt(alpha_grid)} -> {alpha}", file=sys.stderr)
    rows = [
        ("keyword (BM25, ours)", SearchParams(mode=Mode.KEYWORD), "BM25: BEIR 0.665; Pyserini flat 0.6789 / R 0.9253"),
        ("dense (all-MiniLM-L6-v2)", SearchParams(mode=Mode.DENSE), "all-MiniLM-L6-v2 (MTEB) 0.6451 / R 0.9250"),
        (
            f"hybrid RRF (k={rrf_k})",
            replace(hybrid, fusion=FusionMethod.RRF, rrf_k=int(rrf_k)),
            "bge-small-en-v1.5 0.7127 / R 0.9450",
        ),
        (
            f"hybrid weighted (alpha={alpha})",
            replace(hybrid, fusion=FusionMethod.WEIGHTED, alpha=alpha),
            "bge-base-en-v1.5 0.7408; BM25+CE 0.688",
        ),
    ]
    print(f"\n### SciFact, test split (300 queries), unit=doc, chunk size {size} (chosen on train)\n")
    print("| method | nDCG@10 | R@100 | train nDCG@10 | published (same split and metric) |")
    print("|---|---|---|---|---|")
    for label, params, published in rows:
        t = score(pipeline, test, params, (10, 100), "doc", tenant)
        tr = score(pipeline, train, params, (10,), "doc", tenant)
        print(f"| {label} | {t['ndcg@10']:.4f} | {t['recall@100']:.4f} | {tr['ndcg@10']:.4f} | {published} |")


def cmrc(settings: Settings, embedder: Embedder, tenant: str | None) -> None:
    root = CMRC
    pipeline = build("cmrc", root / "corpus.jsonl", ChunkerConfig(200, 40), settings, embedder, tenant)
    corpus = {json.loads(line)["_id"]: json.loads(line)["text"] for line in (root / "corpus.jsonl").open()}
    qrels = read_qrels(root / "qrels" / "test.tsv")
    cases = []
    for line in (root / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        [doc_id] = [d for d, g in qrels[q["_id"]].items() if g > 0]
        answer = next((a for a in q["metadata"]["answers"] if a.strip() and a in corpus[doc_id]), None)
        if answer:
            cases.append(Case(q["_id"], q["text"], (Label(doc_id=doc_id, evidence=answer),), source="cmrc"))
    print(f"\n### CMRC 2018 (Chinese), {len(cases)} questions, chunks of 200 characters, evidence labels, unit=chunk\n")
    print("| method | hit@5 | recall@10 | MRR@10 | nDCG@10 |")
    print("|---|---|---|---|---|")
    for label, params in [
        ("keyword (BM25, CJK unigrams + bigrams)", SearchParams(mode=Mode.KEYWORD)),
        ("keyword, question filler kept", SearchParams(mode=Mode.KEYWORD, drop_filler=False)),
        ("dense (English MiniLM: not meant for Chinese)", SearchParams(mode=Mode.DENSE)),
        ("hybrid weighted (alpha 0.5)", SearchParams()),
        ("hybrid weighted (alpha 0.5), question filler kept", SearchParams(drop_filler=False)),
    ]:
        m = score(pipeline, cases, params, (5, 10), "chunk", tenant)
        print(f"| {label} | {m['hit@5']:.4f} | {m['recall@10']:.4f} | {m['mrr@10']:.4f} | {m['ndcg@10']:.4f} |")


def tokenizer_study(settings: Settings, embedder: Embedder) -> None:
    """Keyword-only SciFact train nDCG@10 for each analyzer (no embedding needed: keyword mode never embeds)."""
    root = SCIFACT
    docs = list(iter_documents(root / "corpus.jsonl"))
    train = cases_from_qrels(read_qrels(root / "qrels" / "train.tsv"), read_queries(root / "queries.jsonl"))
    chunker = Chunker(ChunkerConfig(1000, 100))
    chunks = [(d, c) for d in docs for c in chunker.chunk(d)]
    print("\n### Analyzer choice: SciFact train, keyword only, nDCG@10 (unit=doc)\n")
    print("| stemmer | stopwords | nDCG@10 | R@100 |")
    print("|---|---|---|---|")
    for n, (stemmer, stopwords) in enumerate(
        [("english", "lucene"), ("porter", "lucene"), ("english", "none"), (None, "lucene"), (None, "none")]
    ):
        analysis = settings.model_copy(update={"stemmer": stemmer, "stopwords": stopwords})
        tokenizer = Tokenizer(tokenizer_config(analysis))
        avg = sum(len(tokenizer.tokens(c.embed_text)) for _, c in chunks) / len(chunks)
        encoder = Bm25Encoder(tokenizer, Bm25Params(k1=settings.bm25_k1, b=settings.bm25_b, avg_len=avg))
        # the analyser under study writes its BM25 points straight into a store: no index, no model run
        store = build_store(settings.model_copy(update={"data_dir": settings.data_dir / "tokenizers" / str(n)}))
        store.ensure_schema(embedder.dimension)
        if store.count(of_kind("chunk")) == 0:
            points = [
                StorePoint(
                    chunk_point_id(c.chunk_id, 1), chunk_payload(d, c, 1), sparse=encoder.encode_document(c.embed_text)
                )
                for d, c in chunks
            ]
            # records and heads commit generation 1: readers ignore chunks without one
            points += [StorePoint(document_point_id(d.id, 1), document_payload(d, 1, 1, "study")) for d in docs]
            points += [StorePoint(head_point_id(d.id), head_payload(d, 1, "study", None)) for d in docs]
            for i in range(0, len(points), 2048):
                store.upsert(points[i : i + 2048])
        pipeline = SearchPipeline(store, embedder, encoder, None)
        m = score(pipeline, train, SearchParams(mode=Mode.KEYWORD), (10, 100), "doc", None)
        print(f"| {stemmer or 'none'} | {stopwords} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} |")
        store.close()


def _fmt(grid: dict[float, float]) -> str:
    return ", ".join(f"{k}: {v:.4f}" for k, v in grid.items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["scifact", "cmrc", "tokenizers"])
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=[1000, 2000], help="SciFact sizes to choose from")
    p.add_argument("--work-dir", type=Path, default=Path("data/bench-quality"))
    p.add_argument("--encoder-runtime", choices=["onnx", "torch"], default="onnx", help="as PLUMBLINE_ENCODER_RUNTIME")
    p.add_argument("--tenant", help="SciFact and CMRC as this tenant's documents, searched as this tenant")
    args = p.parse_args()
    require(*([CMRC] if args.only == "cmrc" else [SCIFACT] if args.only else [SCIFACT, CMRC]))
    # the model as the service runs it by default (ONNX Runtime on CPU), or on torch to compare; one copy of the
    # index per collection, in this process
    settings = Settings(data_dir=args.work_dir, encoder_runtime=args.encoder_runtime, index_copies=1)
    embedder = build_embedder(settings)  # loaded once, given to each collection's runtime
    if args.only in (None, "scifact"):
        scifact(settings, embedder, args.chunk_sizes, args.tenant)
    if args.only in (None, "cmrc"):
        cmrc(settings, embedder, args.tenant)
    if args.only in (None, "tokenizers"):
        tokenizer_study(settings, embedder)


if __name__ == "__main__":
    main()
