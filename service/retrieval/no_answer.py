"""The "nothing matches" signal returned with every search: how close the best shown hit is in meaning (its dense
score, the cosine similarity of the query's and the chunk's embeddings), against a threshold learned on the labelled
sets (`service.evaluation.calibration`). Below it, the top k probably holds no answer: a caller can say "I don't
know" instead of answering from a weak passage.

The threshold belongs to the embedding model it was learned with: under another model the similarities mean
something else, so the assessment says it is not calibrated rather than applying it.

Example:
    >>> from service.domain import Chunk, DocStatus, Hit, StageScore
    >>> hit = Hit(Chunk("a#0", "a", 0, "A", (), "x", 0, 1), 1.0, {"dense": StageScore(1, 0.31)}, DocStatus.CURRENT,
    ...           None, (), None, {})
    >>> assess([hit], Calibration(threshold=0.42, model="m", k=5), "m")["nothing_matches"]
    True
    >>> assess([hit], Calibration(threshold=0.42, model="m", k=5), "other")["nothing_matches"] is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.domain import Hit

SIGNAL = "dense_top"  # the signal's name in responses and calibration records


@dataclass(frozen=True)
class Calibration:
    threshold: float
    model: str  # the embedding model whose similarities it was learned on
    k: int  # the top k it judged ("a relevant result in the top k")
    learned_at: str = ""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Calibration:
        return cls(float(record["threshold"]), str(record["model"]), int(record["k"]), str(record.get("at", "")))


def answer_signal(hits: Sequence[Hit]) -> float | None:
    """The best dense score among `hits`; None when none has one (a keyword-only search, no hits)."""
    scores = [h.stages["dense"].score for h in hits if "dense" in h.stages]
    return max(scores) if scores else None


def assess(hits: Sequence[Hit], calibration: Calibration | None, model: str) -> dict[str, Any]:
    """What a search response says about its hits: the signal's score, the threshold and the k it was learned for,
    and `nothing_matches` (True: below the threshold, or no hits; None: cannot tell, and `why` says why)."""
    signal = answer_signal(hits)
    out: dict[str, Any] = {"signal": SIGNAL, "score": signal, "threshold": None, "k": None, "nothing_matches": None}
    why = None
    if calibration is None:
        why = "no threshold learned yet: POST /eval/no-answer/calibrate (plumbline eval calibrate)"
    elif calibration.model != model:
        why = f"the threshold was learned with {calibration.model}; this index's model is {model}: learn it again"
    else:
        out.update(threshold=calibration.threshold, k=calibration.k)
        if not hits:
            out["nothing_matches"] = True
        elif signal is None:
            why = "no hit has a dense score (a keyword-only search)"
        else:
            out["nothing_matches"] = signal < calibration.threshold
    out["why"] = why
    return out
