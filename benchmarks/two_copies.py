"""What searches wait for during an ingest with the two stores of the embedded index, in-process (no HTTP, so the
store's part alone): `MirroredStore` (two copies, each in an engine process: the default) against `EdgeStore` (one
shard in the serving process: `PLUMBLINE_INDEX_COPIES=1`).

    python benchmarks/two_copies.py            # about 8 minutes on 2 cores

The search pipeline runs in this process at 10 searches a second (open loop: each timed from when it was due) while an
`Index` ingests SciFact documents in batches of 32 in a thread, on a 10k-chunk index. `benchmarks/speed.py` measures
the same over HTTP.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.datasets import SCIFACT, require, scifact_chunks
from benchmarks.speed import paced
from eval.trec import read_queries
from service.domain import Document
from service.index.chunking import Chunker, ChunkerConfig
from service.index.index import Index
from service.index.loaders import iter_documents
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.retrieval.sparse import Bm25Params
from service.runtime import Components, Runtime, build_embedder, tokenizer_config
from service.settings import Settings
from service.stores.base import VectorStore
from service.stores.edge import EdgeStore
from service.stores.mirrored import MirroredStore


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
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    require(SCIFACT)
    tmp = Path(tempfile.mkdtemp(prefix="plumbline-copies-"))
    settings = Settings(data_dir=tmp, device="cpu")
    embedder = build_embedder(settings)
    # 10k chunks of real text and embeddings, as speed.py's first index, written in one copy
    base = settings.model_copy(
        update={"data_dir": tmp / "base", "chunk_size": 400, "chunk_overlap": 40, "index_copies": 1, "auth": "off"}
    )
    runtime = Runtime(base.model_copy(update={"embedding_cache": False}), Components(embedder=lambda _: embedder))
    runtime.warm_up()
    chunks = scifact_chunks(400)[:10_000]
    by_id = {d.id: d for d, _ in chunks}
    subset = sorted(by_id)
    for i in range(0, len(subset), 256):
        runtime.index.ingest([by_id[x] for x in subset[i : i + 256]])
    runtime.close()
    docs = list(iter_documents(SCIFACT / "corpus.jsonl"))[1000:]
    gc.collect()
    gc.freeze()  # as the service does after its warm-up: a full collection over the models' objects stops every thread
    queries = list(read_queries(SCIFACT / "queries.jsonl").values())[:150]
    print("\n| store | search p50 ms | search p99 ms | max ms | documents written in 40 s |\n|---|---|---|---|---|")
    for run in range(2):
        for mode in ("one copy in the serving process (EdgeStore)", "two copies in engine processes (MirroredStore)"):
            shutil.copytree(tmp / "base" / "index", tmp / "index")  # MirroredStore makes its second copy from it
            # by hand: the store type is what this compares, each under the same index and embedder
            store: VectorStore = EdgeStore(tmp / "index") if "one copy" in mode else MirroredStore(tmp / "index")
            chunker = Chunker(ChunkerConfig(settings.chunk_size, settings.chunk_overlap))
            writer = Index(store, embedder, chunker, tokenizer_config(settings), Bm25Params())
            batch = [replace(d, id=f"load{run}-{d.id}") for d in docs]
            p50, p99, worst, written = searches_during_ingest(store, writer, batch, queries, 40)
            store.close()
            print(f"| {mode} | {p50:.1f} | {p99:.1f} | {worst:.0f} | {written} |", flush=True)
            for leftover in tmp.glob("index*"):  # the copies, their locks
                if leftover.is_dir():
                    shutil.rmtree(leftover)
                else:
                    leftover.unlink()


if __name__ == "__main__":
    main()
