"""What a search response says about its hits: below the learned threshold, nothing matches; and when it cannot tell,
why."""

from __future__ import annotations

from service.domain import Chunk, DocStatus, Hit, StageScore
from service.retrieval.no_answer import Calibration, answer_signal, assess

LEARNED = Calibration(threshold=0.5, model="m", k=5)


def hit(dense: float | None, keyword: float = 1.0) -> Hit:
    stages = {"keyword": StageScore(1, keyword)}
    if dense is not None:
        stages["dense"] = StageScore(None, dense)
    return Hit(Chunk("a#0", "a", 0, "A", (), "x", 0, 1), 1.0, stages, DocStatus.CURRENT, None, (), None, {})


def test_the_signal_is_the_best_dense_score_among_the_hits() -> None:
    assert answer_signal([hit(0.2), hit(0.7), hit(None)]) == 0.7
    assert answer_signal([hit(None)]) is None
    assert answer_signal([]) is None


def test_below_the_threshold_nothing_matches_above_it_something_does() -> None:
    low, high = assess([hit(0.3)], LEARNED, "m"), assess([hit(0.3), hit(0.6)], LEARNED, "m")
    assert (low["nothing_matches"], low["threshold"], low["k"], low["why"]) == (True, 0.5, 5, None)
    assert high["nothing_matches"] is False
    assert assess([], LEARNED, "m")["nothing_matches"] is True


def test_it_cannot_tell_without_a_threshold_for_this_model_or_a_dense_score() -> None:
    unlearned = assess([hit(0.9)], None, "m")
    assert unlearned["nothing_matches"] is None
    assert "no threshold learned yet" in unlearned["why"]
    assert unlearned["score"] == 0.9  # the signal is shown all the same
    other = assess([hit(0.1)], LEARNED, "another-model")
    assert other["nothing_matches"] is None
    assert other["threshold"] is None
    assert "learned with m" in other["why"]
    keyword_only = assess([hit(None)], LEARNED, "m")
    assert keyword_only["nothing_matches"] is None
    assert "keyword-only" in keyword_only["why"]
