"""A gate's verdict as a value: what `eval.gate.compare` returns, what a gated `Run` carries, and the one JSON shape
it is stored and answered in (`GateResult.to_json` / `from_json`, a lossless round trip, so a stored run hashes the
same after it is read back: `eval.storage.run_digest`).

Example:
    >>> g = GateResult(False, ("hit@10 (overall) fell",), (), (CaseChange("c1", "hit@10", 1.0, 0.0),), 0, ())
    >>> g.verdict, GateResult.from_json(g.to_json()) == g
    ('fail', True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from eval.errors import EvalError
from eval.metrics import lower_is_better


def worsening(metric: str, baseline: float, current: float) -> float:
    """current - baseline for a lower-is-better metric, baseline - current otherwise: positive is worse."""
    return current - baseline if lower_is_better(metric) else baseline - current


@dataclass(frozen=True)
class MetricCheck:
    metric: str
    scope: str  # "overall" or "category:<name>"
    baseline: float
    current: float
    tolerance: float
    p_value: float | None
    failed: bool

    @property
    def delta(self) -> float:
        return self.current - self.baseline

    @property
    def worsening(self) -> float:
        """How much worse the current value is (positive: worse), whichever way the metric points."""
        return worsening(self.metric, self.baseline, self.current)


@dataclass(frozen=True)
class CaseChange:
    case_id: str
    metric: str
    baseline: float
    current: float


@dataclass(frozen=True)
class BaselineRef:
    """What a filed verdict was compared with: the baseline's name (None: a file or a run given directly), its run
    id, its content hash (`eval.storage.run_digest`) and where it came from (`stored`, `packaged`, `stored, shadowing
    packaged` or `file`). Runs filed before the hash existed carry name and run id only."""

    name: str | None
    run_id: str | None
    sha256: str | None = None
    source: str | None = None

    def to_json(self) -> dict[str, str | None]:
        optional = {"sha256": self.sha256, "source": self.source}
        return {"name": self.name, "run_id": self.run_id, **{k: v for k, v in optional.items() if v is not None}}


@dataclass(frozen=True)
class GateResult:
    """The verdict, its reasons, every check made, the cases that got worse, and, once the service has filed it
    with a run, the baseline it was compared with (`baseline`: name, run id, content hash, where it came from)."""

    passed: bool
    reasons: tuple[str, ...]
    checks: tuple[MetricCheck, ...]
    worse_cases: tuple[CaseChange, ...]
    better_cases: int
    warnings: tuple[str, ...]
    baseline: BaselineRef | None = None

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "checks": [{**asdict(c), "delta": round(c.delta, 6)} for c in self.checks],
            "worse_cases": [asdict(w) for w in self.worse_cases],
            "better_cases": self.better_cases,
        }
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> GateResult:
        check_fields = [f.name for f in fields(MetricCheck)]
        try:
            if obj["verdict"] not in ("pass", "fail"):
                raise ValueError(f"verdict {obj['verdict']!r}")
            return cls(
                passed=obj["verdict"] == "pass",
                reasons=tuple(obj["reasons"]),
                checks=tuple(MetricCheck(**{k: c[k] for k in check_fields}) for c in obj["checks"]),
                worse_cases=tuple(CaseChange(**w) for w in obj["worse_cases"]),
                better_cases=int(obj["better_cases"]),
                warnings=tuple(obj["warnings"]),
                baseline=BaselineRef(**obj["baseline"]) if obj.get("baseline") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EvalError(f"not a gate verdict: {exc}") from None
