"""Where an HNSW graph starts to pay against the embedded store's int8 scan, on this machine.

The store scans (`service/stores/edge.py`: no graph, int8 vectors, the top 2x rescored in float32) because building
a graph runs in the engine's optimiser, which holds the GIL and so stops the serving process (docs/operations.md,
Known limits).
This script measures, outside any server, what a graph would buy: for each collection size it builds the same
vectors two ways (the store's scan; HNSW m=16 / ef_construct=100 under the store's segment cap of about 13,000
vectors), then times a dense top-100 query (the pipeline's candidate depth) and checks recall@10 and recall@100
against exact float32 search, all in one run.

The model cannot embed 100k chunks on 2 cores in reasonable time, so the vectors are synthetic but clustered like
text embeddings (2,000 centres, each point its centre plus noise, unit length); each query is a stored vector plus a
little noise. Uniformly random 384-dimensional vectors have no neighbourhoods, and on them HNSW's recall collapses
(0.36 at 100k in a first run): they say nothing about text. `--real` takes recall from real text instead: every
SciFact chunk of 400 characters embedded by the packaged MiniLM (ONNX Runtime, a few minutes here), queried with the
300 SciFact test questions; there every segment is searched through its graph (the store scans a segment under
10,000 KB, about 6,600 vectors), so the graphs are small but the recall is the graph's.

    .venv/bin/python benchmarks/hnsw.py [--sizes 100000 300000] [--queries 100] [--real]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from service.stores.edge_layout import DENSE_SEARCH_PARAMS, QUANTISE_AFTER_KB, SEGMENT_KB

DIM = 384
BATCH = 4096
# name -> (HNSW m, max segment KB): m=0 is the store's scan
LAYOUTS = {
    "int8 scan (the store)": (0, SEGMENT_KB),
    "HNSW m=16, the store's segments": (16, SEGMENT_KB),
    "HNSW m=16, segments 10x larger": (16, 10 * SEGMENT_KB),
}
CENTRES = 2_000


def clustered(n: int, centres: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """n unit vectors, each a random one of `centres` plus noise: neighbourhoods, as text embeddings have."""
    vectors = centres[rng.integers(len(centres), size=n)] + rng.normal(scale=0.3, size=(n, centres.shape[1]))
    vectors = vectors.astype(np.float32)
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


def synthetic(n: int, queries: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n unit vectors around 2,000 centres, and queries that are stored vectors plus a little noise."""
    vectors = clustered(n, rng.normal(size=(CENTRES, DIM)).astype(np.float32), rng)
    picks = rng.choice(n, size=queries, replace=False)
    asked = vectors[picks] + rng.normal(scale=0.1, size=(queries, DIM)).astype(np.float32)
    return vectors, asked / np.linalg.norm(asked, axis=1, keepdims=True)


def scifact(cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """SciFact's chunks and test questions, embedded by the packaged model as the service embeds them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.datasets import SCIFACT, require, scifact_chunks
    from eval.trec import read_qrels, read_queries
    from service.runtime import build_embedder
    from service.settings import Settings

    require(SCIFACT)
    embedder = build_embedder(Settings(data_dir=cache, device="cpu", model_cache=cache, ingest_nice=0))
    test = read_qrels(SCIFACT / "qrels" / "test.tsv")
    questions = [q for i, q in read_queries(SCIFACT / "queries.jsonl").items() if i in test]
    texts = [c.embed_text for _, c in scifact_chunks(400)]
    return np.asarray(embedder.embed_documents(texts)), np.asarray(embedder.embed_queries(questions))


def build(path: Path, vectors: np.ndarray, m: int, segment_kb: int) -> tuple[Any, float, float]:
    """A shard holding `vectors`; the seconds to write them and the seconds the optimiser then took."""
    hnsw = qe.HnswIndexConfig(m=m, ef_construct=100, full_scan_threshold=10**9 if m == 0 else 1)
    config = qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)},
        hnsw_config=hnsw,
        quantization_config=qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, memory=qe.Memory.Pinned),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=QUANTISE_AFTER_KB, max_segment_size=segment_kb),
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
    parser.add_argument("--real", action="store_true", help="SciFact's chunks and questions, embedded (one size)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| vectors | layout | write s | optimiser s | search | p50 ms | vs scan | recall@10 | recall@100 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in [0] if args.real else args.sizes:
        with tempfile.TemporaryDirectory() as models:
            vectors, queries = scifact(Path(models)) if args.real else synthetic(n, args.queries, rng)
        n = len(vectors)
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
