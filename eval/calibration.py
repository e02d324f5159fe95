"""A "nothing matches" threshold, learned from labelled searches: a search whose answer signal (a score of its top
results) falls below the threshold is flagged as one whose top k probably holds no answer.

An observation is one search: its signal and whether a relevant result was in its top k. `fit` chooses the threshold
that best flags the searches without an answer (the highest F-beta of that flag, F0.5 by default: a search wrongly
flagged tells a caller to drop a good answer, so precision weighs more; ties go to the lower threshold, which flags
fewer), and `detect` says how a threshold does on other searches (a held-out split): precision (of the flagged, the
share that truly had no answer) and recall (of those without an answer, the share flagged).

Example:
    >>> obs = [Observation(0.9, True), Observation(0.8, True), Observation(0.3, False), Observation(0.5, False)]
    >>> d = fit(obs, beta=1.0)
    >>> d.threshold, d.precision, d.recall
    (0.65, 1.0, 1.0)
    >>> detect([Observation(0.7, False), Observation(0.6, False)], 0.65).recall
    0.5
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from eval.errors import EvalError


@dataclass(frozen=True)
class Observation:
    signal: float
    answered: bool  # a relevant result was in the search's top k


@dataclass(frozen=True)
class Detection:
    """How `signal < threshold` flags the searches whose top k held no answer."""

    threshold: float
    precision: float | None  # None: nothing was flagged
    recall: float | None  # None: every search had an answer
    beta: float  # the F-beta below weighs recall beta times as much as precision
    f: float  # F-beta of the flag
    flagged: int
    unanswered: int
    searches: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def detect(observations: Sequence[Observation], threshold: float, beta: float = 0.5) -> Detection:
    flagged = [o for o in observations if o.signal < threshold]
    unanswered = sum(not o.answered for o in observations)
    right = sum(not o.answered for o in flagged)
    precision = right / len(flagged) if flagged else None
    recall = right / unanswered if unanswered else None
    b2 = beta * beta
    f = (1 + b2) * right / (len(flagged) + b2 * unanswered) if flagged or unanswered else 0.0
    return Detection(threshold, precision, recall, beta, round(f, 6), len(flagged), unanswered, len(observations))


def fit(observations: Sequence[Observation], beta: float = 0.5) -> Detection:
    """The threshold with the best F-beta over `observations`: the midpoints between consecutive distinct signals (and
    the lowest signal itself, which flags nothing). `EvalError` when the observations cannot teach a threshold."""
    if not any(o.answered for o in observations) or all(o.answered for o in observations):
        raise EvalError(
            "a threshold needs searches with and without an answer in their top k: "
            f"{sum(o.answered for o in observations)} of {len(observations)} had one"
        )
    signals = sorted({o.signal for o in observations})
    candidates = [signals[0]] + [round((a + b) / 2, 6) for a, b in itertools.pairwise(signals)]
    return max((detect(observations, t, beta) for t in candidates), key=lambda d: (d.f, -d.threshold))
