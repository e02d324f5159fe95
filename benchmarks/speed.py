"""Speed: the models on ONNX Runtime against torch, ingest against the raw model, /search latency per mode at 10k
and 100k chunks, the non-embedding part of a search, and searches and liveness while an ingest runs.

    python benchmarks/speed.py              # about 30 minutes on 2 cores
    python benchmarks/speed.py --quick      # smaller samples, for a smoke run
    python benchmarks/speed.py --million    # only hybrid at 1M chunks against 100k (about 25 minutes, 8 GB of memory)
    python benchmarks/speed.py --ingest     # only the first start, the models and the ingest table (about 15 minutes)

It ends with one line of `name=value` pairs for scripts (`hybrid_p50_ms_100k`, `pipeline_overhead_ms_100k`, ...).

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
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import threading
from collections import Counter

import httpx
import numpy as np
from rank_bm25 import BM25Okapi

from benchmarks.datasets import SCIFACT, require, scifact_chunks
from benchmarks.hnsw import CENTRES, clustered
from benchmarks.timed_store import TimedStore
from eval.trec import read_queries
from service.cli.remote import no_delay_client
from service.domain import Chunk, Document
from service.filters import of_kind
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.index.loaders import iter_documents
from service.retrieval.embedding import Embedder, Matrix, resolve_model_path
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.rerank import Reranker
from service.retrieval.sparse import Bm25Encoder, Bm25Params
from service.retrieval.tokenizer import Tokenizer, TokenizerConfig
from service.runtime import Components, Runtime, build_embedder, build_reranker, build_store
from service.settings import PACKAGED_MODEL, Settings
from service.stores.base import StorePoint, VectorStore
from service.stores.edge import EdgeStore
from service.stores.edge_layout import DENSE_SEARCH_PARAMS, GRAPH_FROM
from service.stores.mirrored import MirroredStore, single_copy
from service.stores.payload import (
    chunk_payload,
    chunk_point_id,
    document_payload,
    document_point_id,
    head_payload,
    head_point_id,
)

ROOT = Path(__file__).resolve().parents[1]
MODES: dict[str, dict[str, object]] = {
    "keyword": {"mode": "keyword"},
    "dense": {"mode": "dense"},
    "hybrid": {"mode": "hybrid"},
    "hybrid+rerank (depth 20)": {"mode": "hybrid", "rerank": True, "rerank_depth": 20},
}
RATE = 10.0  # searches a second in the open-loop load while an ingest runs: about a sixth of what 8 clients get idle


class TimedEmbedder:
    """Counts the seconds spent embedding documents, so an ingest's own work is its time minus these."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.seconds = inner, 0.0
        self.name, self.dimension = inner.name, inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        start = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.seconds += time.perf_counter() - start

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        return self.inner.embed_queries(texts)


class DurableEveryBatch(EdgeStore):
    """The store as it was before: every write batch flushed and optimised (the baseline of the ingest table)."""

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:  # noqa: ARG002
        super().upsert(points, durable=True)


INGEST_PATHS: list[tuple[str, Callable[[Path], VectorStore], str]] = [
    ("default", MirroredStore, "Index.ingest, two copies of the index in engine processes (the default)"),
    ("one copy", EdgeStore, "Index.ingest, one copy in this process (`PLUMBLINE_INDEX_COPIES=1`)"),
    ("flush", DurableEveryBatch, "Index.ingest, one copy, every write batch flushed and optimised (before)"),
]


def ingest_throughput(embedder: Embedder, torch: Embedder, docs: list[Document], repeats: int) -> dict[str, float]:
    """The ingest table; returns the non-embedding milliseconds per chunk of each path (`INGEST_PATHS`)."""
    chunker = Chunker(ChunkerConfig(600, 60))
    texts = [c.embed_text for d in docs for c in chunker.chunk(d)]
    raw: dict[str, list[float]] = {"onnx": [], "torch": []}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in INGEST_PATHS}
    for _ in range(repeats):
        for name, model in [("onnx", embedder), ("torch", torch)]:
            start = time.perf_counter()
            model.embed_documents(texts)
            raw[name].append(time.perf_counter() - start)
        for name, store_type, _ in INGEST_PATHS:
            with tempfile.TemporaryDirectory() as tmp:
                store = store_type(Path(tmp) / "index")
                timed = TimedEmbedder(embedder)
                # by hand: each row names its own store type and a timed embedder, which `Runtime` would not build
                index = Index(store, timed, chunker, TokenizerConfig(), Bm25Params())
                start = time.perf_counter()
                for i in range(0, len(docs), 256):
                    index.ingest(docs[i : i + 256])
                runs[name].append((time.perf_counter() - start, timed.seconds))
                store.close()
    r = statistics.median(raw["onnx"])
    own = {k: statistics.median((t - e) * 1000 / len(texts) for t, e in v) for k, v in runs.items()}
    total = {k: statistics.median(t for t, _ in v) for k, v in runs.items()}
    print(f"\n### Ingest: {len(docs)} SciFact documents, {len(texts)} chunks, median of {repeats}\n")
    print("| path | seconds | chunks/s | vs raw encode | non-embedding ms/chunk |")
    print("|---|---|---|---|---|")
    t = statistics.median(raw["torch"])
    print(f"| model.encode only, torch (sentence-transformers) | {t:.1f} | {len(texts) / t:.0f} | {t / r:.2f} | |")
    print(f"| model.encode only, ONNX Runtime (the default) | {r:.1f} | {len(texts) / r:.0f} | 1.00 | |")
    for name, _, label in INGEST_PATHS:
        p = total[name]
        print(f"| {label} | {p:.1f} | {len(texts) / p:.0f} | {p / r:.2f} | {own[name]:.2f} |")
    return own


def encoders(
    onnx: Embedder, torch: Embedder, reranker_path: str, passages: Sequence[str], queries: Sequence[str]
) -> tuple[float, float]:
    """Query embedding and a depth-20 rerank, torch against ONNX Runtime, the rerank both on whole chunks (the previous
    default) and cut to the default window; returns the ONNX rerank p50s (ms) at the defaults, fp32 and int8."""

    def p50s(*fs: Callable[[str], object]) -> list[float]:
        """Each function's p50 (ms) over the queries, run query by query in turn (the order reversed every other
        query), so that the machine's drift during the measurement falls on each alike."""
        for f in fs:
            for q in queries[:5]:
                f(q)
        times: list[list[float]] = [[] for _ in fs]
        for i, q in enumerate(queries):
            turn = list(enumerate(fs))
            for j, f in turn[::-1] if i % 2 else turn:
                start = time.perf_counter()
                f(q)
                times[j].append((time.perf_counter() - start) * 1000)
        return [statistics.median(t) for t in times]

    cache = Path(tempfile.mkdtemp())
    window = Settings(data_dir=cache, rerank_model=reranker_path, device="cpu", model_cache=cache)
    whole = window.model_copy(update={"rerank_max_tokens": 256, "rerank_focus": False})  # the previous default

    def reranker(settings: Settings, **update: object) -> Reranker:
        built = build_reranker(settings.model_copy(update=update))
        assert built is not None  # a rerank model is configured
        return built

    torch_whole, onnx_whole = reranker(whole, encoder_runtime="torch"), reranker(whole)
    torch_window, onnx_window = reranker(window, encoder_runtime="torch"), reranker(window)
    int8_ce = reranker(window, rerank_int8=True)

    def reranks(*ces: Reranker) -> list[float]:
        return p50s(*(lambda q, ce=ce: ce.score(q, passages) for ce in ces))

    embed = p50s(lambda q: torch.embed_queries([q]), lambda q: onnx.embed_queries([q]))
    whole_t, whole_o = reranks(torch_whole, onnx_whole)
    window_t, window_o, int8_o = reranks(torch_window, onnx_window, int8_ce)
    rows = [
        ("query embedding (MiniLM-L6)", embed[0], embed[1]),
        ("rerank 20 SciFact chunks, whole (up to 256 tokens: the previous default)", whole_t, whole_o),
        (
            f"rerank 20 SciFact chunks cut to {window.rerank_max_tokens} tokens around the query (the default)",
            window_t,
            window_o,
        ),
        ("the same, int8 weights (PLUMBLINE_RERANK_INT8=true)", window_t, int8_o),
    ]
    print(f"\n### The models: torch against ONNX Runtime, {len(queries)} SciFact queries, p50 ms\n")
    print("| work | torch | ONNX Runtime | ONNX / torch |")
    print("|---|---|---|---|")
    for work, a, b in rows:
        print(f"| {work} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    print(f"\nThe default rerank (ONNX) against the previous default (ONNX, whole chunks): {window_o / whole_o:.2f}")
    return rows[2][2], rows[3][2]


def overhead(settings: Settings, embedder: Embedder, queries: Sequence[str]) -> tuple[float, float, float, float]:
    """In-process hybrid search with the defaults (the store too): p50 of the total, the embedding, the engine calls
    (timed where they run: `benchmarks.timed_store`), and the rest (the round trip to the engine process included)."""
    store = build_store(settings)
    timed = TimedStore(store)
    encoder = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params(avg_len=80.0))
    # by hand: the pipeline searches through the timed store, which `Runtime` would not put in its place
    pipeline = SearchPipeline(timed, embedder, encoder, None)  # type: ignore[arg-type]
    rows = []
    for i, q in enumerate([*queries[:5], *queries]):
        timed.seconds = 0.0
        r = pipeline.search(q, SearchParams())
        engine = timed.seconds * 1000
        embed, total = r.timings_ms["embed"], r.timings_ms["total"]
        if i >= 5:
            rows.append((total, embed, engine, total - embed - engine))
    store.close()
    return tuple(statistics.median(col) for col in zip(*rows, strict=True))


def load(
    url: str,
    queries: Sequence[str],
    seconds: float,
    rate: float | None,
    writer: str = "",
    docs: Sequence[Document] = (),
) -> tuple[list[float], list[float]]:
    """Searches on `url` and a liveness probe (every 50 ms) for `seconds`, with one writer ingesting `docs` into
    `writer` (this server or another) in batches of 32 as fast as it takes them: the latencies of each, in ms.
    `rate`: searches arrive at that many a second whatever the server does (open loop: each is timed from when it
    was due, so a stall also counts against those queued behind it); None: 8 clients back to back (closed loop: the
    server saturated, latency mostly queueing for the two cores)."""
    stop = threading.Event()
    searches: list[float] = []
    live: list[float] = []
    clients = threading.local()

    def search(query: str, due: float) -> None:
        if not hasattr(clients, "client"):
            clients.client = no_delay_client()
        clients.client.post(f"{url}/search", json={"query": query, "k": 10}).raise_for_status()
        searches.append((time.perf_counter() - due) * 1000)

    def closed(offset: int) -> None:
        for i in itertools.count(offset, 8):
            if stop.is_set():
                return
            search(queries[i % len(queries)], time.perf_counter())

    def probe() -> None:
        with no_delay_client() as client:
            while not stop.is_set():
                start = time.perf_counter()
                client.get(f"{url}/health/live").raise_for_status()
                live.append((time.perf_counter() - start) * 1000)
                time.sleep(0.05)

    def write() -> None:
        with httpx.Client(timeout=300) as client:
            for i in range(0, len(docs), 32):
                if stop.is_set():
                    return
                body = [{"id": d.id, "title": d.title, "text": d.text} for d in docs[i : i + 32]]
                client.post(f"{writer}/documents", json={"documents": body}).raise_for_status()

    threads = [threading.Thread(target=probe)] + ([threading.Thread(target=write)] if docs else [])
    threads += [] if rate else [threading.Thread(target=closed, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    if rate:
        paced(search, queries, rate, seconds)
    else:
        time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return searches, live


def paced(search: Callable[[str, float], None], queries: Sequence[str], rate: float, seconds: float) -> None:
    """Call `search(query, due)` `rate` times a second for `seconds`, each at its due time whatever the earlier ones
    do (open loop, up to 32 at once); a call that raised fails the load."""
    futures: list[Future[None]] = []
    with ThreadPoolExecutor(32) as pool:
        begin = time.perf_counter()
        for i in itertools.count():
            due = begin + i / rate
            if due > begin + seconds:
                break
            time.sleep(max(0.0, due - time.perf_counter()))
            futures.append(pool.submit(search, queries[i % len(queries)], due))
    for future in futures:
        future.result()


def during_ingest(
    data_dir: Path, queries: Sequence[str], docs: list[Document], seconds: float, env: dict[str, str]
) -> dict[str, float]:
    """Searches on a server over `data_dir` and its liveness while nothing is written and while it ingests, with the
    default two copies of the index (`PLUMBLINE_INDEX_COPIES=2`) and with one in the serving process (1, before).
    Open loop at `RATE`/s (a load the server keeps up with) and closed loop (saturated). p50/p99 in ms; the summary
    takes the open loop with the default."""
    out: dict[str, float] = {}
    rows: list[tuple[str, str, list[float], list[float]]] = []

    def measure(url: str, load_name: str, rate: float | None, case: str, writing: bool) -> None:
        tag = f"{len(rows)}-"  # new ids each time: a document already ingested unchanged is skipped
        batch = [replace(d, id=f"load-{tag}{d.id}") for d in docs] if writing else []
        searches, live = load(url, queries, seconds, rate, url, batch)  # no documents: no writer
        rows.append((load_name, case, searches, live))

    open_loop = f"open loop, {RATE:.0f} searches/s"
    for copies, label in [("2", "two copies (the default)"), ("1", "one copy in the serving process (before)")]:
        url, stop = serve(data_dir, "", env={**env, "PLUMBLINE_INDEX_COPIES": copies})
        for load_name, rate in [(open_loop, RATE), ("closed loop, 8 clients", None)]:
            if copies == "2":
                measure(url, load_name, rate, "idle", False)
            measure(url, load_name, rate, f"ingest into this server, {label}", True)
            if copies == "2" and rate:
                out["search_p99_ingest"] = float(np.percentile(rows[-1][2], 99))
                out["live_p99_ingest"] = float(np.percentile(rows[-1][3], 99))
        stop()
    print(f"\n### While an ingest runs: searches on a {seconds:.0f} s load and a liveness probe every 50 ms, ms\n")
    print("| load | writer | searches | search p50 | search p99 | /health/live p50 | /health/live p99 |")
    print("|---|---|---|---|---|---|---|")
    for load_name, case, searches, live in rows:
        print(
            f"| {load_name} | {case} | {len(searches)} | {statistics.median(searches):.1f} "
            f"| {np.percentile(searches, 99):.1f} | {statistics.median(live):.1f} | {np.percentile(live, 99):.1f} |"
        )
    return out


def first_start(tmp: Path) -> dict[str, float]:
    """Seconds from `plumbline serve --ingest demo/handbook` on an empty data directory (no exported model either) to
    ready, as the first `make run` does: with the shipped embedding seed, and without it (the model runs over all
    535 chunks)."""
    out = {}
    for name, env in [
        ("seeded", {"PLUMBLINE_EMBEDDING_SEED": str(ROOT / "demo" / "handbook.embeddings.npz")}),
        ("cold", {}),
    ]:
        data = tmp / f"first-start-{name}"
        start = time.perf_counter()
        _, stop = serve(
            data, "", preload=ROOT / "demo" / "handbook", env={**env, "PLUMBLINE_MODEL_CACHE": str(data / "models")}
        )
        out[name] = time.perf_counter() - start
        stop()
    print("\n### The first start of the demo (`make run` after setup): seconds to ready\n")
    print("| embedding seed | seconds | vs without |")
    print("|---|---|---|")
    print(f"| shipped seed (the default of make run) | {out['seeded']:.1f} | {out['seeded'] / out['cold']:.2f} |")
    print(f"| none: the model embeds all 535 chunks | {out['cold']:.1f} | 1.00 |")
    return out


def fill_random(store: EdgeStore, chunks: list[tuple[Document, Chunk]], n: int, dim: int, *, centres: int = 0) -> None:
    """n chunk points: real text and BM25 (SciFact chunks cycled), random unit dense vectors: uniform, or around
    `centres` random centres (`benchmarks/hnsw.py`: an HNSW graph finds no neighbourhoods among uniform ones)."""
    encoder = Bm25Encoder(Tokenizer(TokenizerConfig()), Bm25Params(avg_len=80.0))
    rng = np.random.default_rng(0)
    around = rng.normal(size=(centres, dim)).astype(np.float32) if centres else None
    sparse = [encoder.encode_document(c.embed_text) for _, c in chunks]
    per_doc = Counter(d.id for d, _ in chunks)  # the record's chunk count, as the integrity check verifies
    for start in range(0, n, 4096):
        points = []
        size = min(4096, n - start)
        if around is None:
            vectors = rng.normal(size=(size, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        else:
            vectors = clustered(size, around, rng)
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
                record = document_payload(copy, 1, per_doc[doc.id], "bench")
                points.append(StorePoint(document_point_id(copy.id, 1), record))
                points.append(StorePoint(head_point_id(copy.id), head_payload(copy, 1, "bench", None)))  # commit
        store.upsert(points)


def serve(
    data_dir: Path,
    reranker_path: str,
    preload: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[str, Callable[[], None]]:
    """`plumbline serve` in its own process (a server thread in this process would share our GIL); `preload`: a
    folder it ingests at start-up. The benchmarks measure the service with auth
    off unless the environment says."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"PLUMBLINE_AUTH": "off", **os.environ, "PLUMBLINE_DEFAULT_RERANK": "false", **(env or {})}
    if reranker_path:
        env["PLUMBLINE_RERANK_MODEL"] = reranker_path
    cmd = [sys.executable, "-m", "service.cli.main", "serve"]
    cmd += ["--data-dir", str(data_dir), "--port", str(port)]
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
        else:
            proc.kill()
            raise RuntimeError(f"the server on {data_dir} was not ready after 5 minutes")

    def stop() -> None:
        proc.terminate()
        proc.wait(timeout=60)

    return url, stop


def latency(
    url: str, queries: Sequence[str], body: dict[str, object], warmup: int = 5
) -> tuple[float, float, dict[str, float]]:
    """p50 and p95 of the HTTP round trip, and the p50 of each pipeline stage (and its total), in ms; `"http"` is the
    part of each round trip outside the pipeline (the round trip less the pipeline's total)."""
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
                timings = r.json()["timings_ms"]
                for stage, ms in [*timings.items(), ("http", elapsed - timings["total"])]:
                    stages.setdefault(stage, []).append(ms)
    return statistics.median(rtt), float(np.percentile(rtt, 95)), {k: statistics.median(v) for k, v in stages.items()}


def engine_floor(path: Path, queries: np.ndarray) -> tuple[float, float, float]:
    """The bare engine on one unfiltered dense top-100 query (no payload, no embedding, no HTTP), p50 ms two ways:
    the store's own `DENSE_SEARCH_PARAMS` (int8, scanned or through the HNSW graphs, the top 2x rescored on float32)
    and an exact float32 scan, and the overlap of their top 100s."""
    import qdrant_edge as qe

    shard = qe.EdgeShard.load(str(path))
    params = {
        "int8": DENSE_SEARCH_PARAMS,
        "float32": qe.SearchParams(exact=True),  # a scan of the originals, graph or not
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


def million(tmp: Path, chunks: list[tuple[Document, Chunk]], queries: Sequence[str]) -> float:
    """Hybrid over HTTP at 1M chunks against 100k in the same run (random dense vectors around 2,000 centres, real
    BM25 text): 100k with the dense side scanned and with HNSW graphs, 1M with the default threshold (graphs), with
    the bare engine's dense query, a float32 exact scan and the time to write and optimise each index; returns the
    1M p50 (ms)."""
    models = {"PLUMBLINE_MODEL_CACHE": str(tmp / "models")}
    embedder = build_embedder(Settings(data_dir=tmp, device="cpu", ingest_nice=0))  # queries only
    vectors, dimension = embedder.embed_queries(list(queries)), embedder.dimension
    rows = []
    for n, graph_from in ((100_000, 10**9), (100_000, 0), (1_000_000, GRAPH_FROM)):
        data_dir = tmp / f"n{n}-{graph_from}"
        store = EdgeStore(data_dir / "index", graph_from=graph_from)  # random vectors written straight into it
        store.ensure_schema(dimension)
        start = time.perf_counter()
        fill_random(store, chunks, n, dimension, centres=CENTRES)
        graphs = store.graphs
        store.close()  # flushed and optimised
        built = time.perf_counter() - start
        floor, exact, overlap = engine_floor(data_dir / "index", vectors)
        # served with the row's own threshold, so no write of the server's can switch the layout measured
        url, stop = serve(data_dir, "", env={**models, "PLUMBLINE_INDEX_GRAPH_FROM": str(graph_from)})
        try:
            p50, p95, stages = latency(url, queries, MODES["hybrid"])
        finally:
            stop()
        rows.append((n, "HNSW graphs" if graphs else "scan", built, floor, exact, overlap, p50, p95, stages))
        print(f"[{n:,} chunks written in {built:.0f} s]", file=sys.stderr)
    print(f"\n### Hybrid at 1M chunks against 100k, {len(queries)} SciFact queries, HTTP, p50 ms\n")
    print(
        "| chunks | dense side | written + optimised s | bare dense query | float32 exact scan | top-100 overlap | "
        "hybrid p50 (HTTP) | p95 | pipeline | retrieve | vs 100k scan |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, layout, built, floor, exact, overlap, p50, p95, stages in rows:
        print(
            f"| {n:,} | {layout} | {built:.0f} | {floor:.1f} | {exact:.1f} | {overlap:.3f} | {p50:.1f} | {p95:.1f} | "
            f"{stages['total']:.1f} | {stages.get('retrieve', 0.0):.1f} | {p50 / rows[0][6]:.2f} |"
        )
    return rows[-1][6]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--million", action="store_true", help="only hybrid at 1M chunks against 100k")
    p.add_argument("--ingest", action="store_true", help="only the first start, the models and the ingest table")
    args = p.parse_args()
    require(SCIFACT)
    if args.million:
        tmp = Path(tempfile.mkdtemp(prefix="plumbline-speed-"))
        queries = list(read_queries(SCIFACT / "queries.jsonl").values())[:150]
        p50 = million(tmp, scifact_chunks(400), queries)
        print(f"\nhybrid_p50_ms_1m={p50:.2f}")
        return
    n_queries = 30 if args.quick else 150
    tmp = Path(tempfile.mkdtemp(prefix="plumbline-speed-"))
    models = {"PLUMBLINE_MODEL_CACHE": str(tmp / "models")}
    on_cpu = Settings(data_dir=tmp, device="cpu")
    embedder = build_embedder(on_cpu)
    torch = build_embedder(on_cpu.model_copy(update={"encoder_runtime": "torch"}))
    docs = list(iter_documents(SCIFACT / "corpus.jsonl"))
    queries = list(read_queries(SCIFACT / "queries.jsonl").values())[:n_queries]
    chunks = scifact_chunks(400)
    reranker_path = rerank_model(tmp / "cross-encoder")
    summary: dict[str, float] = {"first_start_s": first_start(tmp)["seeded"]}
    # the rerank reads chunks of the default size (1,000 characters, about 200 tokens), as a user's index holds
    passages = [c.embed_text for _, c in scifact_chunks(Settings.model_fields["chunk_size"].default)[:20]]
    summary["rerank20_p50_ms"], summary["rerank20_int8_p50_ms"] = encoders(
        embedder, torch, reranker_path, passages, queries
    )
    ingest_own = ingest_throughput(embedder, torch, docs[: 100 if args.quick else 300], repeats=1 if args.quick else 3)
    summary["ingest_non_embed_ms_per_chunk"] = ingest_own["default"]
    summary["ingest_non_embed_ms_per_chunk_one_copy"] = ingest_own["one copy"]
    if args.ingest:
        print("\n" + " ".join(f"{k}={v:.2f}" for k, v in summary.items()))
        return
    rows = []
    breakdown: list[tuple[int, str, dict[str, float]]] = []
    scans: list[tuple[int, str, float, float, float]] = []
    sizes = [(2_000, "real") if args.quick else (10_000, "real"), (100_000, "random dense vectors")]
    for n, kind in sizes:
        settings = Settings(data_dir=tmp / f"n{n}", default_rerank=False)
        # written by this process in one copy (no embedding cache: the server's ingest below starts with none)
        writing = settings.model_copy(update={"index_copies": 1, "embedding_cache": False, "auth": "off"})
        if kind == "real":
            runtime = Runtime(
                writing.model_copy(update={"chunk_size": 400, "chunk_overlap": 40}),
                Components(embedder=lambda _: embedder),
            )
            runtime.warm_up()
            subset = sorted({d.id for d, _ in chunks[:n]})
            by_id = {d.id: d for d, _ in chunks}
            for i in range(0, len(subset), 256):
                runtime.index.ingest([by_id[x] for x in subset[i : i + 256]])
            store = runtime.index.store
            points, graphs = store.count(of_kind("chunk")), isinstance(store, EdgeStore) and store.graphs
            runtime.close()
        else:
            store = single_copy(writing.data_dir / "index")  # random vectors written straight into the store
            store.ensure_schema(embedder.dimension)
            fill_random(store, chunks, n, embedder.dimension)
            points, graphs = store.count(of_kind("chunk")), store.graphs
            store.close()
        floor, float32, overlap = engine_floor(settings.data_dir / "index", embedder.embed_queries(queries))
        url, stop = serve(settings.data_dir, reranker_path, env=models)
        for mode, body in MODES.items():
            qs = queries[: max(10, n_queries // 5)] if "rerank" in mode else queries
            p50, p95, stages = latency(url, qs, body)
            rows.append((points, kind, mode, p50, p95, stages["total"]))
            breakdown.append((points, mode, stages))
            if mode == "hybrid" and kind != "real":
                summary["hybrid_p50_ms_100k"] = p50
        stop()
        if kind == "real":
            stalls = during_ingest(settings.data_dir, queries, docs[1000:], 15 if args.quick else 40, models)
            summary["search_p99_ms_during_ingest"] = stalls["search_p99_ingest"]
            summary["live_p99_ms_during_ingest"] = stalls["live_p99_ingest"]
        else:
            url, stop = serve(settings.data_dir, "", env={**models, "PLUMBLINE_ENCODER_RUNTIME": "torch"})
            p50, p95, stages = latency(url, queries, MODES["hybrid"])
            rows.append((points, kind, "hybrid, query embedded by torch (before)", p50, p95, stages["total"]))
            stop()
            url, stop = serve(settings.data_dir, reranker_path, env={**models, "PLUMBLINE_RERANK_INT8": "true"})
            p50, p95, stages = latency(url, queries[: max(10, n_queries // 5)], MODES["hybrid+rerank (depth 20)"])
            rows.append((points, kind, "hybrid+rerank (depth 20), int8 weights", p50, p95, stages["total"]))
            stop()
            total, embed, engine, own = overhead(settings, embedder, queries)
            summary["pipeline_overhead_ms_100k"] = own
            print(
                f"\n### Hybrid at {n:,} chunks in-process, p50 ms: total {total:.1f} = embedding {embed:.1f} + engine "
                f"calls {engine:.1f} + the pipeline's own work {own:.1f}"
            )
        layout = "HNSW graphs" if graphs else "int8 scan"
        rows.append((n, f"bare engine: dense top-100 ({layout}), no filter, no payload", "floor", floor, floor, floor))
        rows.append((n, "bare engine, exact float32 scan", "floor", float32, float32, float32))
        scans.append((n, layout, floor, float32, overlap))
        b50, b95 = bm25_baseline(chunks, n, queries)
        rows.append((n, "rank_bm25 BM25Okapi, in-process, no HTTP", "keyword baseline", b50, b95, b50))
    print("\n### /search latency, SciFact test queries, k=10, candidates=100, 2 cores\n")
    print("| chunks | stored vectors | mode | p50 ms (HTTP) | p95 ms (HTTP) | p50 ms (pipeline) |")
    print("|---|---|---|---|---|---|")
    for n, kind, mode, p50, p95, inner in rows:
        print(f"| {n:,} | {kind} | {mode} | {p50:.1f} | {p95:.1f} | {inner:.1f} |")
    names = ["embed", "sparse", "retrieve", "generations", "rescore", "fuse", "fetch", "transfer", "rerank", "total"]
    print("\n### Pipeline stages, p50 ms\n")
    print("| chunks | mode | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for n, mode, stages in breakdown:
        print(f"| {n:,} | {mode} | " + " | ".join(f"{stages.get(s, 0.0):.1f}" for s in names) + " |")
    print(
        "\n### The store's dense query (int8, scanned or through HNSW graphs past the threshold, the top 2x rescored "
        "on float32) against an exact float32 scan, same shard\n"
    )
    print("| chunks | dense side | int8 + rescore p50 ms | float32 exact p50 ms | ratio | top-100 overlap |")
    print("|---|---|---|---|---|---|")
    for n, layout, q8, f32, overlap in scans:
        print(f"| {n:,} | {layout} | {q8:.1f} | {f32:.1f} | {q8 / f32:.2f} | {overlap:.4f} |")
    # 1M chunks take a run of their own: --million
    print("\n" + " ".join(f"{k}={v:.2f}" for k, v in summary.items()) + " hybrid_p50_ms_1m=not_measured")


if __name__ == "__main__":
    main()
