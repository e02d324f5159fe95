"""Memory: the peak RSS and PSS of `plumbline serve`, its whole process tree (the serving process and its engine
processes) and each process of it, at the capacity docs/deployment.md advertises for one replica on the embedded
engine (100k chunks), with the default two copies of the index against one copy in the serving process
(`PLUMBLINE_INDEX_COPIES=1`), the alternative, measured in the same run on the same index.

    python benchmarks/memory.py                 # 100k chunks: about 20 minutes on 2 cores, 4 GB of memory a server
    python benchmarks/memory.py --chunks 0      # the same steps on an empty index
    python benchmarks/memory.py --chunks 5000 --documents 64    # a smoke run, about 3 minutes

It ends with one line of `name=value` pairs for scripts (`peak_rss_mib_two_copies`, `peak_rss_mib_one_copy`).

The index is built once as `benchmarks/speed.py` builds its 100k index (`fill_random`: SciFact chunks cycled, real
text and BM25, random unit dense vectors, which take the memory real ones take), chunked at the default `chunk_size`,
and each server gets a fresh copy of it. The ONNX graph is exported before any server starts, as the image does
when it is built, so no server's start-up holds the export. Each server runs with the image's settings otherwise
(backend edge, ONNX encoder, no reranker, `PLUMBLINE_TORCH_THREADS=2`, JSON logs; auth off, as `speed.py`'s `serve`
runs it) through three phases: start-up (to ready), 150 SciFact test queries in each mode (keyword, dense, hybrid),
then SciFact documents through `POST /documents` in batches of 32 while a client searches back to back. A thread
samples every 0.25 s the tree under the server this script started (its child), VmRSS from /proc/<pid>/status and
PSS from /proc/<pid>/smaps_rollup; the tree's figure is the peak of each sample's sum, not the sum of the peaks.
VmHWM (the kernel's own peak RSS of a process, read at the end) catches what falls between samples. MiB: /proc's kB
divided by 1024. With `--repeats` each cell is the median over that many servers of each setting, the order of the
two alternating. RSS counts the index files the engines map and have read; under memory pressure the kernel can drop
those pages, so the figure errs high rather than low.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.datasets import SCIFACT, require, scifact_chunks
from benchmarks.speed import MODES, fill_random, serve
from eval.trec import read_queries
from service.cli.remote import no_delay_client
from service.domain import Document
from service.index.loaders import iter_documents
from service.runtime import build_embedder
from service.settings import Settings
from service.stores.mirrored import single_copy

PHASES = ("start-up", "searches", "ingest")
TREE, SERVER = "whole tree", "serving process"
COPIES = {"2": "two (the default)", "1": "one, in the serving process"}


def children(pid: int) -> list[int]:
    """The processes `pid` started (every thread's)."""
    out: list[int] = []
    try:
        for tid in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (tid / "children").read_text().split()]
    except OSError:  # it exited
        pass
    return out


def kib(pid: int, name: str, file: str = "status") -> int:
    """A `name:` line of /proc/<pid>/<file>, in kB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def label(pid: int, parent: int) -> str:
    """The serving process (the child of this one), an engine process named by its copy of the index, or another
    process by its command name (none holds memory for long: a helper that ran a moment, already exited)."""
    if parent == 0:
        return SERVER
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        if "service.stores.mirrored" in argv:  # python -m service.stores.mirrored <copy> ...
            return f"engine process, {Path(argv[argv.index('service.stores.mirrored') + 1]).name}"
        return f"other: {Path(f'/proc/{pid}/comm').read_text().strip()}"
    except OSError:
        return "other: exited"


@dataclass
class Sampler:
    """Peak RSS and PSS (kB) per phase of the tree under this process's children, of each process in it, and their
    VmHWM; `phase` is the phase samples count towards."""

    phase: str = PHASES[0]
    rss: dict[tuple[str, str], int] = field(default_factory=dict)
    pss: dict[tuple[str, str], int] = field(default_factory=dict)
    hwm: dict[str, int] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # the sampling thread's and the phase ends' samples

    def tree(self) -> dict[int, str]:
        """Each process under the server this script started (its only child), by its label."""
        found: dict[int, str] = {}
        stack = [(pid, 0) for pid in children(os.getpid())]
        while stack:
            pid, parent = stack.pop()
            found[pid] = label(pid, parent)
            stack += [(c, pid) for c in children(pid)]
        return found

    def sample(self) -> None:
        with self.lock:
            self._sample()

    def _sample(self) -> None:
        rss: dict[str, int] = {}
        pss: dict[str, int] = {}
        for pid, name in self.tree().items():  # summed by name: two other processes may share one
            rss[name] = rss.get(name, 0) + kib(pid, "VmRSS")
            pss[name] = pss.get(name, 0) + kib(pid, "Pss", "smaps_rollup")
            self.hwm[name] = max(self.hwm.get(name, 0), kib(pid, "VmHWM"))
        for peaks, now in [(self.rss, rss), (self.pss, pss)]:
            for name, value in [*now.items(), (TREE, sum(now.values()))]:
                key = (self.phase, name)
                peaks[key] = max(peaks.get(key, 0), value)

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            time.sleep(0.25)


@contextmanager
def sampled() -> Iterator[Sampler]:
    sampler = Sampler()
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        yield sampler
    finally:
        sampler.done.set()
        thread.join()


def measure(data: Path, copies: str, env: dict[str, str], queries: list[str], docs: list[Document]) -> Sampler:
    """One server on `data` with `copies` copies of the index through the three phases, sampled."""
    with sampled() as sampler:
        start = time.perf_counter()
        url, stop = serve(data, "", env={**env, "PLUMBLINE_INDEX_COPIES": copies})
        ready = time.perf_counter() - start
        print(f"# index copies {COPIES[copies]}: ready in {ready:.0f} s", file=sys.stderr, flush=True)
        try:
            sampler.phase = "searches"
            sampler.sample()  # the ready server, before the first search
            with no_delay_client() as client:
                for mode, body in MODES.items():
                    if "rerank" in mode:  # no reranker: the image ships none unless built with RERANKER_DIR
                        continue
                    for q in queries:
                        client.post(f"{url}/search", json={**body, "query": q, "k": 10}).raise_for_status()
            sampler.sample()
            sampler.phase = "ingest"
            start = time.perf_counter()
            ingest_while_searching(url, docs, queries)
            time.sleep(1.0)  # a last sample or four after the last write
            sampler.sample()
            print(f"# ingested {len(docs)} documents in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        finally:
            sampler.sample()  # VmHWM, while the processes are still there
            stop()
    return sampler


def ingest_while_searching(url: str, docs: list[Document], queries: list[str]) -> None:
    """`docs` through `POST /documents` in batches of 32 while one client searches back to back."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def search() -> None:
        try:
            with no_delay_client() as client:
                i = 0
                while not stop.is_set():
                    client.post(f"{url}/search", json={"query": queries[i % len(queries)], "k": 10}).raise_for_status()
                    i += 1
        except BaseException as exc:  # raised again below, after the ingest
            failures.append(exc)

    searcher = threading.Thread(target=search)
    searcher.start()
    try:
        with httpx.Client(timeout=600) as client:
            for i in range(0, len(docs), 32):
                body = [{"id": f"new-{d.id}", "title": d.title, "text": d.text} for d in docs[i : i + 32]]
                client.post(f"{url}/documents", json={"documents": body}).raise_for_status()
    finally:
        stop.set()
        searcher.join()
    if failures:
        raise failures[0]


COLUMNS = "| index copies | process | start-up RSS | searches RSS | searches PSS | ingest RSS | ingest PSS | VmHWM |"


def cells(s: Sampler, name: str) -> list[int | None]:
    """One process's (or the tree's) figures in one run, kB, in the order of `COLUMNS`, and its peak RSS last."""
    row = [s.rss.get(("start-up", name)), s.rss.get(("searches", name)), s.pss.get(("searches", name))]
    row += [s.rss.get(("ingest", name)), s.pss.get(("ingest", name)), None if name == TREE else s.hwm.get(name)]
    return [*row, max((s.rss[p, name] for p in PHASES if (p, name) in s.rss), default=None)]


def table(runs: dict[str, list[Sampler]], chunks: int, documents: int) -> dict[str, float]:
    """The table (MiB, medians over the runs of each setting); returns each setting's peak tree RSS."""
    medians: dict[tuple[str, str], list[float | None]] = {}
    for copies, samplers in runs.items():
        names = sorted({name for s in samplers for _, name in s.rss}, key=lambda n: (n != TREE, n != SERVER, n))
        for name in names:
            columns = zip(*(cells(s, name) for s in samplers), strict=True)
            medians[copies, name] = [
                statistics.median(known) / 1024 if (known := [v for v in col if v is not None]) else None
                for col in columns
            ]
    repeats = len(runs["2"])
    print(
        f"\n### Peak memory of `plumbline serve`, {chunks:,} chunks, {documents} documents ingested while searching,"
        f" MiB (median of {repeats} server{'s' if repeats > 1 else ''} of each setting)\n"
    )
    print(f"{COLUMNS} peak RSS vs two copies |\n{'|---' * 9}|")
    for (copies, name), row in medians.items():
        *shown, top = row
        if not top:  # a process gone before it could be read
            continue
        base = medians.get(("2", name), [None])[-1]
        ratio = f"{top / base:.2f}" if top is not None and base else ""
        figures = " | ".join("" if v is None else f"{v:,.0f}" for v in shown)
        print(f"| {COPIES[copies]} | {f'**{name}**' if name == TREE else name} | {figures} | {ratio} |")
    return {copies: medians[copies, TREE][-1] or 0.0 for copies in runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in the index (default: 100000)")
    parser.add_argument("--documents", type=int, default=256, help="SciFact documents ingested (default: 256)")
    parser.add_argument("--repeats", type=int, default=1, help="servers of each setting (default: 1)")
    args = parser.parse_args()
    require(SCIFACT)
    tmp = Path(tempfile.mkdtemp(prefix="plumbline-memory-"))
    try:
        settings = Settings(data_dir=tmp, model_cache=tmp / "models", device="cpu")
        build_embedder(settings)  # the ONNX export, done before any server starts as the image's build does
        base = tmp / "base"
        base.mkdir()
        if args.chunks:
            start = time.perf_counter()
            store = single_copy(base / "index")
            store.ensure_schema(384)
            fill_random(store, scifact_chunks(settings.chunk_size), args.chunks, 384)
            store.close()
            print(f"# {args.chunks} chunks written in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        env = {"PLUMBLINE_MODEL_CACHE": str(tmp / "models"), "PLUMBLINE_TORCH_THREADS": "2"}
        env |= {"PLUMBLINE_LOG_FORMAT": "json"}
        queries = list(read_queries(SCIFACT / "queries.jsonl").values())[:150]
        docs = list(iter_documents(SCIFACT / "corpus.jsonl"))[: args.documents]
        runs: dict[str, list[Sampler]] = {copies: [] for copies in COPIES}
        for run in range(args.repeats):
            for copies in list(COPIES)[:: -1 if run % 2 else 1]:
                data = tmp / "data"
                shutil.copytree(base, data)
                runs[copies].append(measure(data, copies, env, queries, docs))
                shutil.rmtree(data)
        peaks = table(runs, args.chunks, len(docs))
        print(f"\npeak_rss_mib_two_copies={peaks['2']:.0f} peak_rss_mib_one_copy={peaks['1']:.0f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
