"""The embedding model tuned on SciFact's train claims with `plumbline tune`'s own code, the test claims reported
beside the untuned model, and search latency on both.

    python benchmarks/tuning.py                   # about 40 minutes on 2 cores (ingest, training, re-embedding)
    python benchmarks/tuning.py --epochs 1        # the tune's options, as `plumbline tune run` takes them

SciFact is ingested as `benchmarks/quality.py` ingests it (chunks of 2000 characters, the size chosen on train
there), cached under --work-dir. The train claims are the tune split and the test claims the held-out split of one
set; `Runtime.tuner()` runs the tune as `POST /eval/tunes` does (mining through the served search, training on
PLUMBLINE_DEVICE, a new index generation, the held-out comparison at unit chunk with the paired test). The test split
is then scored at unit doc, as the published figures are, on the served index and on the new generation: keyword,
dense, hybrid at the default alpha and at the alpha the train split chooses for each model (the tuned model was
trained on that split, so its choice there favours it). Latency: each test claim searched alone (hybrid, k=10), the
median of three passes over the 300 claims, each model's in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.datasets import SCIFACT, require
from benchmarks.quality import ALPHA_GRID, best, score
from eval.cases import Case
from eval.trec import cases_from_qrels, read_qrels, read_queries
from service.domain import Mode
from service.evaluation.tuning import TuneRequest
from service.index.generations import Generation
from service.index.loaders import batched, iter_documents
from service.retrieval.pipeline import SearchParams, SearchPipeline
from service.runtime import Runtime
from service.settings import Settings

CHUNK_SIZE = 2000  # SciFact's size in benchmarks/quality.py, chosen there on the train split


def scifact_cases() -> tuple[list[Case], list[Case]]:
    queries = read_queries(SCIFACT / "queries.jsonl")
    train = cases_from_qrels(read_qrels(SCIFACT / "qrels" / "train.tsv"), queries)
    test = cases_from_qrels(read_qrels(SCIFACT / "qrels" / "test.tsv"), queries)
    return [replace(c, split="tune") for c in train], [replace(c, split="test") for c in test]


def ingested(runtime: Runtime) -> None:
    """SciFact in the runtime's index, unless a previous run left it there."""
    index = runtime.index
    if index.documents():
        return
    start = time.perf_counter()
    for batch in batched(iter_documents(SCIFACT / "corpus.jsonl"), 256):
        index.ingest(batch)
    print(f"[tuning] ingested {index.documents()} documents in {time.perf_counter() - start:.0f} s", file=sys.stderr)


def latency(pipeline: SearchPipeline, cases: Sequence[Case], passes: int = 3) -> float:
    """The median of `passes` median search times (ms) over `cases`, each searched alone (hybrid, k=10)."""
    params = SearchParams(mode=Mode.HYBRID, k=10)
    pipeline.search(cases[0].question, params)  # warm
    medians = []
    for _ in range(passes):
        times = []
        for case in cases:
            start = time.perf_counter()
            pipeline.search(case.question, params)
            times.append((time.perf_counter() - start) * 1000)
        medians.append(statistics.median(times))
    return statistics.median(medians)


def report(name: str, pipeline: SearchPipeline, train: Sequence[Case], test: Sequence[Case]) -> list[float]:
    """Test nDCG@10 (unit doc) for each of ROWS, the last with the alpha chosen on train (and that alpha)."""
    hybrid = SearchParams(mode=Mode.HYBRID)
    alpha, grid = best(pipeline, train, hybrid, "alpha", ALPHA_GRID, "ndcg@10", None)
    print(f"[tuning] {name}: train nDCG@10 by alpha {grid} -> {alpha}", file=sys.stderr)
    rows = [SearchParams(mode=Mode.KEYWORD), SearchParams(mode=Mode.DENSE), hybrid, replace(hybrid, alpha=alpha)]
    return [score(pipeline, test, params, (10,), "doc", None)["ndcg@10"] for params in rows] + [alpha]


ROWS = ("keyword", "dense", "hybrid, alpha 0.5 (the default)", "hybrid, alpha chosen on train")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work-dir", type=Path, default=Path("data/bench-tuning"))
    p.add_argument("--epochs", type=int, default=TuneRequest.epochs)
    p.add_argument("--learning-rate", type=float, default=TuneRequest.learning_rate)
    p.add_argument("--batch-size", type=int, default=TuneRequest.batch_size)
    args = p.parse_args()
    require(SCIFACT)
    settings = Settings(data_dir=args.work_dir, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_SIZE // 10, index_copies=1)
    runtime = Runtime(settings)
    runtime.warm_up()
    try:
        ingested(runtime)
        train, test = scifact_cases()
        req = TuneRequest(
            ("scifact",), epochs=args.epochs, learning_rate=args.learning_rate, batch_size=args.batch_size
        )
        start = time.perf_counter()
        record = runtime.tuner().run(f"bench-{int(time.time())}", req, {"scifact": [*train, *test]}, lambda *_: None)
        took = time.perf_counter() - start
        training, mined, held = record["training"], record["mined"], record["held_out"]["pooled"]
        print(f"\n### SciFact: the model tuned on the {len(train)} train claims, {len(test)} test claims reported\n")
        print(
            f"tune: {mined['examples']} examples ({mined['missed']} the served search missed), "
            f"{training['steps']} steps in {training['seconds']:.0f} s on {training['device']} "
            f"(loss {training['first_loss']} -> {training['last_loss']}), {took:.0f} s in all with re-embedding "
            f"{record['index']['documents']} documents; held-out nDCG@10 at unit chunk {held['current_mean']:.4f} -> "
            f"{held['winner_mean']:.4f} (p = {held['p_value']:.4f})\n"
        )
        gen = Generation.of(record["generation"])
        _, tuned = runtime.open_generation(gen)
        try:
            before = report("served", runtime.pipeline, train, test)
            after = report("tuned", tuned, train, test)
            print("| test nDCG@10, unit doc | served model | tuned model |")
            print("|---|---|---|")
            for label, b, a in zip(ROWS, before, after, strict=False):
                print(f"| {label} | {b:.4f} | {a:.4f} |")
            print(f"| (the alpha chosen on train) | {before[-1]} | {after[-1]} |")
            served_ms, tuned_ms = latency(runtime.pipeline, test), latency(tuned, test)
            print("\n| search p50 (hybrid, k=10, one claim at a time) | served model | tuned model | ratio |")
            print("|---|---|---|---|")
            print(f"| ms | {served_ms:.1f} | {tuned_ms:.1f} | {tuned_ms / served_ms:.2f} |")
        finally:
            tuned.store.close()
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
