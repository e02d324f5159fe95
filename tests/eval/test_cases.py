"""Labelled cases: validation, the JSON Lines format with line-numbered errors, and the shipped set."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval.cases import MAX_ERRORS_SHOWN, Case, Label, dump_jsonl, fingerprint, load_cases, parse_jsonl
from eval.errors import EvalError
from eval.matching import normalize
from eval.storage import PACKAGE_DIR

GOOD = {"id": "c-1", "question": "what is the refund window", "relevant": [{"doc_id": "billing/refunds"}]}


def line(**changes: object) -> str:
    obj = {**GOOD, **changes}
    return json.dumps({k: v for k, v in obj.items() if v is not ...})


# -- Label ---------------------------------------------------------------------------------------


def test_label_kinds_and_documents() -> None:
    assert Label(doc_id="billing/refunds").kind == "doc"
    assert Label(doc_id="billing/refunds", evidence="30 days").kind == "evidence"
    assert Label(chunk_id="billing/refunds#3").kind == "chunk"
    assert Label(chunk_id="billing/refunds#3").document == "billing/refunds"
    assert Label(chunk_id="faq#2024#7").document == "faq#2024"  # only the last '#' separates the chunk number
    assert Label(chunk_id="no-hash").document == "no-hash"
    assert Label(doc_id="d", evidence="x").document == "d"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs doc_id"),
        ({"evidence": "30 days"}, "needs doc_id"),
        ({"chunk_id": "a#1", "doc_id": "a"}, "only chunk_id"),
        ({"chunk_id": "a#1", "evidence": "x"}, "only chunk_id"),
        ({"doc_id": "a", "evidence": "  \n"}, "evidence is empty"),
        ({"doc_id": "a", "evidence": 30}, "evidence"),
        ({"doc_id": ""}, "doc_id must be a non-empty string"),
        ({"doc_id": 7}, "doc_id must be a non-empty string"),
        ({"chunk_id": ""}, "chunk_id must be a non-empty string"),
        ({"doc_id": "a", "grade": -1}, "grade"),
        ({"doc_id": "a", "grade": True}, "grade"),
        ({"doc_id": "a", "grade": 1.5}, "grade"),
        ({"doc_id": "a", "grade": "2"}, "grade"),
    ],
)
def test_bad_labels_raise_eval_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(EvalError, match=message):
        Label(**kwargs)  # type: ignore[arg-type]


def test_grade_zero_label_is_allowed_but_not_positive() -> None:
    c = Case("c", "q", (Label(doc_id="a", grade=0), Label(doc_id="b", grade=2)))
    assert c.positive == (Label(doc_id="b", grade=2),)


# -- Case ----------------------------------------------------------------------------------------


def test_case_with_only_grade_zero_labels_raises() -> None:
    with pytest.raises(EvalError, match="no label has a grade above 0"):
        Case("c", "q", (Label(doc_id="a", grade=0), Label(chunk_id="b#1", grade=0)))


def test_case_with_no_labels_raises() -> None:
    with pytest.raises(EvalError, match="grade above 0"):
        Case("c", "q", ())


@pytest.mark.parametrize(("case_id", "question"), [("", "q"), ("c", ""), ("c", " \t ")])
def test_case_needs_id_and_question(case_id: str, question: str) -> None:
    with pytest.raises(EvalError, match="empty"):
        Case(case_id, question, (Label(doc_id="a"),))


def test_case_defaults() -> None:
    (c,) = parse_jsonl(line())
    assert (c.category, c.source, dict(c.filters), c.created_at) == ("uncategorized", "unknown", {}, None)
    assert c.relevant == (Label(doc_id="billing/refunds"),)


# -- parse_jsonl ---------------------------------------------------------------------------------


def test_parse_reports_every_bad_line_with_its_number() -> None:
    lines = [
        line(id="ok-1"),  # 1
        '{"id": "x", "question": ',  # 2: bad JSON
        line(id="x3", tenant="acme"),  # 3: unknown key
        line(id="x4", question=...),  # 4: missing question
        line(id="x5", relevant=[{"grade": 1}]),  # 5: neither doc_id nor chunk_id
        line(id="x6", relevant=[{"evidence": "30 days"}]),  # 6: evidence without doc_id
        line(id="ok-1"),  # 7: duplicate id
        line(id="x8", relevant=[{"doc_id": "a", "grade": -1}]),  # 8: negative grade
        line(id="x9", relevant=[{"doc_id": "a", "grade": True}]),  # 9: boolean grade
        "",  # 10: blank lines are skipped, but still counted
        line(id="ok-2"),  # 11
        line(id="x12", relevant=[{"doc_id": "a", "note": "?"}]),  # 12: unknown label key
        line(id="x13", relevant=[]),  # 13: no labels
        "[1, 2]",  # 14: not an object
        line(id="x15", relevant=[{"doc_id": "a", "grade": 0}]),  # 15: no positive label
    ]
    with pytest.raises(EvalError) as info:
        parse_jsonl("\n".join(lines), "handbook.jsonl")
    message = str(info.value)
    bad = {2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15}
    assert message.startswith(f"{len(bad)} bad line(s): ")
    reported = {int(n) for n in re.findall(r"handbook\.jsonl:(\d+):", message)}
    assert reported == bad
    problems = dict(re.findall(r"handbook\.jsonl:(\d+): ([^;]*)", message))
    assert "not valid JSON" in problems["2"]
    assert "unknown key(s) ['tenant']" in problems["3"]
    assert "missing 'question'" in problems["4"]
    assert "needs doc_id" in problems["5"]
    assert "relevant[0]" in problems["5"]
    assert "needs doc_id" in problems["6"]
    assert "duplicate id 'ok-1' (first on line 1)" in problems["7"]
    assert "grade" in problems["8"]
    assert "-1" in problems["8"]
    assert "grade" in problems["9"]
    assert "True" in problems["9"]
    assert "unknown key(s) ['note']" in problems["12"]
    assert "non-empty list" in problems["13"]
    assert "JSON object" in problems["14"]
    assert "grade above 0" in problems["15"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (line(question=5), "question must be a string"),
        (line(filters=["acme"]), "filters must be an object"),
        (line(relevant={"doc_id": "a"}), "non-empty list"),
        (line(relevant=["a"]), r"relevant\[0\] must be an object"),
        (line(relevant=[{"doc_id": "a"}, {"doc_id": "b", "evidence": 30}]), r"relevant\[1\]"),
        (line(id=None), "id"),
        (line(id=""), "id is empty"),
        (line(id=...), "missing 'id'"),
        (line(relevant=...), "missing 'relevant'"),
    ],
)
def test_parse_single_bad_line(bad: str, message: str) -> None:
    with pytest.raises(EvalError, match=message) as info:
        parse_jsonl(bad, "s")
    assert str(info.value).startswith("1 bad line(s): s:1: ")


def test_parse_caps_the_error_list() -> None:
    text = "\n".join("not json" for _ in range(MAX_ERRORS_SHOWN + 5))
    with pytest.raises(EvalError) as info:
        parse_jsonl(text, "s")
    message = str(info.value)
    assert message.startswith(f"{MAX_ERRORS_SHOWN + 5} bad line(s)")
    assert message.count("not valid JSON") == MAX_ERRORS_SHOWN
    assert message.endswith("; and 5 more")


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_parse_empty_text_is_an_error(text: str) -> None:
    with pytest.raises(EvalError, match="s: no cases"):
        parse_jsonl(text, "s")


def test_parse_accepts_crlf_and_numeric_ids() -> None:
    cases = parse_jsonl(line(id=42) + "\r\n" + line(id="b") + "\r\n")
    assert [c.id for c in cases] == ["42", "b"]


def test_load_cases_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="does not exist"):
        load_cases(tmp_path / "nope.jsonl")


# -- dump / parse round trip ---------------------------------------------------------------------

FULL = Case(
    "c-0042",
    "what is the refund window for annual plans — 年度计划?",
    (
        Label(doc_id="billing/refunds"),
        Label(doc_id="policies/annual-terms", evidence="30 days"),
        Label(chunk_id="billing/refunds#3", grade=2),
        Label(doc_id="billing/old", grade=0),
    ),
    category="billing",
    source="log",
    filters={"tenant": "acme", "tags": ["a", "b"]},
    created_at="2026-11-30T10:00:00Z",
)


def test_round_trip_keeps_every_field() -> None:
    text = dump_jsonl([FULL])
    assert text.endswith("\n")
    assert text.count("\n") == 1
    assert parse_jsonl(text) == [FULL]
    obj = json.loads(text)
    assert obj["relevant"][0] == {"doc_id": "billing/refunds"}  # grade 1 is the default and is left out
    assert obj["relevant"][2] == {"chunk_id": "billing/refunds#3", "grade": 2}
    assert "年度计划" in text  # not \u-escaped


def test_round_trip_of_a_design_doc_example() -> None:
    example = (
        '{"id": "c-0042", "question": "what is the refund window for annual plans", '
        '"relevant": [{"doc_id": "billing/refunds"}, {"doc_id": "policies/annual-terms", "evidence": "30 days"}, '
        '{"chunk_id": "billing/refunds#3", "grade": 2}], "category": "billing", "source": "log", '
        '"filters": {"tenant": "acme"}, "created_at": "2026-11-30T10:00:00Z"}'
    )
    cases = parse_jsonl(example)
    assert json.loads(dump_jsonl(cases)) == json.loads(example)


def test_round_trip_with_unicode_line_separators() -> None:
    # json.dumps(ensure_ascii=False) writes U+2028, U+2029 and U+0085 raw; they must not split a line.
    c = Case("c", "first\u2028second\u2029third\x85fourth", (Label(doc_id="d", evidence="a\u2028b"),))
    assert parse_jsonl(dump_jsonl([c])) == [c]


text_st = st.text(min_size=1, max_size=30).filter(lambda s: s.strip() != "")
ident_st = st.text(min_size=1, max_size=12)
label_st = st.one_of(
    st.builds(Label, doc_id=ident_st, grade=st.integers(0, 3)),
    st.builds(Label, doc_id=ident_st, evidence=text_st, grade=st.integers(0, 3)),
    st.builds(Label, chunk_id=ident_st, grade=st.integers(0, 3)),
)
case_st = st.builds(
    Case,
    id=ident_st,
    question=text_st,
    relevant=st.tuples(st.builds(Label, doc_id=ident_st, grade=st.integers(1, 3))).flatmap(
        lambda first: st.lists(label_st, max_size=4).map(lambda rest: first + tuple(rest))
    ),
    category=text_st,
    source=text_st,
    filters=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    created_at=st.none() | st.just("2026-11-30T10:00:00Z"),
)


@given(st.lists(case_st, min_size=1, max_size=5, unique_by=lambda c: c.id))
def test_round_trip_property(cases: list[Case]) -> None:
    assert parse_jsonl(dump_jsonl(cases)) == cases


# -- fingerprint ---------------------------------------------------------------------------------


def test_fingerprint_tracks_content() -> None:
    a = parse_jsonl(line(id="a") + "\n" + line(id="b"))
    same = parse_jsonl(line(id="a") + "\n\n" + line(id="b"))
    changed = parse_jsonl(line(id="a") + "\n" + line(id="b", question="another question"))
    assert fingerprint(a) == fingerprint(same)
    assert fingerprint(a) != fingerprint(changed)
    assert fingerprint(a) != fingerprint(a[:1])
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint(a))


# -- the shipped set -----------------------------------------------------------------------------


def test_shipped_handbook_set_loads() -> None:
    cases = load_cases(PACKAGE_DIR / "sets" / "handbook.jsonl")
    assert len(cases) >= 60
    assert len({c.category for c in cases}) >= 5
    labels = [label for c in cases for label in c.relevant]
    evidence = [label for label in labels if label.kind == "evidence"]
    assert len(evidence) > len(labels) / 2
    assert all(c.positive for c in cases)
    assert "uncategorized" not in {c.category for c in cases}


HANDBOOK_DIR = Path(__file__).resolve().parents[2] / "demo" / "handbook"


def test_shipped_plain_language_set_loads() -> None:
    cases = load_cases(PACKAGE_DIR / "sets" / "plain.jsonl")
    assert len(cases) >= 40
    categories = {c.category for c in cases}
    assert categories >= {"hr", "it", "billing", "product", "security", "support", "engineering", "fjord"}
    assert all(c.category.strip() for c in cases)
    for category in categories:  # both splits in every category, about half each
        splits = [c.split for c in cases if c.category == category]
        assert abs(splits.count("tune") - splits.count("test")) <= 1, category
    assert {c.split for c in cases} == {"tune", "test"}
    assert all(label.kind == "evidence" for c in cases for label in c.relevant)  # passage-level: the words that answer
    assert all(c.filters.get("tenant") for c in cases)


@pytest.mark.parametrize("name", ["handbook", "plain"])
def test_every_evidence_of_a_shipped_set_occurs_in_its_document(name: str) -> None:
    for case in load_cases(PACKAGE_DIR / "sets" / f"{name}.jsonl"):
        for label in case.relevant:
            if label.kind != "evidence":
                continue
            source = HANDBOOK_DIR / f"{label.doc_id}.md"
            assert source.is_file(), f"{case.id}: no document {label.doc_id}"
            assert normalize(label.evidence or "") in normalize(source.read_text(encoding="utf-8")), case.id
