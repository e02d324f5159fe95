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

What is checked, and the slack, is a `GatePolicy` (`eval.verdict`), the one its baseline carries: a caller may
make it stricter (`GatePolicy.tightened`), never looser.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from eval.errors import EvalError
from eval.metrics import lower_is_better
from eval.report import mean_metrics
from eval.runner import CaseResult, Run
from eval.verdict import CaseChange, GatePolicy, GateRequest, GateResult, MetricCheck, worsening


def default_metrics(run: Run) -> tuple[str, ...]:
    k = max(run.ks)
    return (f"hit@{k}", f"recall@{k}", f"mrr@{k}", f"ndcg@{k}", f"stale@{k}")


def named(policy: GatePolicy, baseline: Run) -> GatePolicy:
    """`policy` with its metrics named: when it names none, the defaults at the baseline's largest k (`stale@k` left
    out of a baseline stored before it existed). What a baseline's policy is stored as, and tightened from."""
    if policy.metrics:
        return policy
    present = _names(baseline)
    return replace(policy, metrics=tuple(m for m in default_metrics(baseline) if m in present or not baseline.cases))


@dataclass(frozen=True)
class Judging:
    """What a run is judged by: the policy (its metrics named), where it came from ("baseline": the one stored with
    the baseline; "default": the service's, for a baseline that carries none) and what the caller made stricter."""

    policy: GatePolicy
    origin: str
    tightened: tuple[str, ...] = ()

    def compare(self, run: Run, baseline: Run) -> GateResult:
        """`compare` by this policy, the verdict saying where it came from and what was tightened."""
        return replace(compare(run, baseline, self.policy), policy_origin=self.origin, tightened=self.tightened)


def judging(baseline: Run, stored: GatePolicy | None, default: GatePolicy, asked: GateRequest) -> Judging:
    """The policy a run gated against `baseline` is judged by: the baseline's (`stored`; `default` for a baseline that
    carries none), made stricter as `asked` (`LooserThanPolicy` if it asks for anything looser)."""
    policy, made = named(stored or default, baseline).tightened(asked)
    return Judging(policy, "baseline" if stored is not None else "default", made)


def compare(run: Run, baseline: Run, policy: GatePolicy | None = None) -> GateResult:
    """Gate `run` against `baseline` by `policy`; the verdict, every reason behind it, and the policy with the
    metrics it gated.

    A metric the policy names must be in both runs. A policy naming none gates the default metrics at the run's
    largest k, of which `stale@k` is skipped with a warning when a run stored before it existed lacks it.
    """
    cfg = policy or GatePolicy()
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
        policy=replace(cfg, metrics=metrics),
    )


def _names(run: Run) -> set[str]:
    return set(run.cases[0].metrics) if run.cases else set()


def _check(
    metric: str, scope: str, pairs: Sequence[tuple[CaseResult, CaseResult]], tolerance: float, cfg: GatePolicy
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
