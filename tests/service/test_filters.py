from __future__ import annotations

import datetime as dt

import pytest

from service.domain import DocStatus
from service.errors import InvalidRequest
from service.filters import (
    DateRange,
    FilterSpec,
    Match,
    MatchAny,
    NumberRange,
    build_filter,
    parse_datetime,
    parse_metadata_filters,
)

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def test_fresh_only_adds_one_condition_on_status_and_expiry_together() -> None:
    clause = build_filter(FilterSpec(), fresh_only=True, now=NOW)
    assert clause.must == (DateRange("fresh_until", gt=NOW),)
    assert build_filter(FilterSpec(), fresh_only=False, now=NOW).must == ()


def test_every_field_becomes_a_condition() -> None:
    after = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    spec = FilterSpec(
        tenant="acme",
        tags=("billing", "hr"),
        doc_ids=("a",),
        status=(DocStatus.SUPERSEDED,),
        updated_after=after,
        metadata=parse_metadata_filters({"owner": "Ana", "days": {"gte": 90}}),
    )
    must = build_filter(spec, fresh_only=False, now=NOW).must
    assert must == (
        Match("tenant", "acme"),
        MatchAny("tags", ("billing", "hr")),
        MatchAny("doc_id", ("a",)),
        MatchAny("status", ("superseded",)),
        DateRange("updated_at", gte=after),
        Match("metadata.owner", "Ana"),
        NumberRange("metadata.days", gte=90.0),
    )


def test_asking_for_old_documents_while_fresh_only_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="fresh_only"):
        build_filter(FilterSpec(status=(DocStatus.SUPERSEDED,)), fresh_only=True, now=NOW)


def test_metadata_forms() -> None:
    [one, many, nums, dates, floats] = parse_metadata_filters(
        {
            "dept": "hr",
            "region": ["eu", "ca"],
            "days": {"gt": 1, "lte": 9},
            "reviewed": {"gte": "2026-01-01T00:00:00Z"},
            "score": 0.5,
        }
    )
    assert one.equals == ("hr",)
    assert many.equals == ("eu", "ca")
    assert (nums.gt, nums.lte) == (1.0, 9.0)
    assert dates.gte == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    must = build_filter(FilterSpec(metadata=(floats,)), fresh_only=False, now=NOW).must
    assert must[-1] == NumberRange("metadata.score", gte=0.5, lte=0.5)
    # numbers compare as numbers: an integer filter must find a value stored as 3.0
    [three] = build_filter(FilterSpec(metadata=parse_metadata_filters({"n": 3})), fresh_only=False, now=NOW).must
    assert three == NumberRange("metadata.n", gte=3.0, lte=3.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"bad key!": 1}, "invalid"),
        ({"k": {"between": 1}}, "unknown range operator"),
        ({"k": []}, "empty"),
        ({"k": {"gte": "soon"}}, "ISO 8601"),
        ({"k": {"gte": 1, "lt": "2026-01-01T00:00:00Z"}}, "mix"),
        ({"k": {"nested": "object"}}, "unknown range operator"),
        ({"k": [{"a": 1}]}, "strings, numbers or booleans"),
        ({"k": 10**30}, "finite number"),
        ({"k": {"gte": 10**400}}, "finite number in range"),
        ({"k": float("nan")}, "finite number"),
        ({"k": {"lt": "0001-01-01T00:30:00+01:00"}}, "out of range"),
    ],
)
def test_bad_metadata_filters_say_what_to_fix(raw: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_metadata_filters(raw)


def test_dates() -> None:
    assert parse_datetime("2026-03-01", "x") == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    assert parse_datetime("2026-03-01T02:00:00+02:00", "x") == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    with pytest.raises(InvalidRequest, match="timezone"):
        parse_datetime("2026-03-01T10:00:00", "x")
    with pytest.raises(InvalidRequest, match="earlier"):
        FilterSpec(updated_after=NOW, updated_before=NOW - dt.timedelta(days=1))


def test_merged_spec_keeps_both_sides() -> None:
    run = FilterSpec(tenant="acme", tags=("x",), metadata=parse_metadata_filters({"a": 1}))
    case = FilterSpec(tenant="fjord", metadata=parse_metadata_filters({"b": 2}))
    merged = run.merged(case)
    assert merged.tenant == "fjord"
    assert merged.tags == ("x",)
    assert [m.key for m in merged.metadata] == ["a", "b"]
