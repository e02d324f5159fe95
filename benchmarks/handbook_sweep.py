"""The demo handbook's labelled sets under each retrieval configuration: the numbers behind the defaults.

    python benchmarks/handbook_sweep.py          # the handbook set (about 2 minutes on 2 cores)
    python benchmarks/handbook_sweep.py --plain  # the plain-language set (docs/plain-language.md; about 25 minutes)

Chunk size changes the index (one ingest per size); mode and fusion change only the query. Evidence labels make
the chunk-size rows comparable: they are judged on whichever chunks the size produces.

`--plain` measures the plain-language set (`eval/sets/plain.jsonl`, its tune and test splits apart) and the handbook
set under each representation of the chunks for the models (`--represent`: the default title + heading path + text;
tables linearised; the heading line repeated; one ingest each) and each query configuration (`--configs`, e.g.
`hybrid@0.7+filler`: weighted fusion at alpha 0.7 with the keyword query's filler dropped; `+keep` keeps the filler;
`+doc0.3` blends each passage's fusion score with its document's best, over the top 100). Representations other
than the default are experiments of this script: the service indexes the default form.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.cases import Case
from eval.matching import Retrieved
from eval.report import mean_metrics
from eval.runner import Query, Retriever, run_set
from eval.storage import load_set
from service.domain import Chunk, Document, FusionMethod, Mode
from service.evaluation.retriever import PipelineRetriever
from service.index.chunking import Chunker, ChunkerConfig
from service.index.loaders import iter_documents
from service.retrieval.embedding import Embedder
from service.retrieval.pipeline import SearchParams, SearchPipeline
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


# what the models see of a chunk (`--represent`): (tables linearised, each row led by the heading path, heading repeats)
REPRESENTATIONS = {
    "default": (False, False, 1),
    "tables": (True, True, 1),
    "tables-compact": (True, False, 1),
    "heading x2": (False, False, 2),
    "tables+heading x2": (True, True, 2),
}
PLAIN_CONFIGS = [
    "keyword+keep",
    "dense",
    "hybrid+keep",
    "keyword",
    "hybrid",
    "hybrid@0.6",
    "hybrid@0.7",
    "hybrid@0.8",
    "hybrid@0.7+keep",
    "hybrid+doc0.2",
    "hybrid+doc0.4",
]


@dataclass(frozen=True)
class RepresentedChunk(Chunk):
    """A chunk whose models see `model_text` (its stored text unchanged)."""

    model_text: str = ""

    @property
    def embed_text(self) -> str:
        return self.model_text


class RepresentedChunker(Chunker):
    def __init__(self, config: ChunkerConfig, tables: bool, row_heading: bool, heading_repeat: int) -> None:
        super().__init__(config)
        self.tables, self.row_heading, self.heading_repeat = tables, row_heading, heading_repeat

    def chunk(self, doc: Document) -> list[Chunk]:
        out: list[Chunk] = []
        for c in super().chunk(doc):
            head = f"{c.title}\n{c.heading}" if c.heading_path else c.title
            text = (
                linearise_tables(c.text, (c.heading or c.title) if self.row_heading else "") if self.tables else c.text
            )
            out.append(RepresentedChunk(**vars(c), model_text="\n".join([head] * self.heading_repeat) + f"\n\n{text}"))
        return out


def linearise_tables(text: str, context: str = "") -> str:
    """Each pipe table of `text` as one line per row, "<context> — header: cell; header: cell" (empty cells and dashes
    left out, the rule row dropped); other lines unchanged.

    Example:
        >>> print(linearise_tables("Rates:\\n| Plan | Price |\\n|---|---|\\n| Pro | 59 |\\n| Team | — |", "Pricing"))
        Rates:
        Pricing — Plan: Pro; Price: 59
        Pricing — Plan: Team
    """
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if i + 1 < len(lines) and _is_row(lines[i]) and set(lines[i + 1].strip()) <= set("|-: "):
            headers, i = _cells(lines[i]), i + 2
            while i < len(lines) and _is_row(lines[i]):
                cells = zip(headers, _cells(lines[i]), strict=False)
                pairs = [f"{h}: {c}" if h else c for h, c in cells if c and c not in ("-", "—", "–")]
                if pairs:
                    out.append(f"{context} — {'; '.join(pairs)}" if context else "; ".join(pairs))
                i += 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def _is_row(line: str) -> bool:
    return line.strip().startswith("|")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


class DocumentContext:
    """Each passage's fusion score blended with its document's best among the top 100: (1 - w) s + w max_doc s."""

    def __init__(self, pipeline: SearchPipeline, params: SearchParams, weight: float) -> None:
        self.inner, self.weight = PipelineRetriever(pipeline, params), weight

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
        out = []
        for q, hits in zip(queries, self.inner.retrieve([replace(q, k=100) for q in queries]), strict=True):
            best: dict[str, float] = {}
            for h in hits:
                best[h.doc_id] = max(best.get(h.doc_id, h.score), h.score)
            w = self.weight
            out.append(sorted(hits, key=lambda h: (-((1 - w) * h.score + w * best[h.doc_id]), h.chunk_id))[: q.k])
        return out


def plain_config(name: str) -> tuple[SearchParams, float | None]:
    """`keyword`, `dense`, `hybrid` or `hybrid@<alpha>`, then `+keep` (keep the filler), `+doc<w>` (doc context)."""
    base, *extras = name.split("+")
    params = SearchParams(k=10)
    if base == "keyword":
        params = replace(params, mode=Mode.KEYWORD)
    elif base == "dense":
        params = replace(params, mode=Mode.DENSE)
    elif base.startswith("hybrid@"):
        params = replace(params, alpha=float(base.removeprefix("hybrid@")))
    elif base != "hybrid":
        raise SystemExit(f"unknown configuration {name!r}")
    doc = None
    for extra in extras:
        if extra == "keep":
            params = replace(params, drop_filler=False)
        elif extra.startswith("doc"):
            doc = float(extra.removeprefix("doc"))
        else:
            raise SystemExit(f"unknown configuration {name!r}")
    return params, doc


def plain(settings: Settings, embedder: Embedder, represent: Sequence[str], configs: Sequence[str]) -> None:
    _, labelled = load_set("plain")
    _, handbook = load_set("handbook")
    sets: dict[str, list[Case]] = {
        "plain tune": [c for c in labelled if c.split == "tune"],
        "plain test": [c for c in labelled if c.split == "test"],
        "handbook": list(handbook),
    }
    docs = list(iter_documents(HANDBOOK))
    print("\n### Plain-language set (tune, test) and handbook set, unit=chunk, k=10; doc hit@5 at unit=doc\n")
    print("| representation | configuration | set | hit@1 | hit@5 | recall@10 | MRR@10 | nDCG@10 | doc hit@5 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in represent:
        with tempfile.TemporaryDirectory() as tmp:
            runtime = Runtime(
                settings.model_copy(update={"data_dir": Path(tmp)}), Components(embedder=lambda _: embedder)
            )
            runtime.warm_up()
            runtime.index.chunker = RepresentedChunker(runtime.index.chunker.config, *REPRESENTATIONS[name])
            runtime.index.ingest(docs)
            for label in configs:
                params, doc = plain_config(label)
                for set_name, cases in sets.items():
                    retriever: Retriever = (
                        DocumentContext(runtime.pipeline, params, doc)
                        if doc is not None
                        else PipelineRetriever(runtime.pipeline, params)
                    )
                    m = mean_metrics(run_set(cases, retriever, set_name=set_name, ks=(1, 5, 10)).cases)
                    d = mean_metrics(
                        run_set(
                            cases, PipelineRetriever(runtime.pipeline, params), set_name=set_name, ks=(5,), unit="doc"
                        ).cases
                    )
                    print(
                        f"| {name} | {label} | {set_name} ({len(cases)}) | {m['hit@1']:.3f} | {m['hit@5']:.3f} | "
                        f"{m['recall@10']:.3f} | {m['mrr@10']:.3f} | {m['ndcg@10']:.3f} | {d['hit@5']:.3f} |",
                        flush=True,
                    )
            runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plain", action="store_true", help="the plain-language table instead of the handbook one")
    parser.add_argument("--represent", nargs="+", default=list(REPRESENTATIONS), choices=list(REPRESENTATIONS))
    parser.add_argument("--configs", nargs="+", default=PLAIN_CONFIGS, help="query configurations for --plain")
    args = parser.parse_args()
    # the model on torch, as these numbers were first taken; loaded once and given to each size's runtime
    settings = Settings(
        data_dir=Path(tempfile.gettempdir()), encoder_runtime="torch", device="cpu", index_copies=1, auth="off"
    )
    embedder = build_embedder(settings)
    if args.plain:
        plain(settings, embedder, args.represent, args.configs)
        return
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
