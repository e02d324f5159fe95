"""A probe of a design that is not built (README, Known limits): what searches would wait for during an ingest if the
engine's writes left the serving process.

    python benchmarks/two_copies.py            # about 8 minutes on 2 cores

The binding holds the GIL through every engine call, and one shard cannot be opened by two processes, so the design
keeps two copies of the shard, each owned by an engine process: a write is applied to one copy while searches read the
other, then to the other. `TwoCopies` below is that routing and nothing more (no write log, no repair after a crash,
no handling of a copy that fails): a probe, not a store. It runs the search pipeline in this process (no HTTP) at 10
searches a second (open loop: each timed from when it was due) while an `Index` ingests SciFact documents in batches of
32 in a thread, on a 10k-chunk index, against the same with one `EdgeStore` in this process (the service today).
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.speed import SCIFACT, paced, scifact_chunks
from eval.trec import read_queries
from service.chunking import Chunker, ChunkerConfig
from service.domain import Document
from service.index import Index
from service.loaders import iter_documents
from service.onnx_models import OnnxEmbedder
from service.pipeline import SearchParams, SearchPipeline
from service.settings import PACKAGED_MODEL, Settings
from service.sparse import Bm25Params
from service.stores.base import VectorStore
from service.stores.edge import EdgeStore
from service.tokenizer import TokenizerConfig

_WRITES = {"upsert", "delete", "set_payload", "purge", "ensure_schema"}


def _host(path: str, conn: Connection) -> None:
    """An engine process: one `EdgeStore`, its methods called over `conn` until None comes."""
    store = EdgeStore(Path(path))
    while (message := conn.recv()) is not None:
        name, args, kwargs = message
        try:
            conn.send((True, getattr(store, name)(*args, **kwargs)))
        except Exception as exc:  # handed to the caller, which raises it
            conn.send((False, exc))
    store.close()
    conn.send(None)


class _Copy:
    def __init__(self, path: Path) -> None:
        context = mp.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_host, args=(str(path), child), daemon=True)
        self.process.start()
        self.lock = threading.Lock()
        self.writing = False

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.conn.send((name, args, kwargs))
            ok, value = self.conn.recv()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        with self.lock:
            self.conn.send(None)
            self.conn.recv()
        self.process.join()


class TwoCopies:
    """The probe's routing: writes to each copy in turn under one lock; a read to a copy not writing, an idle one
    first."""

    def __init__(self, a: Path, b: Path) -> None:
        self.copies = [_Copy(a), _Copy(b)]
        self.write_lock = threading.Lock()

    def _close(self) -> None:
        for c in self.copies:
            c.close()

    def _reader(self) -> _Copy:
        while not (free := [c for c in self.copies if not c.writing]):
            time.sleep(0.0005)
        return min(free, key=lambda c: c.lock.locked())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name == "health":
            return lambda: None
        if name == "close":
            return self._close
        if name not in _WRITES:
            return lambda *args, **kwargs: self._reader().call(name, *args, **kwargs)

        def write(*args: Any, **kwargs: Any) -> None:
            with self.write_lock:
                for c in self.copies:
                    c.writing = True
                    try:
                        c.call(name, *args, **kwargs)
                    finally:
                        c.writing = False

        return write


def searches_during_ingest(
    store: VectorStore, index: Index, docs: list[Document], queries: list[str], seconds: float
) -> tuple[float, float, float, int]:
    """p50, p99 and max search latency (ms) at 10/s while `index` ingests `docs`, and the documents it wrote."""
    pipeline = SearchPipeline(store, index.embedder, index.encoder, None)
    for q in queries[:5]:
        pipeline.search(q, SearchParams())
    stop, written, latencies = threading.Event(), [0], []
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(0, len(docs), 32):
                if stop.is_set():
                    return
                index.ingest(docs[i : i + 32])
                written[0] += len(docs[i : i + 32])
        except BaseException as exc:  # raised again below, after the searches
            failures.append(exc)

    def search(query: str, due: float) -> None:
        pipeline.search(query, SearchParams())
        latencies.append((time.perf_counter() - due) * 1000)

    writer = threading.Thread(target=write)
    writer.start()
    paced(search, queries, 10, seconds)
    stop.set()
    writer.join()
    if failures:
        raise failures[0]
    return statistics.median(latencies), float(np.percentile(latencies, 99)), max(latencies), written[0]


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="plumbline-copies-"))
    nice = Settings.model_fields["ingest_nice"].default
    embedder = OnnxEmbedder(PACKAGED_MODEL, cache=tmp / "models", document_nice=nice)
    base = EdgeStore(tmp / "base")  # 10k chunks of real text and embeddings, as speed.py's first index
    index = Index(base, embedder, Chunker(ChunkerConfig(400, 40)), TokenizerConfig(), Bm25Params())
    chunks = scifact_chunks(400)[:10_000]
    by_id = {d.id: d for d, _ in chunks}
    subset = sorted(by_id)
    for i in range(0, len(subset), 256):
        index.ingest([by_id[x] for x in subset[i : i + 256]])
    base.close()
    docs = list(iter_documents(SCIFACT / "corpus.jsonl"))[1000:]
    queries = list(read_queries(SCIFACT / "queries.jsonl").values())[:150]
    print("\n| store | search p50 ms | search p99 ms | max ms | documents written in 40 s |\n|---|---|---|---|---|")
    for run in range(2):
        for mode in ("one store in the serving process (today)", "two copies in engine processes (the probe)"):
            for copy in ("a", "b"):
                shutil.copytree(tmp / "base", tmp / copy)
            store: Any = EdgeStore(tmp / "a") if "today" in mode else TwoCopies(tmp / "a", tmp / "b")
            writer = Index(store, embedder, Chunker(ChunkerConfig(1000, 100)), TokenizerConfig(), Bm25Params())
            batch = [replace(d, id=f"load{run}-{d.id}") for d in docs]
            p50, p99, worst, written = searches_during_ingest(store, writer, batch, queries, 40)
            store.close()
            print(f"| {mode} | {p50:.1f} | {p99:.1f} | {worst:.0f} | {written} |", flush=True)
            for copy in ("a", "b"):
                shutil.rmtree(tmp / copy)


if __name__ == "__main__":
    main()
