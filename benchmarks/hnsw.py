"""Where an HNSW graph starts to pay against the embedded store's int8 scan, on this machine.

The store scans (`service/stores/edge.py`: no graph, int8 vectors, the top 2x rescored in float32) because building
a graph runs in the engine's optimiser, which holds the GIL and so stops the serving process (README, Known limits).
This script measures, outside any server, what a graph would buy: for each collection size it builds the same
vectors two ways (the store's scan; HNSW m=16 / ef_construct=100 under the store's segment cap of about 13,000
vectors), then times a dense top-100 query (the pipeline's candidate depth) and checks recall@10 and recall@100
against exact float32 search, all in one run.

The model cannot embed 100k chunks on 2 cores in reasonable time, so the vectors are synthetic but clustered like
text embeddings (2,000 centres, each point its centre plus noise, unit length); each query is a stored vector plus a
little noise. Uniformly random 384-dimensional vectors have no neighbourhoods, and on them HNSW's recall collapses
(0.36 at 100k in a first run): they say nothing about text. Recall on real MiniLM embeddings was measured in issue 12
(0.995 at hnsw_ef 64-256); the latencies here are what this machine's cores give.

    .venv/bin/python benchmarks/hnsw.py [--sizes 100000 300000] [--queries 100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from service.stores.edge import _QUANTISE_AFTER_KB, _SEGMENT_KB, DENSE_SEARCH_PARAMS

DIM = 384
BATCH = 4096
# name -> (HNSW m, max segment KB): m=0 is the store's scan
LAYOUTS = {"int8 scan (the store)": (0, _SEGMENT_KB), "HNSW m=16, the store's segments": (16, _SEGMENT_KB)}
CENTRES = 2_000


def build(path: Path, vectors: np.ndarray, m: int, segment_kb: int) -> tuple[Any, float, float]:
    """A shard holding `vectors`; the seconds to write them and the seconds the optimiser then took."""
    hnsw = qe.HnswIndexConfig(m=m, ef_construct=100, full_scan_threshold=10**9 if m == 0 else 1)
    config = qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)},
        hnsw_config=hnsw,
        quantization_config=qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, memory=qe.Memory.Pinned),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=_QUANTISE_AFTER_KB, max_segment_size=segment_kb),
    )
    path.mkdir(parents=True)
    shard = qe.EdgeShard.create(str(path), config)
    start = time.perf_counter()
    for at in range(0, len(vectors), BATCH):
        points = [
            qe.Point(str(uuid.UUID(int=at + i + 1)), {"dense": v.tolist()}, {})
            for i, v in enumerate(vectors[at : at + BATCH])
        ]
        shard.update(qe.UpdateOperation.upsert_points(points))
    shard.flush()
    written = time.perf_counter() - start
    start = time.perf_counter()
    shard.optimize()
    return shard, written, time.perf_counter() - start


def measure(shard: Any, queries: np.ndarray, params: Any, exact: list[list[int]]) -> tuple[float, float, float]:
    """p50 ms of a top-100 query, recall@10 and recall@100 against `exact` (indices of the true top 100)."""
    times, r10, r100 = [], [], []
    for q, truth in zip(queries, exact, strict=True):
        start = time.perf_counter()
        hits = shard.query(qe.QueryRequest(limit=100, query=qe.Query.Nearest(q.tolist(), using="dense"), params=params))
        times.append((time.perf_counter() - start) * 1000)
        got = [uuid.UUID(str(h.id)).int - 1 for h in hits]
        r10.append(len(set(got[:10]) & set(truth[:10])) / 10)
        r100.append(len(set(got) & set(truth)) / 100)
    return statistics.median(times), float(np.mean(r10)), float(np.mean(r100))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ef", type=int, nargs="+", default=[128, 512])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| vectors | layout | write s | optimiser s | search | p50 ms | vs scan | recall@10 | recall@100 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        centres = rng.normal(size=(CENTRES, DIM)).astype(np.float32)
        vectors = centres[rng.integers(CENTRES, size=n)] + rng.normal(scale=0.3, size=(n, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        picks = rng.choice(n, size=args.queries, replace=False)
        queries = vectors[picks] + rng.normal(scale=0.1, size=(args.queries, DIM)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        exact = [list(np.argsort(-(vectors @ q))[:100]) for q in queries]
        scan_ms = None
        with tempfile.TemporaryDirectory() as tmp:
            for name, (m, segment_kb) in LAYOUTS.items():
                shard, written, optimised = build(Path(tmp) / name.split()[0] / str(segment_kb), vectors, m, segment_kb)
                searches = (
                    [("int8 rescored", DENSE_SEARCH_PARAMS)]
                    if m == 0
                    else [
                        (f"ef {ef}", qe.SearchParams(hnsw_ef=ef, quantization=DENSE_SEARCH_PARAMS.quantization))
                        for ef in args.ef
                    ]
                )
                for label, params in searches:
                    p50, r10, r100 = measure(shard, queries, params, exact)
                    scan_ms = scan_ms or p50
                    print(
                        f"| {n:,} | {name} | {written:.1f} | {optimised:.1f} | {label} | {p50:.2f} | "
                        f"{p50 / scan_ms:.2f} | {r10:.3f} | {r100:.3f} |",
                        flush=True,
                    )
                shard.close()


if __name__ == "__main__":
    main()
