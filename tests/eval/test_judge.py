"""LLM answer grading, the pure half: items, the judge's prompt, reading its answers, aggregation, the report."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval.errors import EvalError
from eval.judge import (
    CRITERIA,
    JUDGE_PROMPT_VERSION,
    JUDGE_SCHEMA,
    AnswerItem,
    AnswerReport,
    CriterionGrade,
    ItemGrade,
    Judgement,
    aggregate,
    judge_messages,
    parse_items,
    parse_judgement,
)


def sample(*scores: int, reason: str = "") -> dict[str, object]:
    """A judge answer with these 1..5 scores, one per criterion in order."""
    return {c: {"score": s, "reason": reason or f"{c} {s}"} for c, s in zip(CRITERIA, scores, strict=True)}


def judged(*scores: int) -> Judgement:
    j = parse_judgement(sample(*scores))
    assert j is not None
    return j


# --- items -----------------------------------------------------------------------------------------------------------


def test_parse_items_reads_every_key() -> None:
    text = "\n".join(
        [
            json.dumps(
                {
                    "id": "a-1",
                    "question": "refund window?",
                    "answer": "30 days",
                    "contexts": ["Refunds within 30 days."],
                    "reference": ["30 days"],
                    "category": "billing",
                }
            ),
            "",
            json.dumps({"id": 2, "question": "q", "answer": ""}),
        ]
    )
    first, second = parse_items(text, "answers.jsonl")
    assert first == AnswerItem(
        "a-1", "refund window?", "30 days", ("Refunds within 30 days.",), ("30 days",), "billing"
    )
    assert second == AnswerItem("2", "q", "", None, (), "uncategorized")
    assert parse_items(json.dumps(first.to_json()))[0] == first


def test_parse_items_lists_every_bad_line() -> None:
    lines = [
        '{"id": "a", "question": "q", "answer": "x", "score": 3}',
        "not json",
        '{"id": "b", "question": "q"}',
        '{"id": "c", "question": "q", "answer": "x", "contexts": "one passage"}',
        '{"id": "d", "question": "q", "answer": "x", "contexts": []}',
        '{"id": "e", "question": " ", "answer": "x"}',
        '{"id": "f", "question": "q", "answer": "x"}',
        '{"id": "f", "question": "q", "answer": "y"}',
        '{"id": "g", "question": "q", "answer": 3}',
    ]
    with pytest.raises(EvalError) as err:
        parse_items("\n".join(lines), "x.jsonl")
    message = str(err.value)
    assert message.startswith("8 bad line(s): ")
    for expected in (
        "x.jsonl:1: unknown key(s) ['score']",
        "x.jsonl:2: not valid JSON",
        "x.jsonl:3: missing 'answer'",
        "x.jsonl:4: contexts must be a list of strings",
        "x.jsonl:5: contexts is empty",
        "x.jsonl:6: question is empty",
        "x.jsonl:8: duplicate id 'f' (first on line 7)",
        "x.jsonl:9: answer must be a string",
    ):
        assert expected in message


def test_an_empty_file_is_an_error() -> None:
    with pytest.raises(EvalError, match="x: no items"):
        parse_items("\n\n", "x")


# --- the prompt ------------------------------------------------------------------------------------------------------


def test_judge_messages_grade_all_criteria_in_one_call() -> None:
    item = AnswerItem(
        "a", "refund window?", "30 days", ("Refunds within 30 days.", "Annual plans differ."), ("30 days",)
    )
    system, user = judge_messages(item)
    assert (system["role"], user["role"]) == ("system", "user")
    for criterion in CRITERIA:
        assert criterion in system["content"]
    assert "1 (worst) to 5 (best)" in system["content"]
    assert "one-sentence reason" in system["content"]
    assert "[1] Refunds within 30 days." in user["content"]
    assert "[2] Annual plans differ." in user["content"]
    assert "Reference evidence" in user["content"]
    assert "agree with the reference evidence" in system["content"]
    assert JUDGE_PROMPT_VERSION == "judge-v1"


def test_without_reference_correctness_is_judged_against_the_contexts() -> None:
    system, user = judge_messages(AnswerItem("a", "q", "x", ("passage",)))
    assert "no reference evidence was given" in system["content"]
    assert "judge correctness against the context passages" in user["content"]


def test_judge_messages_need_contexts() -> None:
    with pytest.raises(EvalError, match="'a' has no contexts"):
        judge_messages(AnswerItem("a", "q", "x"))


def test_the_schema_requires_every_criterion() -> None:
    assert JUDGE_SCHEMA["required"] == list(CRITERIA)
    for criterion in CRITERIA:
        score = JUDGE_SCHEMA["properties"][criterion]["properties"]["score"]
        assert (score["minimum"], score["maximum"]) == (1, 5)


# --- reading the judge -----------------------------------------------------------------------------------------------


def test_scores_are_normalised() -> None:
    j = judged(1, 3, 5)
    assert j.scores == {"faithfulness": 0.0, "correctness": 0.5, "completeness": 1.0}
    assert j.reasons["correctness"] == "correctness 3"


@pytest.mark.parametrize(
    ("data", "readable"),
    [
        (sample(4, 4, 4), True),
        ({c: {"score": "4", "reason": "r"} for c in CRITERIA}, True),  # numeric strings are read
        ({c: {"score": 4.0} for c in CRITERIA}, True),  # an integral float; no reason: ""
        (dict.fromkeys(CRITERIA, 4), True),  # bare scores
        ("```json\n" + json.dumps(sample(4, 4, 4)) + "\n```", True),  # a fenced JSON text
        ("Here is my grading: " + json.dumps(sample(2, 3, 4)), True),
        ({"faithfulness": 4, "correctness": 4}, False),  # a criterion missing
        (sample(4, 0, 4), False),  # below the scale
        (sample(4, 6, 4), False),  # above the scale
        (sample(4, 4, 4) | {"completeness": {"score": 3.5}}, False),  # not a whole number
        (sample(4, 4, 4) | {"completeness": {"score": "four"}}, False),
        (sample(4, 4, 4) | {"completeness": {"score": True}}, False),
        (sample(4, 4, 4) | {"completeness": {"score": None}}, False),
        ("no JSON here", False),
        ("{broken", False),
        ([4, 4, 4], False),
        (None, False),
    ],
)
def test_parse_judgement_tolerance(data: object, readable: bool) -> None:
    assert (parse_judgement(data) is not None) == readable


SCORES = st.one_of(st.integers(-3, 9), st.sampled_from(["4", " 5", "3.0", "x", "", "7", "2.5"]), st.none())


@given(
    st.dictionaries(
        st.sampled_from([*CRITERIA, "other"]),
        st.one_of(SCORES, st.fixed_dictionaries({"score": SCORES, "reason": st.sampled_from(["r", 3])})),
    )
)
def test_a_readable_judgement_has_every_criterion_on_0_to_1(data: dict[str, object]) -> None:
    j = parse_judgement(data)
    if j is not None:
        assert set(j.scores) == set(CRITERIA)
        assert all(0.0 <= v <= 1.0 and (v * 4).is_integer() for v in j.scores.values())


# --- aggregation -----------------------------------------------------------------------------------------------------


def test_median_and_spread_with_an_unreadable_sample() -> None:
    samples = [judged(5, 2, 4), None, judged(3, 2, 4), judged(4, 5, 4)]
    g = aggregate(samples, item_id="a-1", category="billing")
    assert (g.id, g.category, g.used, g.unreadable, g.ungraded) == ("a-1", "billing", 3, 1, False)
    assert g.criteria["faithfulness"] == CriterionGrade(0.75, 0.5, "faithfulness 4")  # 5, 3, 4: median 4
    assert g.criteria["correctness"].median == 0.25
    assert g.criteria["correctness"].spread == 0.75
    assert g.criteria["completeness"] == CriterionGrade(0.75, 0.0, "completeness 4")


def test_an_even_number_of_samples_takes_the_middle_mean_and_the_closest_reason() -> None:
    g = aggregate([judged(1, 1, 1), judged(2, 2, 2), judged(5, 5, 5), judged(5, 5, 5)])
    assert g.criteria["faithfulness"].median == pytest.approx((0.25 + 1.0) / 2)
    # 0.625 is 0.375 from both 0.25 and 1.0: the first sample that close
    assert g.criteria["faithfulness"].reason == "faithfulness 2"


def test_an_item_with_no_readable_sample_is_ungraded_not_zero() -> None:
    g = aggregate([None, None, None], item_id="a-2")
    assert g.ungraded
    assert g.criteria == {}
    assert (g.used, g.unreadable) == (0, 3)
    assert aggregate([]).ungraded


@given(st.lists(st.one_of(st.none(), st.tuples(*[st.integers(1, 5)] * 3)), max_size=7))
def test_aggregate_properties(raw: list[tuple[int, int, int] | None]) -> None:
    samples = [None if s is None else judged(*s) for s in raw]
    g = aggregate(samples)
    readable = [s for s in samples if s is not None]
    assert (g.used, g.unreadable) == (len(readable), len(samples) - len(readable))
    assert g.ungraded == (not readable)
    for criterion, grade in g.criteria.items():
        values = [s.scores[criterion] for s in readable]
        assert min(values) <= grade.median <= max(values)
        assert grade.spread == max(values) - min(values)


# --- the report ------------------------------------------------------------------------------------------------------


def report() -> AnswerReport:
    grades = [
        aggregate([judged(5, 5, 5), judged(5, 4, 5)], item_id="a1", category="billing"),
        aggregate([judged(1, 1, 3), judged(3, 1, 3)], item_id="a2", category="billing"),
        aggregate([judged(2, 2, 2), judged(2, 2, 2)], item_id="a3", category="hr"),
        aggregate([None, None], item_id="a4", category="hr"),
        aggregate([None, None], item_id="a5", category="legal"),
    ]
    return AnswerReport.build(grades, judge_model="judge-model-x", samples_per_item=2, set_name="handbook")


def test_report_means_categories_and_counts() -> None:
    r = report()
    assert (r.graded, r.ungraded) == (3, 2)
    assert r.judge_model == "judge-model-x"
    assert r.prompt_version == JUDGE_PROMPT_VERSION
    assert r.samples_per_item == 2
    # faithfulness medians: a1 1.0, a2 0.25, a3 0.25 (ungraded items count nowhere)
    assert r.overall["faithfulness"] == pytest.approx(0.5)
    assert r.spread["faithfulness"] == pytest.approx((0.0 + 0.5 + 0.0) / 3)
    names = [c.name for c in r.by_category]
    assert names == ["hr", "billing", "legal"]  # worst first; a category nothing graded last
    hr, billing, legal = r.by_category
    assert (hr.graded, hr.ungraded) == (1, 1)
    assert hr.means["correctness"] == 0.25
    assert billing.means["correctness"] == pytest.approx((0.875 + 0.0) / 2)
    assert (legal.graded, legal.ungraded, legal.means) == (0, 1, {})


def test_all_ungraded_has_no_means() -> None:
    r = AnswerReport.build([aggregate([None])], judge_model="m", samples_per_item=1)
    assert (r.overall, r.spread, r.graded, r.ungraded) == ({}, {}, 0, 1)
    assert AnswerReport.from_json(r.to_json()) == r


def test_report_round_trips() -> None:
    r = report()
    assert AnswerReport.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert ItemGrade.from_json(r.items[0].to_json()) == r.items[0]
    with pytest.raises(EvalError, match="not a stored answer report"):
        AnswerReport.from_json({"judge_model": "m"})


def test_report_needs_items() -> None:
    with pytest.raises(EvalError, match="no graded items"):
        AnswerReport.build([], judge_model="m", samples_per_item=1)
    with pytest.raises(EvalError, match="samples_per_item"):
        AnswerReport.build([aggregate([None])], judge_model="m", samples_per_item=0)


def test_retrieval_note() -> None:
    r = report()
    assert r.retrieval_note(0.62) == (
        "fix retrieval first: recall@10 of set handbook is 0.62, below 0.8; "
        "answer grades measure the generator only once the right passages reach it"
    )
    assert r.retrieval_note(0.8) is None
    assert r.retrieval_note(None) is None
    assert r.retrieval_note(0.85, threshold=0.9) is not None
