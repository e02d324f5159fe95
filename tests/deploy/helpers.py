"""Paths of the deploy files, promtool, and a small PromQL metric-name extractor for the deploy tests.

promtool comes from Debian's `prometheus` package. Where it is missing the tests that need it skip, saying
why, except when PLUMBLINE_REQUIRE_PROMETHEUS is set (to anything but "0"): then a missing promtool is a
failure, so CI can never skip them silently (the same pattern as PLUMBLINE_REQUIRE_POSTGRES).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.needs import missing

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULES = PROMETHEUS_DIR / "rules" / "plumbline.yml"
ALERTMANAGER_EXAMPLE = PROMETHEUS_DIR / "alertmanager.example.yml"
# the alert rules' unit tests: plumbline_test.yml evaluated every minute, plumbline_stale_test.yml every hour
RULE_TESTS = tuple(sorted((PROMETHEUS_DIR / "tests").glob("*_test.yml")))
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "plumbline.json"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

# Every series name the service exports (histograms as their _bucket/_sum/_count series), and Prometheus's `up`.
KNOWN_METRICS = frozenset(
    {
        "plumbline_eval_metric",
        "plumbline_eval_baseline_metric",
        "plumbline_eval_cases",
        "plumbline_eval_gate_passed",
        "plumbline_eval_last_run_timestamp_seconds",
        "plumbline_eval_schedule_interval_seconds",
        *(f"{h}_{s}" for h in ("plumbline_http_request_duration_seconds",) for s in ("bucket", "sum", "count")),
        "plumbline_http_requests_total",
        *(f"plumbline_search_stage_duration_seconds_{s}" for s in ("bucket", "sum", "count")),
        "plumbline_ready",
        "plumbline_live",
        "plumbline_build_info",
        "plumbline_eval_gauges_stale",
        "plumbline_eval_jobs_recent",
        "plumbline_index_points",
        "plumbline_incidents",
        "plumbline_ingested_chunks_total",
        "up",
    }
)

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords, label
    names (inside `{...}` or a grouping clause), strings, durations or numbers.

    >>> sorted(metric_names('sum by (le) (rate(a_bucket{x="y"}[5m])) / on (job) b > 0.5 and c'))
    ['a_bucket', 'b', 'c']
    """
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", " ", text, flags=re.IGNORECASE)
    return {name for name in _IDENT.findall(text) if name not in _KEYWORDS and name.lower() not in {"inf", "nan"}}


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def alert_rules() -> list[dict[str, Any]]:
    """The alerting rules of the rules file, in order."""
    return [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"] if "alert" in rule]


def require_binary(name: str) -> str:
    """A binary of Debian's `prometheus` package (promtool, prometheus); skips the test (fails it under
    PLUMBLINE_REQUIRE_PROMETHEUS) when missing."""
    found = shutil.which(name)
    if found is None:
        missing(
            f"{name} is not installed (apt-get install prometheus): the Prometheus tests need it",
            "PLUMBLINE_REQUIRE_PROMETHEUS",
        )
    return found


def require_alertmanager() -> str:
    """Debian's `prometheus-alertmanager` (a package of its own); skips the test (fails it under
    PLUMBLINE_REQUIRE_PROMETHEUS) when missing."""
    found = shutil.which("prometheus-alertmanager")
    if found is None:
        missing(
            "prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager): the alert delivery "
            "test needs it",
            "PLUMBLINE_REQUIRE_PROMETHEUS",
        )
    return found


def dev_tool(name: str) -> str:
    """A console script of the dev dependencies: on PATH, or next to this interpreter (an unactivated venv)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a checker; its stdout and stderr together in `.stdout`."""
    return subprocess.run(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False
    )


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run([require_binary("promtool"), *args], cwd=cwd)
