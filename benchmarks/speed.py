"""Speed: ingest throughput against the raw model, and /search latency per mode at 10k and 100k chunks.

    python benchmarks/speed.py              # about 10 minutes on 2 cores
    python benchmarks/speed.py --quick      # smaller samples, for a smoke run

Ingest: the same SciFact chunks go through `Index.ingest` (parse, chunk, embed, BM25-encode, write) and
through the model's bare `encode`; the ratio is the pipeline's overhead.
Latency: real HTTP (`plumbline serve` in its own process, an httpx client) against `POST /search`, SciFact test queries,
median and 95th percentile over every query, after a warm-up. At 10k chunks everything is real; at
100k chunks the stored dense vectors are random (the query is still embedded by the real model, so
latency includes query embedding) and the BM25 side holds real text. The rerank model is a
MiniLM-L6-sized cross-encoder built from the packaged MiniLM weights with an untrained head: its
scores mean nothing, its cost is that of cross-encoder/ms-marco-MiniLM-L-6-v2. The in-process
`rank_bm25` BM25Okapi over the same chunks is measured in the same run as the baseline to beat.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import numpy as np
from rank_bm25 import BM25Okapi

from eval.http import no_delay_client
from eval.trec import read_queries
from service.chunking import Chunker, ChunkerConfig
from service.domain import Chunk, Document
from service.embedding import SentenceTransformerEmbedder, resolve_model_path
from service.filters import of_kind
from service.index import Index
from service.loaders import iter_documents
from service.payload import (
    chunk_payload,
    chunk_point_id,
    document_payload,
    document_point_id,
    head_payload,
    head_point_id,
)
from service.settings import PACKAGED_MODEL, Settings
from service.sparse import Bm25Encoder, Bm25Params
from service.stores.base import StorePoint
from service.stores.edge import DENSE_SEARCH_PARAMS, EdgeStore
from service.tokenizer import Tokenizer, TokenizerConfig

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
MODES = {
    "keyword": {"mode": "keyword"},
    "dense": {"mode": "dense"},
    "hybrid": {"mode": "hybrid"},
    "hybrid+rerank (depth 10)": {"mode": "hybrid", "rerank": True, "rerank_depth": 10},
}


def scifact_chunks(size: int) -> list[tuple[Document, Chunk]]:
    chunker = Chunker(ChunkerConfig(size, size // 10))
    return [(d, c) for d in iter_documents(SCIFACT / "corpus.jsonl") for c in chunker.chunk(d)]


def ingest_throughput(embedder: SentenceTransformerEmbedder, docs: list[Document], repeats: int) -> None:
    chunker = Chunker(ChunkerConfig(600, 60))
    texts = [c.embed_text for d in docs for c in chunker.chunk(d)]
    raw, pipeline = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        embedder.embed_documents(texts)
        raw.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as tmp:
            store = EdgeStore(Path(tmp) / "index")
            index = Index(store, embedder, chunker, TokenizerConfig(), Bm25Params())
            start = time.perf_counter()
            for i in range(0, len(docs), 256):
                index.ingest(docs[i : i + 256])
            pipeline.append(time.perf_counter() - start)
            store.close()
    r, p = statistics.median(raw), statistics.median(pipeline)
    print(f"\n### Ingest: {len(docs)} SciFact documents, {len(texts)} chunks, median of {repeats}\n")
    print("| path | seconds | chunks/s | vs raw encode |")
    print("|---|---|---|---|")
    print(f"| model.encode only (same chunk texts) | {r:.1f} | {len(texts) / r:.0f} | 1.00 |")
    print(f"| Index.ingest (parse, chunk, embed, BM25, write, flush) | {p:.1f} | {len(texts) / p:.0f} | {p / r:.2f} |")


def fill_random(store: EdgeStore, chunks: list[tuple[Document, Chunk]], n: int, dim: int) -> None:
    """n chunk points: real text and BM25 (SciFact chunks cycled), random unit dense vectors."""
    encoder = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params(avg_len=80.0))
    rng = np.random.default_rng(0)
    sparse = [encoder.encode_document(c.embed_text) for _, c in chunks]
    for start in range(0, n, 4096):
        points = []
        vectors = rng.normal(size=(min(4096, n - start), dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for j, vector in enumerate(vectors):
            i = start + j
            doc, chunk = chunks[i % len(chunks)]
            copy = Document(id=f"{doc.id}~{i // len(chunks)}", title=doc.title, text=doc.text)
            c = Chunk(
                f"{copy.id}#{chunk.ordinal}",
                copy.id,
                chunk.ordinal,
                chunk.title,
                chunk.heading_path,
                chunk.text,
                chunk.start,
                chunk.end,
            )
            points.append(
                StorePoint(
                    chunk_point_id(c.chunk_id, 1), chunk_payload(copy, c, 1), vector.tolist(), sparse[i % len(chunks)]
                )
            )
            if chunk.ordinal == 0:
                points.append(StorePoint(document_point_id(copy.id, 1), document_payload(copy, 1, 1, "bench")))
                points.append(StorePoint(head_point_id(copy.id), head_payload(copy, 1, "bench", None)))  # commit
        store.upsert(points)


def serve(data_dir: Path, reranker_path: str, preload: Path | None = None) -> tuple[str, Callable[[], None]]:
    """`plumbline serve` in its own process (a server thread in this process would share our GIL); `preload`: a
    folder it ingests at start-up. The benchmarks measure the service with auth off unless the environment says."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"PLUMBLINE_AUTH": "off", **os.environ, "PLUMBLINE_DEFAULT_RERANK": "false"}
    if reranker_path:
        env["PLUMBLINE_RERANK_MODEL"] = reranker_path
    cmd = [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(data_dir), "--port", str(port)]
    cmd += ["--ingest", str(preload)] if preload else []
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    with no_delay_client() as client:
        for _ in range(600):  # a benchmark may poll: wait up to 5 minutes for the models and the store
            try:
                if client.get(f"{url}/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}")
            time.sleep(0.5)

    def stop() -> None:
        proc.terminate()
        proc.wait(timeout=60)

    return url, stop


def latency(
    url: str, queries: Sequence[str], body: dict[str, object], warmup: int = 5
) -> tuple[float, float, dict[str, float]]:
    """p50 and p95 of the HTTP round trip, and the p50 of each pipeline stage (and its total), in ms."""
    rtt: list[float] = []
    stages: dict[str, list[float]] = {}
    with no_delay_client() as client:
        for i, q in enumerate([*queries[:warmup], *queries]):
            start = time.perf_counter()
            r = client.post(f"{url}/search", json={**body, "query": q, "k": 10})
            elapsed = (time.perf_counter() - start) * 1000
            r.raise_for_status()
            if i >= warmup:
                rtt.append(elapsed)
                for stage, ms in r.json()["timings_ms"].items():
                    stages.setdefault(stage, []).append(ms)
    return statistics.median(rtt), float(np.percentile(rtt, 95)), {k: statistics.median(v) for k, v in stages.items()}


def engine_floor(path: Path, queries: np.ndarray) -> tuple[float, float, float]:
    """The bare engine on one unfiltered dense top-100 query (no payload, no embedding, no HTTP), p50 ms two ways:
    the store's own `DENSE_SEARCH_PARAMS` (int8 scan, top 2x rescored on float32) and a float32 scan (quantisation
    ignored), and the overlap of their top 100s."""
    import qdrant_edge as qe

    shard = qe.EdgeShard.load(str(path))
    params = {
        "int8": DENSE_SEARCH_PARAMS,
        "float32": qe.SearchParams(quantization=qe.QuantizationSearchParams(ignore=True)),
    }
    times: dict[str, list[float]] = {name: [] for name in params}
    overlap = []
    for q in queries:
        top = {}
        for name, param in params.items():
            start = time.perf_counter()
            hits = shard.query(
                qe.QueryRequest(limit=100, query=qe.Query.Nearest(q.tolist(), using="dense"), params=param)
            )
            times[name].append((time.perf_counter() - start) * 1000)
            top[name] = {str(h.id) for h in hits}
        overlap.append(len(top["int8"] & top["float32"]) / max(1, len(top["float32"])))
    shard.close()
    return statistics.median(times["int8"]), statistics.median(times["float32"]), float(np.mean(overlap))


def bm25_baseline(chunks: list[tuple[Document, Chunk]], n: int, queries: Sequence[str]) -> tuple[float, float]:
    tokenizer = Tokenizer(TokenizerConfig())
    corpus = [tokenizer.tokens(chunks[i % len(chunks)][1].embed_text) for i in range(n)]
    bm25 = BM25Okapi(corpus)
    times = []
    for q in queries:
        start = time.perf_counter()
        scores = bm25.get_scores(tokenizer.tokens(q))
        np.argpartition(-scores, 10)[:10]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), float(np.percentile(times, 95))


def rerank_model(folder: Path) -> str:
    """A MiniLM-L6-sized cross-encoder: the packaged MiniLM encoder plus an untrained 1-label head."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    path = resolve_model_path(PACKAGED_MODEL)
    BertForSequenceClassification.from_pretrained(path, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(path).save_pretrained(folder)
    return str(folder)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    n_queries = 30 if args.quick else 150
    embedder = SentenceTransformerEmbedder(PACKAGED_MODEL)
    docs = list(iter_documents(SCIFACT / "corpus.jsonl"))
    ingest_throughput(embedder, docs[: 200 if args.quick else 1000], repeats=1 if args.quick else 3)

    queries = list(read_queries(SCIFACT / "queries.jsonl").values())[:n_queries]
    chunks = scifact_chunks(400)
    tmp = Path(tempfile.mkdtemp(prefix="plumbline-speed-"))
    reranker_path = rerank_model(tmp / "cross-encoder")
    rows = []
    breakdown: list[tuple[int, str, dict[str, float]]] = []
    scans: list[tuple[int, float, float, float]] = []
    sizes = [(2_000, "real") if args.quick else (10_000, "real"), (100_000, "random dense vectors")]
    for n, kind in sizes:
        settings = Settings(data_dir=tmp / f"n{n}", default_rerank=False)
        store = EdgeStore(settings.data_dir / "index")
        if kind == "real":
            index = Index(store, embedder, Chunker(ChunkerConfig(400, 40)), TokenizerConfig(), Bm25Params())
            subset = sorted({d.id for d, _ in chunks[:n]})
            by_id = {d.id: d for d, _ in chunks}
            for i in range(0, len(subset), 256):
                index.ingest([by_id[x] for x in subset[i : i + 256]])
        else:
            store.ensure_schema(embedder.dimension)
            fill_random(store, chunks, n, embedder.dimension)
        points = store.count(of_kind("chunk"))
        store.close()
        floor, float32, overlap = engine_floor(settings.data_dir / "index", embedder.embed_queries(queries))
        url, stop = serve(settings.data_dir, reranker_path)
        for mode, body in MODES.items():
            qs = queries[: max(10, n_queries // 5)] if "rerank" in mode else queries
            p50, p95, stages = latency(url, qs, body)
            rows.append((points, kind, mode, p50, p95, stages["total"]))
            breakdown.append((points, mode, stages))
        stop()
        rows.append((n, "bare engine: dense top-100, no filter, no payload", "floor", floor, floor, floor))
        rows.append((n, "bare engine, float32 scan (quantisation ignored)", "floor", float32, float32, float32))
        scans.append((n, floor, float32, overlap))
        b50, b95 = bm25_baseline(chunks, n, queries)
        rows.append((n, "rank_bm25 BM25Okapi, in-process, no HTTP", "keyword baseline", b50, b95, b50))
    print("\n### /search latency, SciFact test queries, k=10, candidates=100, 2 cores\n")
    print("| chunks | stored vectors | mode | p50 ms (HTTP) | p95 ms (HTTP) | p50 ms (pipeline) |")
    print("|---|---|---|---|---|---|")
    for n, kind, mode, p50, p95, inner in rows:
        print(f"| {n:,} | {kind} | {mode} | {p50:.1f} | {p95:.1f} | {inner:.1f} |")
    names = ["embed", "sparse", "retrieve", "rescore", "generations", "fuse", "fetch", "rerank", "total"]
    print("\n### Pipeline stages, p50 ms\n")
    print("| chunks | mode | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for n, mode, stages in breakdown:
        print(f"| {n:,} | {mode} | " + " | ".join(f"{stages.get(s, 0.0):.1f}" for s in names) + " |")
    print("\n### Dense scan: int8 with float32 rescoring (the default) against a float32 scan, same shard\n")
    print("| chunks | int8 + rescore p50 ms | float32 p50 ms | ratio | top-100 overlap |")
    print("|---|---|---|---|---|")
    for n, q8, f32, overlap in scans:
        print(f"| {n:,} | {q8:.1f} | {f32:.1f} | {q8 / f32:.2f} | {overlap:.4f} |")


if __name__ == "__main__":
    main()
