"""Learning the "nothing matches" threshold (`service.retrieval.no_answer`) from the labelled sets:
`POST /eval/no-answer/calibrate`, `plumbline eval calibrate`.

Every case of the named sets is searched twice with the served configuration: as asked (its top k holds an answer
when a relevant result is there), and with its labelled documents left out (then nothing in the index answers it:
the search stands in for a question the corpus cannot answer, with the same wording and topic, which is the hard
kind). The threshold is fit on the tune split of the cases (their own `split`, else a seeded hash, as sweeps split
them) and its precision and recall are reported on the held-out split as well. A case labelled by chunk id alone
has no document to leave out: it gives only the as-asked search.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from eval.calibration import Observation, detect, fit
from eval.cases import Case
from eval.runner import run_set
from eval.sweep import split_cases
from service.evaluation.retriever import PipelineRetriever
from service.retrieval.no_answer import SIGNAL
from service.retrieval.pipeline import SearchParams, SearchPipeline

KEY = "no_answer_calibration"  # the state store's meta key: the record `calibrate` returns


@dataclass(frozen=True)
class CalibrationRequest:
    sets: tuple[str, ...]
    k: int = 5
    seed: int = 0
    beta: float = 0.5  # the F-beta the threshold maximises: below 1, precision weighs more


def without_answers(case: Case) -> Case | None:
    """`case` with its labelled documents left out of the search; None when a label names no document."""
    docs = [label.doc_id for label in case.positive]
    if not docs or None in docs:
        return None
    excluded = [*case.filters.get("exclude_doc_ids", []), *docs]
    return replace(case, id=f"{case.id}/without", filters={**case.filters, "exclude_doc_ids": excluded})


def observe(pipeline: SearchPipeline, base: SearchParams, cases: Sequence[Case], k: int) -> list[Observation]:
    """One observation per case searched with `base` (k results, chunk-level labels); a search without a dense score
    (keyword-only) gives none."""
    if not cases:
        return []
    signals: list[float | None] = []
    retriever = PipelineRetriever(pipeline, base, signals=signals)
    run = run_set(cases, retriever, set_name="no-answer calibration", ks=(k,))
    answered = [c.metrics[f"hit@{k}"] > 0 for c in run.cases]
    return [Observation(s, a) for s, a in zip(signals, answered, strict=True) if s is not None]


def calibrate(
    pipeline: SearchPipeline, base: SearchParams, cases: Sequence[Case], req: CalibrationRequest
) -> dict[str, Any]:
    """The threshold learned on the tune split of `cases`, and how it flags searches on both splits."""
    tune, test, how = split_cases(cases, seed=req.seed)
    found: dict[str, list[Observation]] = {}
    for name, part in (("tune", tune), ("test", test)):
        negatives = [n for c in part if (n := without_answers(c)) is not None]
        found[name] = observe(pipeline, base, [*part, *negatives], req.k)
    learned = fit(found["tune"], req.beta)
    return {
        "signal": SIGNAL,
        "threshold": learned.threshold,
        "model": pipeline.embedder.name,
        "k": req.k,
        "sets": list(req.sets),
        "seed": req.seed,
        "beta": req.beta,
        "split": how,
        "cases": {"tune": len(tune), "test": len(test)},
        "tune": learned.to_json(),
        "test": detect(found["test"], learned.threshold, req.beta).to_json(),
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
