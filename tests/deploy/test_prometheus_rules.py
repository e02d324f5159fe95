"""The Prometheus config and alert rules: promtool accepts them, every alert has a unit test that fires it
and they all pass (deploy/prometheus/tests/*_test.yml), and rules select only exported metrics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helpers import (
    KNOWN_METRICS,
    PROMETHEUS_CONFIG,
    RULE_TESTS,
    RULES,
    RUNBOOKS,
    alert_rules,
    load_yaml,
    metric_names,
    run_promtool,
)


def test_promtool_check_rules(tmp_path: Path) -> None:
    result = run_promtool("check", "rules", str(RULES), cwd=tmp_path)
    assert result.returncode == 0, result.stdout


def test_promtool_check_config_finds_the_rules(tmp_path: Path) -> None:
    """rule_files is relative to the config file: run from elsewhere, it must still find the rules file
    (a glob that matches nothing passes `check config` silently, hence the second assertion)."""
    result = run_promtool("check", "config", str(PROMETHEUS_CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert f"Checking {RULES}" in result.stdout or "rules/plumbline.yml" in result.stdout, result.stdout
    assert "SUCCESS: 1 rule files found" in result.stdout, result.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    assert len(RULE_TESTS) == 2
    result = run_promtool("test", "rules", *map(str, RULE_TESTS), cwd=tmp_path)
    assert result.returncode == 0, result.stdout


def _exp_alerts_by_name() -> dict[str, list[dict[str, Any]]]:
    """alertname -> the expected alerts of every `alert_rule_test` entry that expects it to fire."""
    firing: dict[str, list[dict[str, Any]]] = {}
    for test in (test for file in RULE_TESTS for test in load_yaml(file)["tests"]):
        for check in test.get("alert_rule_test", []):
            if check.get("exp_alerts"):
                firing.setdefault(check["alertname"], []).extend(check["exp_alerts"])
    return firing


def test_every_alert_has_a_firing_unit_test() -> None:
    firing = _exp_alerts_by_name()
    untested = [rule["alert"] for rule in alert_rules() if rule["alert"] not in firing]
    assert not untested, f"alerts without an exp_alerts test in {[f.name for f in RULE_TESTS]}: {untested}"


def test_unit_tests_check_labels_and_annotations() -> None:
    for name, expected in _exp_alerts_by_name().items():
        for alert in expected:
            assert alert.get("exp_labels", {}).get("severity"), f"{name}: exp_labels lack severity"
            assert set(alert.get("exp_annotations", {})) == {"summary", "description", "runbook", "runbook_url"}, name


@pytest.mark.parametrize("tests", RULE_TESTS, ids=lambda path: path.name)
def test_unit_tests_load_the_rules_file(tests: Path) -> None:
    files = [(tests.parent / f).resolve() for f in load_yaml(tests)["rule_files"]]
    assert files == [RULES.resolve()]


def test_alert_names_are_unique() -> None:
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_alert_has_severity_summary_description_and_runbook(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    for key in ("summary", "description", "runbook", "runbook_url"):
        assert str(rule["annotations"].get(key, "")).strip(), f"{rule['alert']} lacks annotation {key}"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_alert_selects_only_exported_metrics(rule: dict[str, Any]) -> None:
    names = metric_names(rule["expr"])
    assert names, f"{rule['alert']}: no metric found in {rule['expr']!r}"
    assert names <= KNOWN_METRICS, f"{rule['alert']}: unknown metrics {sorted(names - KNOWN_METRICS)}"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the markdown's headings (lower case, punctuation dropped, spaces as dashes)."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_runbook_url_points_at_the_alerts_section_of_the_runbooks(rule: dict[str, Any]) -> None:
    """runbook_url is docs/runbooks.md#<alert in lower case>, relative to the repository root; the section exists."""
    assert rule["annotations"]["runbook_url"] == f"docs/runbooks.md#{rule['alert'].lower()}"
    assert rule["alert"].lower() in _anchors(RUNBOOKS.read_text(encoding="utf-8")), f"no section {rule['alert']}"


def test_runbooks_have_a_section_for_every_alert_and_no_other() -> None:
    sections = re.findall(r"^## (\w+)\s*$", RUNBOOKS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sorted(sections) == sorted(rule["alert"] for rule in alert_rules())


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_rules_name_no_job(rule: dict[str, Any]) -> None:
    """The scrape job's name is the deployment's choice: rules select Plumbline's own metrics, never a job."""
    assert not re.search(r"\bjob\s*=~?", rule["expr"]), f"{rule['alert']} selects a job: {rule['expr']!r}"


QUALITY_ALERTS = ("QualityBelowBaseline", "QualityBelowFloor", "EvalGateFailed", "StaleResultsRising")


def test_quality_alerts_keep_firing_through_a_restart() -> None:
    """The eval gauges vanish while every replica restarts: `keep_firing_for` keeps the alert through the gap
    (tested across one in plumbline_test.yml), `for` keeps a one-evaluation value from paging."""
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for name in QUALITY_ALERTS:
        assert rules[name].get("for"), name
        assert rules[name].get("keep_firing_for"), name
