"""Presentation: the JSON body of /eval/run and the text table, both from one run, report and gate."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from eval.cases import Case
from eval.gate import compare
from eval.matching import Retrieved
from eval.present import format_table, report_json
from eval.report import build_report
from eval.runner import Run
from eval.verdict import GatePolicy

from .helpers import doc_case, docs, filler, run_with

CASES = [
    doc_case("a", "doc-a", category="billing", source="log"),
    doc_case("b", "doc-b", category="billing", source="handwritten"),
    doc_case("c", "doc-c", category="it", source="log"),
]


def good(c: Case) -> Sequence[Retrieved]:
    return [*docs(f"doc-{c.id}"), *filler(c.id, 9)]


def broken(c: Case) -> Sequence[Retrieved]:
    return filler(c.id, 10) if c.category == "it" else good(c)


def runs() -> tuple[Run, Run]:
    return run_with(CASES, good, ks=(1, 5, 10)), run_with(CASES, broken, ks=(1, 5, 10))


def test_report_json_keys_and_metric_names() -> None:
    base, run = runs()
    gate = compare(run, base, GatePolicy(min_category_cases=1))
    body = report_json(run, build_report(run), gate)
    assert json.loads(json.dumps(body)) == body  # plain JSON
    for key in ("run_id", "metrics", "by_category", "by_source", "cases", "diagnosis", "gate"):
        assert key in body
    assert body["run_id"] == run.run_id
    assert body["k"] == [1, 5, 10]
    assert body["unit"] == "chunk"
    assert body["cases_total"] == 3
    assert body["primary_metric"] == "recall@10"
    assert set(body["metrics"]) == {
        *(f"{m}@{k}" for m in ("hit", "recall", "precision", "mrr", "ndcg", "stale") for k in (1, 5, 10)),
        "mrr",
    }
    assert body["metrics"]["hit@5"] == round(2 / 3, 6)
    assert [(g["name"], g["cases"]) for g in body["by_category"]] == [("it", 1), ("billing", 2)]
    assert body["by_category"][0]["metrics"]["recall@10"] == 0.0
    assert {g["name"] for g in body["by_source"]} == {"log", "handwritten"}
    overall = body["diagnosis"][0]
    assert set(overall) == {"scope", "problem", "advice"}
    assert (overall["scope"], overall["problem"][:10]) == ("overall", "low recall")
    assert body["gate"]["verdict"] == "fail"
    assert body["gate"]["reasons"]
    assert {w["case_id"] for w in body["gate"]["worse_cases"]} == {"c"}
    c = body["cases"][2]
    assert (c["id"], c["first_relevant_rank"], c["missed"]) == ("c", None, [{"doc_id": "doc-c"}])
    assert len(c["top"]) == 5
    assert set(c["top"][0]) == {"chunk_id", "doc_id", "score"}


def test_report_json_without_cases_or_gate() -> None:
    base, _ = runs()
    body = report_json(base, build_report(base), None, cases=False)
    assert "cases" not in body
    assert body["gate"] is None
    assert body["metrics"]["hit@1"] == 1.0


def test_gate_json() -> None:
    base, run = runs()
    out = compare(run, base, GatePolicy(min_category_cases=1)).to_json()
    check = next(c for c in out["checks"] if c["metric"] == "hit@10" and c["scope"] == "overall")
    assert check["delta"] == round(-1 / 3, 6)
    assert check["failed"] is True
    assert set(check) >= {"metric", "scope", "baseline", "current", "tolerance", "p_value", "failed", "delta"}
    assert out["better_cases"] == 0
    assert json.loads(json.dumps(out)) == out


def test_format_table_shows_metrics_groups_diagnosis_and_verdict() -> None:
    base, run = runs()
    gate = compare(run, base, GatePolicy(min_category_cases=1))
    table = format_table(run, build_report(run), gate)
    lines = table.splitlines()
    assert lines[0] == f"run {run.run_id}  set test  unit chunk  k [1, 5, 10]"
    for name in ("hit@10", "recall@10", "precision@10", "mrr@10", "ndcg@10", "stale@10", "cases"):
        assert name in lines[1]
    assert lines[2].split()[:3] == ["all", "3", "0.667"]
    category_rows = lines[lines.index("-- by category (worst first)") + 1 : lines.index("-- by source")]
    assert [row.split()[:2] for row in category_rows] == [["it", "1"], ["billing", "2"]]
    assert "-- diagnosis" in lines
    assert any(line.startswith("overall: low recall") for line in lines)
    assert "-- gate: FAIL" in lines
    assert "  1 case(s) got worse: c" in lines
    assert "  0 case(s) got better" in lines


def test_format_table_for_a_passing_gate_and_none() -> None:
    base, _ = runs()
    report = build_report(base)
    assert "-- gate: PASS" in format_table(base, report, compare(base, base)).splitlines()
    plain = format_table(base, report, None)
    assert "-- gate" not in plain
    assert "overall: retrieval looks healthy" in plain  # a healthy finding prints its advice only


def test_a_run_stored_before_stale_still_presents() -> None:
    base, _ = runs()
    old = dataclasses.replace(
        base,
        cases=tuple(
            dataclasses.replace(c, metrics={m: v for m, v in c.metrics.items() if not m.startswith("stale@")})
            for c in base.cases
        ),
    )
    report = build_report(old)
    assert "stale@10" not in format_table(old, report, None).splitlines()[1]
    assert "stale@10" not in report_json(old, report, None)["metrics"]


def test_format_table_lists_at_most_fifteen_worse_cases() -> None:
    many = [doc_case(f"c{i:02d}", f"doc-c{i:02d}") for i in range(20)]
    base = run_with(many, lambda c: [*docs(f"doc-{c.id}"), *filler(c.id, 9)], ks=(10,))
    run = run_with(many, lambda c: filler(c.id, 10), ks=(10,))
    table = format_table(run, build_report(run), compare(run, base))
    line = next(x for x in table.splitlines() if "got worse" in x)
    assert line.startswith("  20 case(s) got worse: c00, c01,")
    assert line.endswith("c14 ...")


def test_the_incident_bucket_comes_from_the_runs_outcomes() -> None:
    run = run_with([doc_case("c1", "a")], {"c1": docs("a")})
    assert report_json(run, build_report(run), None)["incidents"] is None
    outcomes = {"incident-2": "failed", "incident-1": "passed", "incident-3": "regressed"}
    with_incidents = dataclasses.replace(run, incident_outcomes=outcomes)
    bucket = report_json(with_incidents, build_report(with_incidents), None)["incidents"]
    assert bucket == {"cases": 3, "passed": 1, "failed": ["incident-2", "incident-3"], "regressed": ["incident-3"]}
    table = format_table(with_incidents, build_report(with_incidents), None)
    assert "-- incidents: 1 of 3 pass" in table
    assert "regressed (passed before, fail now): incident-3" in table
