"""The regression gate: a new run against a stored baseline run.

Per metric: fail when the mean drops by more than its tolerance. Per category: fail when a category
with enough cases drops by more than the (wider) category tolerance, since a collapse in one category
hides easily in the mean. Case by case: list the cases that got worse (paired on case id). A paired
randomisation test (sign flips of the per-case differences) gives, for each metric, the one-sided
p-value of a drop at least this large arising from the eval set's noise alone; with
`require_significance` a drop must also be significant to fail. An accepted incident's case that passed in
an earlier run and fails in this one (`Run.regressed`) fails the gate too, unless `fail_on_regressed` is off.

For a lower-is-better metric (`stale@k`, see `eval.metrics.lower_is_better`) every direction is
reversed: a rise is the regression, and the cases whose value rose are the ones that got worse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from eval.errors import EvalError
from eval.metrics import lower_is_better, metric_names
from eval.report import mean_metrics
from eval.runner import CaseResult, Run
from eval.verdict import CaseChange, GateResult, MetricCheck, worsening


@dataclass(frozen=True)
class GateConfig:
    """What to compare and how much slack to allow (absolute drops, metric scale 0..1).

    Example:
        >>> GateConfig(tolerance=0.02, per_metric={"hit@1": 0.05}).tolerance_for("hit@1")
        0.05
    """

    metrics: tuple[str, ...] = ()  # empty: hit, recall, mrr, ndcg and stale at the largest k
    tolerance: float = 0.02
    per_metric: Mapping[str, float] = field(default_factory=dict)
    category_tolerance: float | None = 0.10
    min_category_cases: int = 5
    alpha: float = 0.05
    require_significance: bool = False
    permutations: int = 10_000
    seed: int = 0
    fail_on_regressed: bool = True  # an incident case that passed in an earlier run and fails now fails the gate

    def tolerance_for(self, metric: str) -> float:
        return self.per_metric.get(metric, self.tolerance)

    def check_names(self, ks: Sequence[int]) -> None:
        """Raise `EvalError` naming the known metrics if one asked for is not computed for these k."""
        known = metric_names(ks)
        unknown = [m for m in (*self.metrics, *self.per_metric) if m not in known]
        if unknown:
            raise EvalError(f"unknown metric(s) {unknown} for k={sorted(set(ks))}; known: {', '.join(known)}")


def default_metrics(run: Run) -> tuple[str, ...]:
    k = max(run.ks)
    return (f"hit@{k}", f"recall@{k}", f"mrr@{k}", f"ndcg@{k}", f"stale@{k}")


def compare(run: Run, baseline: Run, config: GateConfig | None = None) -> GateResult:
    """Gate `run` against `baseline`; the verdict and every reason behind it.

    A metric asked for in `config.metrics` must be in both runs. Of the default metrics, `stale@k` is
    skipped with a warning when a run stored before it existed lacks it (an older baseline still gates).
    """
    cfg = config or GateConfig()
    warnings = []
    metrics = cfg.metrics
    if not metrics:
        metrics = default_metrics(run)
        for who, other in (("baseline", baseline), ("run", run)):
            dropped = [m for m in metrics if m.startswith("stale@") and m not in _names(other)]
            if dropped and other.cases:
                metrics = tuple(m for m in metrics if m not in dropped)
                warnings.append(f"the {who} predates {', '.join(dropped)}; it is not gated")
    missing = [m for m in metrics if m not in _names(run) or m not in _names(baseline)]
    if missing:
        raise EvalError(
            f"metric(s) {missing} are not in both runs (run has k={list(run.ks)}, baseline k={list(baseline.ks)})"
        )
    if run.unit != baseline.unit:
        raise EvalError(f"the run is unit={run.unit!r} but the baseline is unit={baseline.unit!r}: not comparable")
    if run.set_fingerprint != baseline.set_fingerprint:
        warnings.append("the labelled set changed since the baseline; cases are paired on the ids both share")
    base = {c.case_id: c for c in baseline.cases}
    pairs = [(c, base[c.case_id]) for c in run.cases if c.case_id in base]
    if not pairs:
        raise EvalError("the run and the baseline share no case ids")
    if len(pairs) < len(run.cases) or len(pairs) < len(baseline.cases):
        warnings.append(
            f"{len(run.cases) - len(pairs)} new and {len(baseline.cases) - len(pairs)} removed case(s) ignored"
        )
    checks = [_check(m, "overall", pairs, cfg.tolerance_for(m), cfg) for m in metrics]
    if cfg.category_tolerance is not None:
        for category in sorted({c.category for c, _ in pairs}):
            members = [(c, b) for c, b in pairs if c.category == category]
            if len(members) >= cfg.min_category_cases:
                checks.extend(_check(m, f"category:{category}", members, cfg.category_tolerance, cfg) for m in metrics)
    reasons = [
        f"{c.metric} ({c.scope}) {'rose' if lower_is_better(c.metric) else 'fell'} {c.worsening:.3f} "
        f"from {c.baseline:.3f} to {c.current:.3f}, beyond the tolerance {c.tolerance:.3f}"
        + (f" (p = {c.p_value:.4f})" if c.p_value is not None else "")
        for c in checks
        if c.failed
    ]
    if run.regressed:
        regressed = f"incident case(s) {', '.join(run.regressed)} passed in an earlier run and fail now (regressed)"
        if cfg.fail_on_regressed:
            reasons.append(regressed)
        else:
            warnings.append(regressed + "; not failing the gate (fail_on_regressed is off)")
    worse = [
        CaseChange(c.case_id, m, b.metrics[m], c.metrics[m])
        for c, b in pairs
        for m in metrics
        if worsening(m, b.metrics[m], c.metrics[m]) > 0
    ]
    better = len({c.case_id for c, b in pairs for m in metrics if worsening(m, b.metrics[m], c.metrics[m]) < 0})
    return GateResult(
        passed=not reasons,
        reasons=tuple(reasons) or ("no gated metric fell beyond its tolerance",),
        checks=tuple(checks),
        worse_cases=tuple(
            sorted(worse, key=lambda w: (-worsening(w.metric, w.baseline, w.current), w.case_id, w.metric))
        ),
        better_cases=better,
        warnings=tuple(warnings),
    )


def _names(run: Run) -> set[str]:
    return set(run.cases[0].metrics) if run.cases else set()


def _check(
    metric: str, scope: str, pairs: Sequence[tuple[CaseResult, CaseResult]], tolerance: float, cfg: GateConfig
) -> MetricCheck:
    current = mean_metrics([c for c, _ in pairs])[metric]
    baseline = mean_metrics([b for _, b in pairs])[metric]
    # per-case improvements (positive: better), so that the one-sided test always asks "is it this much worse?"
    diffs = np.array([-worsening(metric, b.metrics[metric], c.metrics[metric]) for c, b in pairs])
    p_value = paired_randomization_p(diffs, cfg.permutations, cfg.seed)
    regressed = worsening(metric, baseline, current) > tolerance + 1e-12
    significant = p_value is not None and p_value < cfg.alpha
    failed = regressed and (significant or not cfg.require_significance)
    return MetricCheck(metric, scope, baseline, current, tolerance, p_value, failed)


def paired_randomization_p(diffs: np.ndarray, permutations: int = 10_000, seed: int = 0) -> float | None:
    """One-sided p-value that the mean paired difference is this low by chance.

    Under the null hypothesis each case's difference is as likely to have the opposite sign, so the
    signs are flipped at random `permutations` times; p is the share of flips whose mean is at most the
    observed mean (with the +1 correction, so p > 0). None when no case changed at all.
    """
    if diffs.size == 0 or not np.any(diffs):
        return None
    rng = np.random.default_rng(seed)
    observed = diffs.mean()
    at_most = 0
    for start in range(0, permutations, 1000):  # blocks keep memory flat for large sets
        signs = rng.choice(np.array([-1.0, 1.0]), size=(min(1000, permutations - start), diffs.size))
        at_most += int(np.count_nonzero((signs * diffs).mean(axis=1) <= observed + 1e-12))
    return float((at_most + 1) / (permutations + 1))
