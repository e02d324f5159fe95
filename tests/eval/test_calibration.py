"""The "nothing matches" threshold: the best F1 of flagging searches without an answer, reported as precision and
recall on other searches; precision weighs more by default (F0.5)."""

from __future__ import annotations

import pytest

from eval.calibration import Observation, detect, fit
from eval.errors import EvalError


def obs(*pairs: tuple[float, bool]) -> list[Observation]:
    return [Observation(s, a) for s, a in pairs]


def test_detect_counts_precision_and_recall_of_the_flag() -> None:
    # flagged below 0.5: 0.1 (no answer), 0.2 (answered), 0.4 (no answer); 0.7 has no answer and is missed
    d = detect(obs((0.1, False), (0.2, True), (0.4, False), (0.7, False), (0.9, True)), 0.5, beta=1.0)
    assert (d.flagged, d.unanswered, d.searches) == (3, 3, 5)
    assert d.precision == pytest.approx(2 / 3)
    assert d.recall == pytest.approx(2 / 3)
    assert d.f == pytest.approx(2 / 3, abs=1e-6)
    # F0.5 = 1.25 P R / (0.25 P + R)
    half = detect(obs((0.1, False), (0.2, True)), 0.5)
    assert (half.precision, half.recall) == (0.5, 1.0)
    assert half.f == pytest.approx(1.25 * 0.5 * 1.0 / (0.25 * 0.5 + 1.0), abs=1e-6)


def test_nothing_flagged_has_no_precision_and_all_answered_no_recall() -> None:
    assert detect(obs((0.5, True), (0.6, False)), 0.1).precision is None
    assert detect(obs((0.5, True), (0.6, True)), 0.9).recall is None


def test_fit_chooses_the_best_f_between_observed_signals_precision_first_by_default() -> None:
    # separable but for one answered search at 0.35, below an unanswered one at 0.4
    found = obs((0.2, False), (0.3, False), (0.35, True), (0.4, False), (0.8, True), (0.9, True))
    balanced = fit(found, beta=1.0)  # F1: flag all four (P 0.75, R 1: 0.857) over the two surest (P 1, R 2/3: 0.8)
    assert balanced.threshold == pytest.approx(0.6)
    assert (balanced.precision, balanced.recall) == (pytest.approx(0.75), 1.0)
    careful = fit(found)  # F0.5: the two surest (0.909) over all four (0.789)
    assert careful.threshold == pytest.approx(0.325)
    assert (careful.precision, careful.recall) == (1.0, pytest.approx(2 / 3))


def test_ties_go_to_the_lower_threshold() -> None:
    # every cut between 0.3 and 0.7 flags the same searches: the lowest midpoint is kept
    assert fit(obs((0.3, False), (0.7, True))).threshold == pytest.approx(0.5)
    assert fit(obs((0.3, False), (0.5, True), (0.7, True))).threshold == pytest.approx(0.4)


@pytest.mark.parametrize("answered", [True, False])
def test_one_sided_observations_teach_nothing(answered: bool) -> None:
    with pytest.raises(EvalError, match="with and without an answer"):
        fit(obs((0.2, answered), (0.8, answered)))
