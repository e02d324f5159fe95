"""Sweeps: a labelled set replayed under every configuration of a grid (or a bounded random sample of one), the
winner chosen on the tuning split and reported on the held-out split, against the served configuration.

Search values reuse an index: the live one when the chunking is the live chunking. Each other chunking gets a
temporary index built from the stored documents in `<data dir>/scratch/<sweep id>` (the disk checked first), never
the live index, removed when its rows are measured. Evidence labels keep the cases valid on any chunking. Each row
times every question on its own (p50/p95 of the search alone) and counts the tokens of the top k texts, what a
generator would receive.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eval import sweep as sw
from eval.cases import Case
from eval.errors import EvalError
from eval.matching import Retrieved, Unit
from eval.runner import CaseResult, Query, run_set
from eval.storage import check_name
from service.domain import Document, FusionMethod, Mode
from service.errors import InvalidRequest
from service.evaluation.retriever import PipelineRetriever
from service.index.generations import COPY_BATCH, entries
from service.index.index import Index
from service.index.loaders import batched
from service.retrieval.pipeline import SearchParams, SearchPipeline

log = logging.getLogger("plumbline")

SCRATCH = "scratch"  # temporary indexes live in DATA_DIR/scratch/<sweep id>/ (removed at start-up if left behind)
SCRATCH_FACTOR = 1.5  # a temporary index's disk estimate: the live index's bytes per chunk, times this


@dataclass(frozen=True)
class SweepRequest:
    """What a sweep is asked for: the space, grid or random (`samples` configurations), the quality metric (a row's
    searches return its own k results, so a metric past that k sees no more), the split, and the tenant a
    tenant-bound caller confines it to."""

    set_name: str
    space: Mapping[str, Sequence[Any]]
    search: str = "grid"  # grid or random
    samples: int = 20
    seed: int = 0
    metric: str = "ndcg@10"
    unit: Unit = "chunk"
    test_share: float = 0.5
    tenant: str | None = None

    def __post_init__(self) -> None:
        check_name(self.set_name, "set")
        if self.search not in ("grid", "random"):
            raise InvalidRequest(f"search must be 'grid' or 'random', got {self.search!r}")

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["space"] = {k: list(v) for k, v in self.space.items()}
        return out


@dataclass(frozen=True)
class Served:
    """The configuration a sweep compares with: the served search parameters and the live index's chunking."""

    params: SearchParams
    chunk_size: int
    chunk_overlap: int

    def config(self) -> dict[str, Any]:
        p = self.params
        return {
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "mode": p.mode.value,
            "fusion": p.fusion.value,
            "alpha": p.alpha,
            "rrf_k": p.rrf_k,
            "candidates": p.candidates,
            "rerank": p.rerank,
            "rerank_depth": p.rerank_depth,
            "k": p.k,
        }


@dataclass
class _Timed:
    """A retriever that searches one question at a time, timing each, and returns its configuration's top k only
    (what a generator would receive, so recall@10 of a k=5 row is its recall@5) and keeps their texts."""

    inner: PipelineRetriever
    k: int
    latencies: list[float] = field(default_factory=list)
    contexts: list[list[str]] = field(default_factory=list)

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
        out = []
        for q in queries:
            start = time.perf_counter()
            ranked = self.inner.retrieve([q])[0][: self.k]  # what the generator gets: metrics past k see no more
            self.latencies.append((time.perf_counter() - start) * 1000)
            self.contexts.append([r.text for r in ranked])
            out.append(ranked)
        return out


class Sweeper:
    """Runs sweeps over the live pipeline and temporary indexes.

    `scratch(directory, chunk_size, chunk_overlap)` builds a temporary index (`Runtime.scratch_index`); `documents`
    lists the stored documents a tenant's (None: every) sweep copies into one; `live_bytes()` is the live index's
    size on disk, `live_chunks()` its chunk count; `reserve_space(n)` raises before a write the disk cannot take.
    """

    def __init__(
        self,
        live: SearchPipeline,
        served: Served,
        scratch: Callable[[Path, int, int], tuple[Index, SearchPipeline]],
        index: Index,
        workdir: Path,
        *,
        reserve_space: Callable[[int], None],
        live_bytes: Callable[[], int],
        count_tokens: Callable[[str], int],
        max_configs: int,
    ) -> None:
        self.live = live
        self.served = served
        self.scratch = scratch
        self.index = index
        self.workdir = workdir
        self.reserve_space = reserve_space
        self.live_bytes = live_bytes
        self.count_tokens = count_tokens
        self.max_configs = max_configs

    def run(
        self, job_id: str, req: SweepRequest, cases: Sequence[Case], progress: Callable[[int, int], None]
    ) -> sw.SweepResult:
        """Each configuration on the tuning split, the winner chosen there; the winner and the served configuration
        on the held-out split, compared with the paired test."""
        space = self._space(req)
        configs = self._configs(space, req)
        try:
            tune, test, origin = sw.split_cases(cases, seed=req.seed, test_share=req.test_share)
        except EvalError as exc:
            raise InvalidRequest(str(exc)) from None
        total = len(configs) + 2  # each configuration on tune; the winner and the served one on test
        done = 0
        rows: list[sw.Row] = []
        for key, group in _by_index(configs):
            with self._pipeline(job_id, key, req.tenant, functools.partial(progress, done, total)) as pipeline:
                for config in group:
                    progress(done, total)
                    rows.append(self._row(pipeline, config, tune, req)[0])
                    done += 1
        rows = sw.mark_pareto(rows, quality=req.metric)
        winner = sw.choose(rows, quality=req.metric)
        served = self.served.config()
        current = sw.Config.of(served)
        if all(served.get(name) == value for name, value in winner.config.items()):
            # the winner is the served configuration on every swept parameter: named alike, the result says so
            current = sw.Config.of({name: served[name] for name in winner.config})
        measured = {}
        for name, config in (("winner", winner.config), ("current", current)):
            progress(done, total)
            with self._pipeline(
                job_id, config.index_key(), req.tenant, functools.partial(progress, done, total)
            ) as pipeline:
                measured[name] = self._row(pipeline, config, test, req)[1]
            done += 1
        progress(done, total)
        comparison = sw.held_out(measured["winner"], measured["current"], quality=req.metric, seed=req.seed)
        return sw.SweepResult(
            space=space,
            mode=req.search,
            seed=req.seed,
            split=sw.SplitSummary(origin, len(tune), len(test), req.seed, req.test_share),
            quality=req.metric,
            rows=tuple(rows),
            winner=winner.label,
            current=current,
            held_out=comparison,
            notes=tuple(space.notes),
        )

    def _space(self, req: SweepRequest) -> sw.SweepSpace:
        try:
            return sw.SweepSpace.parse(req.space, max_configs=self.max_configs)
        except EvalError as exc:
            raise InvalidRequest(str(exc)) from None

    def _configs(self, space: sw.SweepSpace, req: SweepRequest) -> list[sw.Config]:
        try:
            configs = space.grid() if req.search == "grid" else space.random(req.samples, req.seed)
        except EvalError as exc:
            raise InvalidRequest(str(exc)) from None
        if self.live.reranker is None and any(c.get("rerank") for c in configs):
            raise InvalidRequest(
                "the space turns rerank on, but no cross-encoder is configured (PLUMBLINE_RERANK_MODEL): drop it"
            )
        return configs

    def configs(self, req: SweepRequest) -> list[sw.Config]:
        """The configurations a request evaluates (validated, bounded); `InvalidRequest` saying what to change."""
        return self._configs(self._space(req), req)

    def _params(self, config: sw.Config) -> SearchParams:
        p = self.served.params
        given = config.search_part()
        return replace(
            p,
            k=int(given.get("k", p.k)),
            mode=Mode(str(given["mode"])) if "mode" in given else p.mode,
            fusion=FusionMethod(str(given["fusion"])) if "fusion" in given else p.fusion,
            alpha=float(given.get("alpha", p.alpha)),
            rrf_k=int(given.get("rrf_k", p.rrf_k)),
            candidates=int(given.get("candidates", p.candidates)),
            rerank=bool(given.get("rerank", p.rerank)),
            rerank_depth=int(given.get("rerank_depth", p.rerank_depth)),
        )

    def _row(
        self, pipeline: SearchPipeline, config: sw.Config, cases: Sequence[Case], req: SweepRequest
    ) -> tuple[sw.Row, tuple[CaseResult, ...]]:
        """`config`'s row over `cases` (each question timed alone), and its case results."""
        params = self._params(config)
        ks = sorted({1, 5, 10, params.k, *k_of(req.metric)})
        timed = _Timed(PipelineRetriever(pipeline, params, req.tenant), params.k)
        run = run_set(cases, timed, set_name=req.set_name, ks=ks, unit=req.unit)
        try:
            row = sw.make_row(
                config,
                run.cases,
                quality=req.metric,
                latencies_ms=timed.latencies,
                contexts=timed.contexts,
                count=self.count_tokens,
            )
        except EvalError as exc:
            raise InvalidRequest(str(exc)) from None
        return row, run.cases

    def _pipeline(self, job_id: str, key: Mapping[str, Any], tenant: str | None, beat: Callable[[], None]) -> _Scratch:
        """The live pipeline for the live chunking, else a temporary index built from the stored documents, calling
        `beat()` after each batch it copies (the job's heartbeat and its cancel: a build can take minutes)."""
        size = int(key.get("chunk_size", self.served.chunk_size))
        overlap = int(key.get("chunk_overlap", min(self.served.chunk_overlap, size // 2 - 1)))
        if (size, overlap) == (self.served.chunk_size, self.served.chunk_overlap):
            return _Scratch(self.live, None)
        directory = self.workdir / job_id / f"size{size}-overlap{overlap}"
        # a temporary index takes about the live one's bytes, more with smaller chunks (more vectors)
        estimate = int(self.live_bytes() * max(1.0, self.served.chunk_size / size) * SCRATCH_FACTOR)
        self.reserve_space(estimate)
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        try:
            index, pipeline = self.scratch(directory, size, overlap)
            for batch in batched(self._documents(tenant), COPY_BATCH):
                index.ingest(batch)
                beat()
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        log.info("sweep %s: temporary index %s holds %d chunks", job_id, directory.name, index.chunks())
        return _Scratch(pipeline, directory)

    def _documents(self, tenant: str | None) -> Iterator[Document]:
        for entry in entries(self.index, tenant):
            yield self.index.get(entry.id).document


@dataclass
class _Scratch:
    """A pipeline for a block of rows: the live one, or a temporary index's, closed and removed at the block's end."""

    pipeline: SearchPipeline
    directory: Path | None

    def __enter__(self) -> SearchPipeline:
        return self.pipeline

    def __exit__(self, *_: object) -> None:
        if self.directory is not None:
            try:
                self.pipeline.store.close()
            finally:
                shutil.rmtree(self.directory, ignore_errors=True)


def sweep_summary(result: sw.SweepResult) -> dict[str, Any]:
    """What a listing of sweeps shows: the winner, its held-out comparison and the recommendation."""
    held = result.held_out
    return {
        "quality": result.quality,
        "configurations": len(result.rows),
        "winner": result.winner,
        "current": result.current.label(),
        "split": result.split.to_json(),
        "held_out": held.to_json() if held is not None else None,
        "recommendation": result.recommendation,
    }


def k_of(metric: str) -> tuple[int, ...]:
    """The k a metric name needs in a run (`ndcg@10` → 10; `mrr` → none)."""
    _, _, k = metric.partition("@")
    return (int(k),) if k.isdigit() else ()


def _by_index(configs: Sequence[sw.Config]) -> Iterator[tuple[Mapping[str, Any], list[sw.Config]]]:
    """Configurations grouped by the index they need, in order (the grid keeps those sharing one adjacent)."""
    groups: dict[sw.Config, list[sw.Config]] = {}
    for c in configs:
        groups.setdefault(c.index_key(), []).append(c)
    yield from groups.items()


def directory_bytes(path: Path) -> int:
    """Bytes the files under `path` take."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def token_counter(tokenizer_file: Path) -> Callable[[str], int]:
    """Tokens as the packaged model's tokenizer counts them (WordPiece; a generator's BPE counts within ~10%)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count
