"""Learning from labels: `plumbline tune` and `POST /eval/tunes`.

A tune (1) splits each named set (`eval.tuning.training_split`: the tune split, accepted incidents and synthetic
cases are trained on; held-out human cases judge), (2) searches every training question with the served
configuration and mines what it teaches (`eval.tuning.mine`: the answering passage, and the passages the search put
first that do not answer: the service's own misses), (3) fine-tunes the served embedding model on them
(`service.retrieval.finetune`) into a new model version, (4) re-embeds the corpus into a new index generation beside
the live one (`service.index.generations`; the disk checked first; the live index keeps serving, and keeps taking
writes), and (5) replays the held-out cases of each set on both, compared case by case with the paired randomisation
test. It never switches anything: promotion (`Work.promote_tune`) gates the new generation like any run, and only a
pass switches to it, copying the writes made since; `rollback` returns to the previous generation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eval import sweep as sw
from eval import tuning as tn
from eval.cases import Case
from eval.errors import EvalError
from eval.matching import Retrieved
from eval.metrics import metric_names
from eval.runner import CaseResult, Query, run_set
from eval.storage import check_name
from service.errors import InvalidRequest, NotFound
from service.evaluation.retriever import PipelineRetriever
from service.evaluation.sweeps import k_of
from service.index.generations import Generation, Generations, sync
from service.index.index import Index
from service.infra.files import write_atomic
from service.retrieval.finetune import Example, TrainConfig, TrainStats
from service.retrieval.pipeline import SearchParams, SearchPipeline

log = logging.getLogger("plumbline")

COPIED = "copied.json"  # in a candidate generation's folder: the live documents' generations when it was built
MINE_BATCH = 32
MODEL_BYTES = 200 * 2**20  # a tuned MiniLM's folder is about 90 MB; twice that, to be safe
INDEX_FACTOR = 1.2  # a generation's disk estimate: the live index's bytes, times this
PHASES = ("mine", "train", "re-embed", "compare")
MAX_METRIC_K = 100


@dataclass(frozen=True)
class TuneRequest:
    """What a tune is asked for: the sets it learns from and is judged on, how the model is trained, and how much a
    tuned model must gain on the held-out cases to be promoted (the gate decides too)."""

    sets: tuple[str, ...]
    epochs: int = TrainConfig.epochs
    learning_rate: float = TrainConfig.learning_rate
    batch_size: int = TrainConfig.batch_size
    negatives: int = 3
    depth: int = 30
    seed: int = TrainConfig.seed
    test_share: float = 0.5
    metric: str = "ndcg@10"
    min_gain: float = 0.0

    def __post_init__(self) -> None:
        if not self.sets:
            raise InvalidRequest("name at least one set to learn from")
        for name in self.sets:
            check_name(name, "set")
        ks = k_of(self.metric)
        if self.metric not in metric_names([*ks, 10]) or any(not 1 <= k <= MAX_METRIC_K for k in ks):
            raise InvalidRequest(
                f"metric must be hit, recall, precision, mrr or ndcg at a k from 1 to {MAX_METRIC_K} (e.g. ndcg@10), "
                f"or mrr; got {self.metric!r}"
            )

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            epochs=self.epochs, learning_rate=self.learning_rate, batch_size=self.batch_size, seed=self.seed
        )

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["sets"] = list(self.sets)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TuneRequest:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in obj.items() if k in fields}, "sets": tuple(obj["sets"])})


@dataclass(frozen=True)
class Candidate:
    """What a tune needs of the runtime: the served generation's pipeline and index, the served search parameters,
    the generations, the served model's folder, where models train, how to open a generation, and the trainer."""

    live: SearchPipeline
    index: Index
    served: SearchParams
    generations: Generations
    base_model: str  # the served model's folder (or name)
    device: str
    query_prefix: str
    document_prefix: str
    open: Callable[[Generation], tuple[Index, SearchPipeline]]
    train: Callable[..., TrainStats]  # `service.retrieval.finetune.fine_tune`, or a test's fake
    reserve_space: Callable[[int], None]
    live_bytes: Callable[[], int]


class Tuner:
    """Runs tunes (see the module docstring)."""

    def __init__(self, parts: Candidate) -> None:
        self.parts = parts

    def run(
        self,
        job_id: str,
        req: TuneRequest,
        cases: Mapping[str, Sequence[Case]],
        progress: Callable[[int, int], None],
    ) -> dict[str, Any]:
        """The tune's record: the split, what was mined, the training, the new generation, the held-out comparison
        per set and pooled, and whether it may be promoted."""
        p = self.parts
        splits = {name: self._split(name, cs, req) for name, cs in cases.items()}
        train = [c for s in splits.values() for c in s.train]
        beat = lambda: progress(0, len(PHASES))  # noqa: E731 - the job's heartbeat and its cancel
        examples, mined = self._mine(train, req, beat)
        if not examples:
            raise InvalidRequest(
                "no training case has an answering passage in the index: label cases whose documents are indexed"
            )
        gen = p.generations.new(_name(job_id), job_id)
        model_dir = p.generations.tuned_model_dir(gen.name)
        p.generations.prune({gen.name})  # an earlier candidate never promoted goes
        p.reserve_space(MODEL_BYTES + int(p.live_bytes() * INDEX_FACTOR))
        try:
            progress(1, len(PHASES))
            stats = p.train(
                p.base_model,
                examples,
                model_dir,
                req.train_config(),
                device=p.device,
                query_prefix=p.query_prefix,
                document_prefix=p.document_prefix,
                progress=lambda _step, _steps: progress(1, len(PHASES)),
            )
            progress(2, len(PHASES))
            index, pipeline = p.open(gen)
            try:
                known, copied = sync(p.index, index, None, beat)
                record_copied(p.generations, gen, known)
                progress(3, len(PHASES))
                results = {
                    name: self._compare(name, s.held_out, pipeline, req) for name, s in splits.items() if s.held_out
                }
                sizes = {"documents": index.documents(), "chunks": index.chunks()}
            finally:
                pipeline.store.close()
        except BaseException:
            shutil.rmtree(model_dir, ignore_errors=True)
            shutil.rmtree(p.generations.index_path(gen).parent, ignore_errors=True)
            raise
        comparisons, pooled = _held_out(results, req)
        refusal = tn.promotion_refusal(pooled, min_gain=req.min_gain)
        progress(len(PHASES), len(PHASES))
        return {
            "generation": gen.to_json(),
            "base_model": p.live.embedder.name,
            "split": {name: {"origin": s.origin, **s.counts()} for name, s in splits.items()},
            "mined": mined,
            "training": stats.to_json(),
            "index": {**sizes, **copied},
            "quality": req.metric,
            "held_out": {
                "pooled": pooled.to_json() if pooled else None,
                "by_set": {name: c.to_json() for name, c in comparisons.items()},
            },
            "promotable": refusal is None,
            "refusal": refusal,
        }

    @staticmethod
    def _split(name: str, cases: Sequence[Case], req: TuneRequest) -> tn.Split:
        try:
            return tn.training_split(cases, seed=req.seed, test_share=req.test_share)
        except EvalError as exc:
            raise InvalidRequest(f"set {name!r}: {exc}") from None

    def _mine(
        self, cases: Sequence[Case], req: TuneRequest, beat: Callable[[], None]
    ) -> tuple[list[Example], dict[str, int]]:
        """One example per training case that has an answering passage: the question, that passage, and the passages
        ranked above it that do not answer it, as the models see them."""
        p = self.parts
        embedded: dict[str, str] = {}
        retriever = PipelineRetriever(p.live, p.served, embedded=embedded)
        examples: list[Example] = []
        counts = {"cases": len(cases), "examples": 0, "missed": 0, "no_passage": 0, "no_negative": 0}
        for start in range(0, len(cases), MINE_BATCH):
            beat()
            batch = cases[start : start + MINE_BATCH]
            ranked = retriever.retrieve([Query(c.question, req.depth, c.filters) for c in batch])
            for case, results in zip(batch, ranked, strict=True):
                m = tn.mine(case, results, self._labelled(case, embedded), negatives=req.negatives)
                counts["missed"] += m.missed
                if m.positive is None:
                    counts["no_passage"] += 1
                    continue
                counts["no_negative"] += not m.negatives
                negatives = tuple(embedded[n.chunk_id] for n in m.negatives)
                examples.append(Example(case.question, embedded[m.positive.chunk_id], negatives))
        counts["examples"] = len(examples)
        return examples, counts

    def _labelled(self, case: Case, embedded: dict[str, str]) -> list[Retrieved]:
        """The chunks of the case's labelled documents (those the index holds), their model texts kept in `embedded`."""
        out = []
        for doc_id in dict.fromkeys(label.doc_id for label in case.relevant if label.doc_id is not None):
            try:
                stored = self.parts.index.get(doc_id)
            except NotFound:
                continue
            for chunk in stored.chunks:
                embedded[chunk.chunk_id] = chunk.embed_text
                out.append(Retrieved(chunk.chunk_id, chunk.doc_id, chunk.text))
        return out

    def _compare(
        self, name: str, cases: Sequence[Case], candidate: SearchPipeline, req: TuneRequest
    ) -> tuple[tuple[CaseResult, ...], tuple[CaseResult, ...]]:
        """The held-out cases' results on the tuned generation and on the served one."""
        ks = sorted({1, 5, 10, *k_of(req.metric)})

        def run(pipeline: SearchPipeline) -> tuple[CaseResult, ...]:
            retriever = PipelineRetriever(pipeline, self.parts.served)
            return run_set(cases, retriever, set_name=name, ks=ks, unit="chunk").cases

        return run(candidate), run(self.parts.live)


def _held_out(
    results: Mapping[str, tuple[Sequence[CaseResult], Sequence[CaseResult]]], req: TuneRequest
) -> tuple[dict[str, sw.Comparison], sw.Comparison | None]:
    """Each set's held-out comparison, and every set's cases in one (case ids prefixed by their set)."""
    try:
        by_set = {
            name: sw.held_out(tuned, served, quality=req.metric, seed=req.seed)
            for name, (tuned, served) in results.items()
        }
        if not results:
            return by_set, None
        tuned = [c for name, (mine, _) in results.items() for c in _renamed(name, mine)]
        served = [c for name, (_, theirs) in results.items() for c in _renamed(name, theirs)]
        return by_set, sw.held_out(tuned, served, quality=req.metric, seed=req.seed)
    except (EvalError, KeyError) as exc:
        raise InvalidRequest(f"cannot compare on {req.metric!r}: {exc}") from None


def _renamed(set_name: str, cases: Sequence[CaseResult]) -> list[CaseResult]:
    return [replace(c, case_id=f"{set_name}/{c.case_id}") for c in cases]


def _name(job_id: str) -> str:
    """A generation's name from its tune's id (letters, digits and dashes: a folder name and part of a model name)."""
    return "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in job_id)[:64]


def tune_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a listing of tunes shows."""
    pooled = record["held_out"]["pooled"]
    return {
        "generation": record["generation"]["name"],
        "examples": record["mined"]["examples"],
        "held_out": pooled,
        "promotable": record["promotable"],
        "refusal": record["refusal"],
    }


def dropped(record: Mapping[str, Any], generations: Generations) -> bool:
    """Whether the tune's generation is gone from disk (pruned by a later tune, or removed)."""
    gen = Generation.of(record["generation"])
    return not generations.index_path(gen).exists()


def record_copied(generations: Generations, gen: Generation, known: Mapping[str, int]) -> None:
    """Record the live documents' generations candidate `gen` now holds (`sync`'s first result)."""
    write_atomic(generations.index_path(gen).parent / COPIED, json.dumps(dict(known)))


def copied_generations(generations: Generations, gen: Generation) -> dict[str, int] | None:
    """The live documents' generations a candidate was built from (what a promotion copies on top of), if recorded
    (None: every document is checked)."""
    try:
        recorded = json.loads((generations.index_path(gen).parent / COPIED).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return {str(k): int(v) for k, v in recorded.items()}
