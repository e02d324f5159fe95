"""Retrieval metrics for one case: small pure functions over a `Judgement`.

Notation: results r1..rn; L the positive labels (grade > 0), each with grade g(l) and first satisfying
rank f(l) (∞ when no result satisfies it); rel(i) is true when r_i satisfies at least one label.
Every function raises EvalError when L is empty: such a case is an error, never a 1.0 or a 0.0.
With unit="doc" on BEIR-style data (one document per label) every relevance function equals
trec_eval's measure of the same name (see tests/eval/test_trec_eval_agreement.py); `stale@k`, the
freshness guard, has no trec_eval equivalent and is the one metric where lower is better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from eval.errors import EvalError
from eval.matching import Judgement


def _check(j: Judgement, k: int | None = None) -> None:
    if not j.first_ranks:
        raise EvalError("no label has a grade above 0: the case cannot be scored")
    if k is not None and k < 1:
        raise EvalError(f"k must be at least 1, got {k}")


def hit_at(j: Judgement, k: int) -> float:
    """hit@k = 1 if some label is satisfied within the top k, else 0. Never falls as k grows."""
    _check(j, k)
    return 1.0 if any(f is not None and f <= k for f in j.first_ranks) else 0.0


def recall_at(j: Judgement, k: int) -> float:
    """recall@k = |{l ∈ L : f(l) ≤ k}| / |L|. Each label counts once. Never falls as k grows."""
    _check(j, k)
    return sum(1 for f in j.first_ranks if f is not None and f <= k) / len(j.first_ranks)


def precision_at(j: Judgement, k: int) -> float:
    """precision@k = |{i ≤ k : rel(i)}| / k. Divides by k even when fewer than k results came back
    (trec_eval's P_k): a short list is not rewarded for its shortness."""
    _check(j, k)
    return sum(1 for ok in j.relevant[:k] if ok) / k


def mrr(j: Judgement, k: int | None = None) -> float:
    """Reciprocal rank = 1 / min{i : rel(i)}, 0 when no result is relevant; `k` cuts the list first
    (mrr@k). Equals 1 exactly when r1 is relevant."""
    _check(j, k)
    limit = len(j.relevant) if k is None else min(k, len(j.relevant))
    return next((1.0 / (i + 1) for i in range(limit) if j.relevant[i]), 0.0)


def ndcg_at(j: Judgement, k: int) -> float:
    """nDCG@k = DCG@k / IDCG@k with gain g(l), credited once per label, discount 1 / log2(1 + position).

    IDCG@k places every label once, best grades first: Σ_{p=1..min(k,|L|)} g_(p) / log2(1 + p).
    A label is credited at its first satisfying rank. When one result satisfies several labels at once
    they take consecutive positions from that rank (best grade first), since one result cannot fill
    several slots of a ranking; so 0 ≤ nDCG ≤ 1, and with one label per result (BEIR) positions
    equal ranks and this is trec_eval's ndcg_cut.
    """
    _check(j, k)
    ideal = _dcg(sorted(j.grades, reverse=True)[:k], range(1, k + 1))
    found = sorted(((f, -g) for f, g in zip(j.first_ranks, j.grades, strict=True) if f is not None and f <= k))
    positions: list[int] = []
    for rank, _ in found:
        positions.append(max(rank, positions[-1] + 1) if positions else rank)
    gains = [-neg for _, neg in found]
    credited = [(g, p) for g, p in zip(gains, positions, strict=True) if p <= k]
    dcg = _dcg([g for g, _ in credited], [p for _, p in credited])
    return dcg / ideal if ideal > 0 else 0.0


def _dcg(gains: Sequence[int], positions: Sequence[int] | range) -> float:
    return math.fsum(g / math.log2(1 + p) for g, p in zip(gains, positions, strict=False))


def stale_at(j: Judgement, k: int) -> float:
    """stale@k = 1 if some r_i with i ≤ k came from a document that was not current when retrieved
    (superseded, archived, draft, or at or past its valid_until), else 0: the freshness guard.

    Lower is better (see `lower_is_better`). Relevance plays no part: a stale document that answers the
    question still counts. A short list counts only what came back (no results: 0). Never falls as k grows.
    """
    _check(j, k)
    return 1.0 if any(j.stale[:k]) else 0.0


LOWER_IS_BETTER = frozenset({"stale"})


def lower_is_better(metric_name: str) -> bool:
    """True for metrics where a rise is a regression (`stale@k`); the gate reverses its direction for them.

    Example:
        >>> lower_is_better("stale@10"), lower_is_better("recall@10")
        (True, False)
    """
    return metric_name.partition("@")[0] in LOWER_IS_BETTER


def metric_names(ks: Sequence[int]) -> list[str]:
    """Report keys in a stable order: hit@k, recall@k, precision@k, mrr@k, ndcg@k, stale@k per k, then mrr."""
    names = [f"{m}@{k}" for k in sorted(set(ks)) for m in ("hit", "recall", "precision", "mrr", "ndcg", "stale")]
    return [*names, "mrr"]


def compute(j: Judgement, ks: Sequence[int]) -> dict[str, float]:
    """Every metric of `metric_names(ks)` for one case."""
    out: dict[str, float] = {}
    for k in sorted(set(ks)):
        out[f"hit@{k}"] = hit_at(j, k)
        out[f"recall@{k}"] = recall_at(j, k)
        out[f"precision@{k}"] = precision_at(j, k)
        out[f"mrr@{k}"] = mrr(j, k)
        out[f"ndcg@{k}"] = ndcg_at(j, k)
        out[f"stale@{k}"] = stale_at(j, k)
    out["mrr"] = mrr(j)
    return out
