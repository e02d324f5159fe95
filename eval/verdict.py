"""A gate's policy and verdict as values. `GatePolicy`: what a gate checks and how much slack it allows, stored with
a baseline by whoever promotes it; `GateRequest`: what a caller asks beyond it (`GatePolicy.tightened`: only ever
stricter). `GateResult`: what `eval.gate.compare` returns, what a gated `Run` carries (with the policy it was judged
by), and the one JSON shape it is stored and answered in (`to_json` / `from_json`, a lossless round trip, so a stored
run hashes the same after it is read back: `eval.storage.run_digest`).

Example:
    >>> g = GateResult(False, ("hit@10 (overall) fell",), (), (CaseChange("c1", "hit@10", 1.0, 0.0),), 0, ())
    >>> g.verdict, GateResult.from_json(g.to_json()) == g
    ('fail', True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from eval.errors import EvalError, LooserThanPolicy
from eval.metrics import lower_is_better, metric_names


def worsening(metric: str, baseline: float, current: float) -> float:
    """current - baseline for a lower-is-better metric, baseline - current otherwise: positive is worse."""
    return current - baseline if lower_is_better(metric) else baseline - current


@dataclass(frozen=True)
class GatePolicy:
    """What a gate checks and how much slack it allows (absolute drops, metric scale 0..1): the metrics (empty: hit,
    recall, mrr, ndcg and stale at the largest k, `eval.gate.named`), a tolerance per metric, the per-category checks,
    whether a drop must also be significant, and whether a regressed incident fails the gate. A baseline carries one
    (`eval.storage.Baseline`), set by whoever promotes it; JSON as `to_json` writes it (`from_json` reads it back).

    Example:
        >>> GatePolicy(tolerance=0.02, per_metric={"hit@1": 0.05}).tolerance_for("hit@1")
        0.05
    """

    metrics: tuple[str, ...] = ()
    tolerance: float = 0.02
    per_metric: Mapping[str, float] = field(default_factory=dict)
    category_tolerance: float | None = 0.10
    min_category_cases: int = 5
    alpha: float = 0.05
    require_significance: bool = False
    permutations: int = 10_000
    seed: int = 0
    fail_on_regressed: bool = True  # an incident case that passed in an earlier run and fails now fails the gate

    def __post_init__(self) -> None:
        tolerances = [self.tolerance, *self.per_metric.values()]
        if self.category_tolerance is not None:
            tolerances.append(self.category_tolerance)
        problems = [
            *(["a tolerance outside 0..1"] if any(not 0 <= t <= 1 for t in tolerances) else []),
            *(["min_category_cases below 1"] if self.min_category_cases < 1 else []),
            *(["alpha outside (0, 1)"] if not 0 < self.alpha < 1 else []),
            *(["permutations below 100"] if self.permutations < 100 else []),
            *(["a metric named twice"] if len(set(self.metrics)) != len(self.metrics) else []),
        ]
        if problems:
            raise EvalError(f"invalid gate policy: {'; '.join(problems)}")

    def tolerance_for(self, metric: str) -> float:
        return self.per_metric.get(metric, self.tolerance)

    def check_names(self, ks: Sequence[int]) -> None:
        """Raise `EvalError` naming the known metrics if one asked for is not computed for these k."""
        known = metric_names(ks)
        unknown = [m for m in (*self.metrics, *self.per_metric) if m not in known]
        if unknown:
            raise EvalError(f"unknown metric(s) {unknown} for k={sorted(set(ks))}; known: {', '.join(known)}")

    def tightened(self, asked: GateRequest) -> tuple[GatePolicy, tuple[str, ...]]:
        """This policy made stricter as `asked`, and what was made stricter (e.g. "tolerance 0.01"); metrics asked
        for are gated besides the policy's. Anything asked that would loosen it is refused (`LooserThanPolicy`,
        naming each). The policy's metrics must be named (`eval.gate.named`)."""
        refused: list[str] = []
        made: list[str] = []
        out = self
        added = tuple(m for m in dict.fromkeys(asked.metrics) if m not in self.metrics)
        if added:
            out = replace(out, metrics=self.metrics + added)
            made.append(f"metrics + {', '.join(added)}")
        if asked.tolerance is not None:
            tolerances = {m: self.tolerance_for(m) for m in out.metrics}
            looser = [f"{m} ({t:g})" for m, t in tolerances.items() if asked.tolerance > t]
            if looser:
                refused.append(f"tolerance {asked.tolerance:g} is larger than the policy's for {', '.join(looser)}")
            elif any(asked.tolerance < t for t in tolerances.values()):
                out = replace(out, tolerance=asked.tolerance, per_metric={})
                made.append(f"tolerance {asked.tolerance:g}")
        if asked.require_significance is not None and asked.require_significance != self.require_significance:
            if asked.require_significance:
                refused.append("require_significance: the policy fails a drop beyond its tolerance, significant or not")
            else:
                out = replace(out, require_significance=False)
                made.append("significance not required")
        if asked.fail_on_regressed is not None and asked.fail_on_regressed != self.fail_on_regressed:
            if not asked.fail_on_regressed:
                refused.append("fail_on_regressed_incidents false: the policy fails the gate on a regressed incident")
            else:
                out = replace(out, fail_on_regressed=True)
                made.append("regressed incidents fail")
        if refused:
            raise LooserThanPolicy(
                f"refused, looser than the baseline's gate policy: {'; '.join(refused)}. A run may only make its gate "
                "stricter (more metrics, a smaller tolerance); the policy is set by whoever promotes the baseline "
                "(eval:admin, POST /eval/baselines with `policy`; GET /eval/baselines/{name} shows it)"
            )
        return out, tuple(made)

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": list(self.metrics),
            "tolerance": self.tolerance,
            "per_metric": dict(self.per_metric),
            "category_tolerance": self.category_tolerance,
            "min_category_cases": self.min_category_cases,
            "alpha": self.alpha,
            "require_significance": self.require_significance,
            "fail_on_regressed_incidents": self.fail_on_regressed,
            "permutations": self.permutations,
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> GatePolicy:
        """The policy `to_json` wrote; a field left out takes its default, an unknown one is an `EvalError`."""
        known = {f.name for f in fields(cls)} - {"fail_on_regressed"} | {"fail_on_regressed_incidents"}
        unknown = sorted(set(obj) - known) if isinstance(obj, Mapping) else []
        if not isinstance(obj, Mapping) or unknown:
            raise EvalError(f"not a gate policy: unknown field(s) {unknown}" if unknown else "not a gate policy")
        values = {k: v for k, v in obj.items() if k != "fail_on_regressed_incidents"}
        values["metrics"] = tuple(values.get("metrics", ()))
        if "fail_on_regressed_incidents" in obj:
            values["fail_on_regressed"] = obj["fail_on_regressed_incidents"]
        try:
            return cls(**values)
        except TypeError as exc:
            raise EvalError(f"not a gate policy: {exc}") from None


@dataclass(frozen=True)
class GateRequest:
    """What a caller asks of a run's gate besides its baseline's policy, None where it says nothing: metrics to gate
    as well, a smaller tolerance, significance not required, regressed incidents failing (`GatePolicy.tightened`)."""

    metrics: tuple[str, ...] = ()
    tolerance: float | None = None
    require_significance: bool | None = None
    fail_on_regressed: bool | None = None


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
    id, its content hash (`eval.storage.Baseline.sha256`: its run and its policy) and where it came from (`stored`,
    `packaged`, `stored, shadowing packaged` or `file`). Runs filed before the hash existed carry name and run id
    only."""

    name: str | None
    run_id: str | None
    sha256: str | None = None
    source: str | None = None

    def to_json(self) -> dict[str, str | None]:
        optional = {"sha256": self.sha256, "source": self.source}
        return {"name": self.name, "run_id": self.run_id, **{k: v for k, v in optional.items() if v is not None}}


@dataclass(frozen=True)
class GateResult:
    """The verdict, its reasons, every check made, the cases that got worse, the policy it was judged by (its
    metrics named), and, once the service has filed it with a run, the baseline it was compared with (`baseline`:
    name, run id, content hash, where it came from), where the policy came from (`policy_origin`: "baseline", stored
    with it; "default", the service's, for a baseline that carries none) and what the caller made stricter
    (`tightened`). Verdicts filed before policies were recorded carry none of the three."""

    passed: bool
    reasons: tuple[str, ...]
    checks: tuple[MetricCheck, ...]
    worse_cases: tuple[CaseChange, ...]
    better_cases: int
    warnings: tuple[str, ...]
    baseline: BaselineRef | None = None
    policy: GatePolicy | None = None
    policy_origin: str | None = None
    tightened: tuple[str, ...] = ()

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
        if self.policy is not None:
            out["policy"] = self.policy.to_json()
        if self.policy_origin is not None:
            out["policy_origin"] = self.policy_origin
        if self.tightened:
            out["tightened"] = list(self.tightened)
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
                policy=GatePolicy.from_json(obj["policy"]) if obj.get("policy") is not None else None,
                policy_origin=obj.get("policy_origin"),
                tightened=tuple(obj.get("tightened", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EvalError(f"not a gate verdict: {exc}") from None
