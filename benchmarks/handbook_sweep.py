"""The demo handbook's labelled set under each retrieval configuration: the numbers behind the defaults.

    python benchmarks/handbook_sweep.py          # about 2 minutes on 2 cores

Chunk size changes the index (one ingest per size); mode and fusion change only the query. Evidence labels make
the chunk-size rows comparable: they are judged on whichever chunks the size produces.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.report import mean_metrics
from eval.runner import run_set
from eval.storage import load_set
from service.api.convert import parse_filters
from service.domain import FusionMethod, Mode
from service.evaluation.retriever import PipelineRetriever
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.index.loaders import iter_documents
from service.retrieval.embedding import SentenceTransformerEmbedder
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import TokenizerConfig
from service.settings import PACKAGED_MODEL
from service.stores.edge import EdgeStore

HANDBOOK = Path(__file__).resolve().parents[1] / "demo" / "handbook"
CONFIGS = [
    ("keyword", SearchParams(mode=Mode.KEYWORD)),
    ("dense", SearchParams(mode=Mode.DENSE)),
    ("hybrid RRF k=60", SearchParams(fusion=FusionMethod.RRF, rrf_k=60)),
    ("hybrid RRF k=10", SearchParams(fusion=FusionMethod.RRF, rrf_k=10)),
    ("hybrid weighted alpha=0.3", SearchParams(alpha=0.3)),
    ("hybrid weighted alpha=0.5 (default)", SearchParams(alpha=0.5)),
    ("hybrid weighted alpha=0.7", SearchParams(alpha=0.7)),
]


def main() -> None:
    embedder = SentenceTransformerEmbedder(PACKAGED_MODEL)
    name, cases = load_set("handbook")
    docs = list(iter_documents(HANDBOOK))
    print(f"\n### Handbook set ({len(cases)} cases), unit=chunk, k=10\n")
    print("| chunk size | configuration | hit@1 | hit@5 | recall@10 | MRR@10 | nDCG@10 |")
    print("|---|---|---|---|---|---|---|")
    for size in (500, 1000, 1500):
        with tempfile.TemporaryDirectory() as tmp:
            store = EdgeStore(Path(tmp) / "index")
            index = Index(store, embedder, Chunker(ChunkerConfig(size, size // 10)), TokenizerConfig(), Bm25Params())
            index.ingest(docs)
            pipeline = SearchPipeline(store, embedder, index.encoder, None)
            for label, params in CONFIGS if size == 1000 else CONFIGS[-2:-1]:
                run = run_set(
                    cases,
                    PipelineRetriever(pipeline, replace(params, k=10), parse_filters),
                    set_name=name,
                    ks=(1, 5, 10),
                )
                m = mean_metrics(run.cases)
                print(
                    f"| {size} ({index.chunks()} chunks) | {label} | {m['hit@1']:.3f} | {m['hit@5']:.3f} | "
                    f"{m['recall@10']:.3f} | {m['mrr@10']:.3f} | {m['ndcg@10']:.3f} |"
                )
            store.close()


if __name__ == "__main__":
    main()
