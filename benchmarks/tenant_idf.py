"""What scoring a tenant's keyword search with its own statistics costs: the engine's keyword query confined to a
tenant, its IDF counted over that tenant's chunks (`VectorQuery.corpus`, as every tenant-confined search sends it)
against over the whole collection (as before), in the embedded engine.

    python benchmarks/tenant_idf.py                         # 10k and 100k chunks (under a minute on 2 cores)
    python benchmarks/tenant_idf.py --chunks 1000000        # any sizes (1M: about 6 minutes, 3 GB of memory)

SciFact's chunks (1000 characters) repeated to size and BM25-encoded as an ingest encodes them, given in turn to two
tenants (each holds half); no model runs, the dense vectors are 4 random numbers. Each of the 300 test queries is one
engine query (the keyword list of a search: 200 + 16 deep, filtered to tenant t0), run both ways in turn after a
warm-up round; medians and 95th percentiles in ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.datasets import SCIFACT, require, scifact_chunks
from eval.trec import read_queries
from service.filters import Clause, Match
from service.retrieval.sparse import Bm25Encoder, Bm25Params
from service.retrieval.tokenizer import Tokenizer, TokenizerConfig
from service.stores.base import SPARSE, SparseVector, StorePoint, VectorQuery
from service.stores.edge import EdgeStore

DEPTH = 216  # the default 200 candidates + TIE_MARGIN


def filled(path: Path, vectors: list[SparseVector], size: int) -> EdgeStore:
    store = EdgeStore(path)
    store.ensure_schema(4)
    rng = np.random.default_rng(0)
    for start in range(0, size, 2000):
        points = [
            StorePoint(
                f"00000000-0000-0000-0000-{i:012d}",
                {"kind": "chunk", "tenant": f"t{i % 2}", "doc_id": str(i), "chunk_id": str(i), "gen": 1},
                dense=rng.standard_normal(4).tolist(),
                sparse=vectors[i % len(vectors)],
            )
            for i in range(start, min(start + 2000, size))
        ]
        store.upsert(points, durable=start + 2000 >= size)
    return store


def timed(store: EdgeStore, query: SparseVector, corpus: Clause | None) -> float:
    where = Clause(must=(Match("tenant", "t0"),))
    start = time.perf_counter()
    store.query([VectorQuery(SPARSE, query, where, DEPTH, corpus=corpus)])
    return (time.perf_counter() - start) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    args = p.parse_args()
    require(SCIFACT)
    encoder = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params())
    vectors = [encoder.encode_document(c.embed_text) for _, c in scifact_chunks(1000)]
    queries = [encoder.encode_query(q) for q in list(read_queries(SCIFACT / "queries.jsonl").values())[:300]]
    tenant = Clause(must=(Match("tenant", "t0"),))
    print("| chunks | collection's IDF p50 / p95 ms | the tenant's IDF p50 / p95 ms | p50 ratio |")
    print("|---|---|---|---|")
    for size in args.chunks:
        with tempfile.TemporaryDirectory() as folder:
            store = filled(Path(folder) / "index", vectors, size)
            times: dict[str, list[float]] = {"collection": [], "tenant": []}
            for round_ in range(2):  # the first round warms the engine up and is not kept
                for q in queries:
                    collection, own = timed(store, q, None), timed(store, q, tenant)
                    if round_:
                        times["collection"].append(collection)
                        times["tenant"].append(own)
            store.close()
        p50 = {k: statistics.median(v) for k, v in times.items()}
        p95 = {k: sorted(v)[int(0.95 * len(v))] for k, v in times.items()}
        print(
            f"| {size:,} | {p50['collection']:.2f} / {p95['collection']:.2f} | {p50['tenant']:.2f} / "
            f"{p95['tenant']:.2f} | {p50['tenant'] / p50['collection']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
