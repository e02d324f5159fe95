"""Learning from labels, the pure half: what is trained on and what judges it, what each case teaches (its answering
passage and the hard negatives above it), and when a tuned model may not replace the served one."""

from __future__ import annotations

import pytest

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.matching import Retrieved
from eval.sweep import Comparison
from eval.tuning import mine, promotion_refusal, training_split


def case(case_id: str, *, source: str = "human", split: str | None = None, **label: str) -> Case:
    return Case(case_id, "q", (Label(doc_id="d", **label),), source=source, split=split)


def test_incidents_and_synthetic_cases_train_and_only_held_out_human_cases_judge() -> None:
    cases = [
        case("h1", split="tune"),
        case("h2", split="test"),
        case("h3", split="tune"),
        case("h4", split="test"),
        case("incident-1", source="incident"),
        case("incident-2", source="incident", split="test"),  # marked test: never trained on
        case("synth-1", source="synthetic"),
        case("synth-2", source="synthetic", split="test"),
    ]
    split = training_split(cases, seed=0, test_share=0.5)
    assert [c.id for c in split.train] == ["h1", "h3", "incident-1", "synth-1"]
    assert [c.id for c in split.held_out] == ["h2", "h4"]  # an LLM's question or an incident never judges
    assert split.origin == "case"
    assert split.counts() == {"held_out": 2, "tune split": 2, "incident": 1, "synthetic": 1}


def test_unmarked_human_cases_are_split_by_the_seeded_hash() -> None:
    cases = [case(f"h{i}") for i in range(40)]
    first, again = (training_split(cases, seed=7, test_share=0.25) for _ in range(2))
    assert first == again
    assert first.origin == "hash"
    assert 0 < len(first.held_out) < 20
    assert len(first.train) + len(first.held_out) == 40
    assert training_split(cases, seed=8, test_share=0.25).held_out != first.held_out
    with pytest.raises(EvalError):
        training_split([case("only", split="test")], seed=0, test_share=0.5)  # nothing left to train on


RANKED = [
    Retrieved("x#0", "x", "the parking garage"),
    Retrieved("d#0", "d", "an introduction"),
    Retrieved("y#0", "y", "the canteen menu"),
    Retrieved("d#1", "d", "the answer is 25 days"),
    Retrieved("z#0", "z", "the printer queue"),
]


def test_the_positive_is_the_first_answering_passage_and_the_negatives_rank_above_or_near_it() -> None:
    precise = mine(case("c", evidence="25 days"), RANKED, [])
    assert precise.positive is not None
    assert precise.positive.chunk_id == "d#1"
    assert not precise.missed
    # the evidence says which passage answers, so the labelled document's other chunk is a negative too
    assert [n.chunk_id for n in precise.negatives] == ["x#0", "d#0", "y#0"]
    assert [n.chunk_id for n in mine(case("c", evidence="25 days"), RANKED, [], negatives=1).negatives] == ["x#0"]
    # a document-level label: any of its chunks may answer, so none of them is a negative
    whole = mine(case("c"), RANKED, [])
    assert whole.positive is not None
    assert whole.positive.chunk_id == "d#0"
    assert [n.chunk_id for n in whole.negatives] == ["x#0", "y#0", "z#0"]


def test_a_case_the_search_missed_teaches_its_labelled_passage() -> None:
    ranked = [r for r in RANKED if r.doc_id != "d"]
    labelled = [Retrieved("d#0", "d", "an introduction"), Retrieved("d#1", "d", "the answer is 25 days")]
    missed = mine(case("c", evidence="25 days"), ranked, labelled)
    assert missed.missed
    assert missed.positive is not None
    assert missed.positive.chunk_id == "d#1"
    assert [n.chunk_id for n in missed.negatives] == ["x#0", "y#0", "z#0"]
    nowhere = mine(case("c", evidence="forty"), ranked, labelled)
    assert nowhere.missed
    assert nowhere.positive is None


def test_a_promotion_needs_a_held_out_comparison_that_is_not_worse_and_gains_what_was_asked() -> None:
    better = Comparison(0.72, 0.70, 0.02, 0.04, True, 40)
    assert promotion_refusal(better, min_gain=0.0) is None
    assert promotion_refusal(better, min_gain=0.01) is None
    assert promotion_refusal(better, min_gain=0.05) == (
        "the tuned model gains +0.020 on the held-out cases, under the 0.05 asked"
    )
    worse = Comparison(0.69, 0.70, -0.01, None, False, 40)
    assert promotion_refusal(worse, min_gain=0.0) == (
        "the tuned model is worse on the held-out cases (0.690 against 0.700 served, p=n/a)"
    )
    assert promotion_refusal(None, min_gain=0.0) == "the tuned model was not compared on held-out cases"
