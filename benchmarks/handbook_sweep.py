"""The demo handbook's labelled set under each retrieval configuration: the numbers behind the defaults.

    python benchmarks/handbook_sweep.py          # about 2 minutes on 2 cores

Chunk size changes the index (one ingest per size); mode and fusion change only the query. Evidence labels make
the chunk-size rows comparable: they are judged on whichever chunks the size produces.
"""

from __future__ import annotations

import argparse
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
from service.domain import FusionMethod, Mode
from service.evaluation.retriever import PipelineRetriever
from service.index.loaders import iter_documents
from service.retrieval.pipeline import SearchParams
from service.runtime import Components, Runtime, build_embedder
from service.settings import Settings

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
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    # the model on torch, as these numbers were first taken; loaded once and given to each size's runtime
    settings = Settings(
        data_dir=Path(tempfile.gettempdir()), encoder_runtime="torch", device="cpu", index_copies=1, auth="off"
    )
    embedder = build_embedder(settings)
    name, cases = load_set("handbook")
    docs = list(iter_documents(HANDBOOK))
    print(f"\n### Handbook set ({len(cases)} cases), unit=chunk, k=10\n")
    print("| chunk size | configuration | hit@1 | hit@5 | recall@10 | MRR@10 | nDCG@10 |")
    print("|---|---|---|---|---|---|---|")
    for size in (500, 1000, 1500):
        with tempfile.TemporaryDirectory() as tmp:
            sized = settings.model_copy(update={"data_dir": Path(tmp), "chunk_size": size, "chunk_overlap": size // 10})
            runtime = Runtime(sized, Components(embedder=lambda _: embedder))
            runtime.warm_up()
            index, pipeline = runtime.index, runtime.pipeline
            index.ingest(docs)
            for label, params in CONFIGS if size == 1000 else CONFIGS[-2:-1]:
                run = run_set(
                    cases,
                    PipelineRetriever(pipeline, replace(params, k=10)),
                    set_name=name,
                    ks=(1, 5, 10),
                )
                m = mean_metrics(run.cases)
                print(
                    f"| {size} ({index.chunks()} chunks) | {label} | {m['hit@1']:.3f} | {m['hit@5']:.3f} | "
                    f"{m['recall@10']:.3f} | {m['mrr@10']:.3f} | {m['ndcg@10']:.3f} |"
                )
            runtime.close()


if __name__ == "__main__":
    main()
