"""Corpus hygiene, the pure half: the documents that take top-k slots without answering, their near-duplicates, and
what excluding them would change.

Every document that answers nothing still takes one of the k slots a question gets; pruning that noise (stale
copies, near-duplicates, boilerplate pages) often helps more than a new model. Four pieces:

- `distractor_report` (one run) and `distractor_report_over` (several, e.g. a set's recent monitoring runs): per
  document, the cases whose top k it crowded without answering, the slots it took, and the answering results it
  pushed below k (the rules are on `Distractor`). It reads each case's `CaseResult.relevant` flags; a case stored
  before they were kept is skipped and counted (rerun the set to see it).
- `duplicate_groups`: near-duplicate documents, by embedding cosine or by word-shingle Jaccard (rules there).
- `what_if`: the same cases run without and with an exclusion, per metric and category, paired case by case with
  a randomisation test (`eval.sweep.compare_paired`), and a one-line verdict per key metric.
- `format_distractors`: the report as a markdown table for the CLI, with freshness and duplicate-group columns.

Example:
    >>> from eval.cases import Case, Label
    >>> from eval.runner import FunctionRetriever, run_set
    >>> ranked = [Retrieved("faq#0", "faq"), Retrieved("refunds#0", "refunds"), Retrieved("refunds#1", "refunds")]
    >>> run = run_set([Case("c1", "refund window", (Label(doc_id="refunds"),))],
    ...               FunctionRetriever(lambda q: ranked), set_name="s", ks=(1,), depth=3)
    >>> row = distractor_report(run).rows[0]
    >>> row.doc_id, row.cases, row.slots, row.pushed
    ('faq', 1, 1, 1)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eval.errors import EvalError
from eval.matching import Retrieved, normalize
from eval.metrics import lower_is_better
from eval.report import mean_metrics
from eval.runner import CaseResult, Run
from eval.sweep import ALPHA, compare_paired

CHUNKS_SHOWN = 5  # a distractor's chunks kept, most slots first
EXAMPLES = 3  # a distractor's example case ids kept (the smallest ids, so a merge keeps the same ones)
SKIPPED_NOTE = "case(s) stored before relevance was kept: rerun the set to see their distractors"


# --- the report ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Distractor:
    """One document that took top-k slots without answering.

    Rules, per case whose top k (the first k retrieved results) holds `s ≥ 1` results of this document that satisfy
    no label (a *distractor slot* each), and `b` answering results ranked below k in the retrieved list:

    - `cases`: the cases so crowded (each once); `slots`: Σ s; `stale_slots`: those of the s results marked stale.
    - `pushed`: Σ min(s, b). Had this document's s slots been free, the next answering results below k would have
      moved up into them: as many as it took slots, and no more than there were. Each crowding document is credited
      so, by itself, so the `pushed` of several documents in one case may count the same hit twice; the report's
      own `DistractorReport.pushed` counts each case's hits once.
    - `categories`: category → cases crowded; `chunks`: chunk id → slots, the `CHUNKS_SHOWN` with most slots (then
      by id); `example_cases`: the `EXAMPLES` smallest case ids crowded.
    - `runs`: in how many of the runs it crowded some case. Over several runs every count is summed (a case crowded
      in three runs counts three times).
    """

    doc_id: str
    cases: int
    slots: int
    pushed: int
    categories: Mapping[str, int]
    chunks: Mapping[str, int]
    stale_slots: int
    example_cases: tuple[str, ...]
    runs: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id,
            "cases": self.cases,
            "slots": self.slots,
            "pushed": self.pushed,
            "categories": dict(self.categories),
            "chunks": dict(self.chunks),
            "stale_slots": self.stale_slots,
            "example_cases": list(self.example_cases),
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Distractor:
        return cls(
            str(obj["doc_id"]),
            int(obj["cases"]),
            int(obj["slots"]),
            int(obj["pushed"]),
            {str(k): int(v) for k, v in obj["categories"].items()},
            {str(k): int(v) for k, v in obj["chunks"].items()},
            int(obj["stale_slots"]),
            tuple(str(c) for c in obj["example_cases"]),
            int(obj.get("runs", 1)),
        )


@dataclass(frozen=True)
class CategoryShare:
    """One category's top-k slots (cases × k) and how many of them distractors took."""

    name: str
    cases: int
    slots: int
    top_k_slots: int

    @property
    def share(self) -> float:
        return self.slots / self.top_k_slots if self.top_k_slots else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cases": self.cases,
            "slots": self.slots,
            "top_k_slots": self.top_k_slots,
            "share": self.share,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CategoryShare:
        return cls(str(obj["name"]), int(obj["cases"]), int(obj["slots"]), int(obj["top_k_slots"]))


@dataclass(frozen=True)
class DistractorReport:
    """Distractors at `k` over the cases of `runs` (run ids) whose relevance flags are known.

    `cases` considered, `skipped` (stored before relevance was kept), `slots`: distractor slots in all, of
    `top_k_slots` = cases × k (so `share` = 1 − mean precision@k − the share of slots left empty by short lists);
    `stale_slots` of them stale; `pushed`: Σ over cases of min(distractor slots, answering results below k), the
    answering results that would have entered the top k had every distractor slot been free; `documents`: distinct
    distractor documents, of which `rows` holds the first `limit` (by cases, then slots, descending, then doc id);
    `by_category`: slots per category, the largest share first. Over several runs every count is summed.
    """

    k: int
    runs: tuple[str, ...]
    cases: int
    skipped: int
    slots: int
    top_k_slots: int
    pushed: int
    stale_slots: int
    documents: int
    rows: tuple[Distractor, ...]
    by_category: tuple[CategoryShare, ...] = ()
    depth: int = 0  # the most results a case of the shallowest run retrieved (its largest k, as a rule); 0: unknown

    @property
    def share(self) -> float:
        """The share of top-k slots taken by results that answer nothing."""
        return self.slots / self.top_k_slots if self.top_k_slots else 0.0

    @property
    def notes(self) -> tuple[str, ...]:
        out = []
        if self.skipped:
            out.append(f"{self.skipped} {SKIPPED_NOTE}")
        if not self.cases:
            out.append("no case with relevance flags: nothing to report")
        if self.documents > len(self.rows):
            out.append(f"{self.documents - len(self.rows)} more distractor document(s) not listed")
        if self.depth and self.depth <= self.k:
            out.append(
                f"pushed cannot be seen at k={self.k}: the runs retrieved {self.depth} result(s) per case, none below "
                "k; ask for a smaller k to see the answers the distractors kept out"
            )
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "runs": list(self.runs),
            "cases": self.cases,
            "skipped": self.skipped,
            "slots": self.slots,
            "top_k_slots": self.top_k_slots,
            "share": self.share,
            "pushed": self.pushed,
            "stale_slots": self.stale_slots,
            "documents": self.documents,
            "distractors": [r.to_json() for r in self.rows],
            "by_category": [c.to_json() for c in self.by_category],
            "notes": list(self.notes),
            "depth": self.depth,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DistractorReport:
        return cls(
            int(obj["k"]),
            tuple(str(r) for r in obj["runs"]),
            int(obj["cases"]),
            int(obj["skipped"]),
            int(obj["slots"]),
            int(obj["top_k_slots"]),
            int(obj["pushed"]),
            int(obj["stale_slots"]),
            int(obj["documents"]),
            tuple(Distractor.from_json(r) for r in obj["distractors"]),
            tuple(CategoryShare.from_json(c) for c in obj.get("by_category", ())),
            int(obj.get("depth", 0)),
        )


@dataclass
class _Tally:
    cases: int = 0
    slots: int = 0
    pushed: int = 0
    stale: int = 0
    categories: Counter[str] = field(default_factory=Counter)
    chunks: Counter[str] = field(default_factory=Counter)
    examples: set[str] = field(default_factory=set)
    runs: set[int] = field(default_factory=set)


def distractor_report(run: Run, *, k: int | None = None, limit: int = 20) -> DistractorReport:
    """The distractors of one run at `k` (default: the run's largest k); the first `limit` documents listed."""
    return distractor_report_over([run], k=k, limit=limit)


def distractor_report_over(runs: Sequence[Run], *, k: int | None = None, limit: int = 20) -> DistractorReport:
    """The distractors of several runs (a set's recent monitoring runs) in one report, every count summed and each
    document's `runs` saying in how many it crowded a case. `k` defaults to the runs' largest k (which must then be
    the same in all); it may be at most each run's largest k, since nothing below the retrieved depth is known."""
    if not runs:
        raise EvalError("no runs to report distractors for")
    if limit < 1:
        raise EvalError(f"limit must be at least 1, got {limit}")
    if k is None:
        largest = {max(r.ks) for r in runs}
        if len(largest) > 1:
            raise EvalError(f"the runs' largest k differ ({sorted(largest)}): pass k")
        k = largest.pop()
    too_shallow = [r.run_id for r in runs if k > max(r.ks)]
    if k < 1 or too_shallow:
        raise EvalError(f"k must be between 1 and each run's largest k, got {k} (too large for {too_shallow[:3]})")
    tallies: dict[str, _Tally] = {}
    categories: dict[str, list[int]] = {}  # name -> [cases, slots]
    considered = skipped = pushed = 0
    for index, run in enumerate(runs):
        for case in run.cases:
            if case.relevant is None:
                skipped += 1
                continue
            considered += 1
            pushed += _tally_case(case, k, index, tallies, run.run_id)
            share = categories.setdefault(case.category, [0, 0])
            share[0] += 1
            share[1] += sum(1 for ok in case.relevant[:k] if not ok)
    rows = sorted((_row(doc, t) for doc, t in tallies.items()), key=lambda r: (-r.cases, -r.slots, r.doc_id))
    by_category = sorted(
        (CategoryShare(name, n, slots, n * k) for name, (n, slots) in categories.items()),
        key=lambda c: (-c.share, c.name),
    )
    return DistractorReport(
        k=k,
        runs=tuple(r.run_id for r in runs),
        cases=considered,
        skipped=skipped,
        slots=sum(t.slots for t in tallies.values()),
        top_k_slots=considered * k,
        pushed=pushed,
        stale_slots=sum(t.stale for t in tallies.values()),
        documents=len(rows),
        rows=tuple(rows[:limit]),
        by_category=tuple(by_category),
        depth=min(max((len(c.retrieved) for c in r.cases), default=0) for r in runs),
    )


def _tally_case(case: CaseResult, k: int, run_index: int, tallies: dict[str, _Tally], run_id: str) -> int:
    """Add one case's distractor slots to `tallies`; the answering results it had below k that its distractor slots
    kept out (min of the two)."""
    relevant = case.relevant or ()
    if len(relevant) != len(case.retrieved):
        raise EvalError(
            f"case {case.case_id!r} of run {run_id}: {len(relevant)} relevance flags for {len(case.retrieved)} "
            "results: the stored run is inconsistent; rerun the set"
        )
    below = sum(1 for ok in relevant[k:] if ok)
    taken: dict[str, list[Retrieved]] = {}
    for result, ok in zip(case.retrieved[:k], relevant[:k], strict=True):
        if not ok:
            taken.setdefault(result.doc_id, []).append(result)
    for doc, results in taken.items():
        t = tallies.setdefault(doc, _Tally())
        t.cases += 1
        t.slots += len(results)
        t.pushed += min(len(results), below)
        t.stale += sum(1 for r in results if r.stale)
        t.categories[case.category] += 1
        t.chunks.update(r.chunk_id for r in results)
        t.examples.add(case.case_id)
        t.runs.add(run_index)
    return min(sum(len(rs) for rs in taken.values()), below)


def _row(doc: str, t: _Tally) -> Distractor:
    chunks = sorted(t.chunks.items(), key=lambda item: (-item[1], item[0]))[:CHUNKS_SHOWN]
    return Distractor(
        doc_id=doc,
        cases=t.cases,
        slots=t.slots,
        pushed=t.pushed,
        categories=dict(sorted(t.categories.items(), key=lambda item: (-item[1], item[0]))),
        chunks=dict(chunks),
        stale_slots=t.stale,
        example_cases=tuple(sorted(t.examples)[:EXAMPLES]),
        runs=len(t.runs),
    )


# --- near-duplicates -------------------------------------------------------------------------------------------------

SHINGLE = 5  # words (characters, for CJK) per shingle
TEXT_ONLY_JACCARD = 0.9  # shingle Jaccard at which two documents are duplicates whatever their headings

# Han, kana, Hangul: written without spaces between words (Hangul with some), so each character is a token
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")


@dataclass(frozen=True)
class DocSketch:
    """What near-duplicate detection reads of a document: its text, its heading paths (e.g. "Billing > Refunds"),
    and its embedding (None when not known)."""

    text: str
    headings: tuple[str, ...] = ()
    vector: Sequence[float] | None = None


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The text's 5-token shingles after `normalize`: tokens are words (letters and digits; punctuation dropped), and
    each CJK character is a token of its own, so CJK text gets character shingles. A text of fewer tokens is one
    shingle; an empty one has none.

    Example:
        >>> sorted(shingles("One, two three four five SIX"))
        [('one', 'two', 'three', 'four', 'five'), ('two', 'three', 'four', 'five', 'six')]
        >>> len(shingles("退款期限为三十天")), len(shingles("two words"))
        (4, 1)
    """
    tokens = _TOKEN.findall(normalize(text))
    if len(tokens) < SHINGLE:
        return frozenset([tuple(tokens)]) if tokens else frozenset()
    return frozenset(tuple(tokens[i : i + SHINGLE]) for i in range(len(tokens) - SHINGLE + 1))


def jaccard(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """|a ∩ b| / |a ∪ b|; 0 when both are empty (an empty text duplicates nothing)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def duplicate_groups(
    docs: Mapping[str, DocSketch], *, cosine: float = 0.95, jaccard: float = 0.8
) -> list[tuple[str, ...]]:
    """Groups of near-duplicate documents. Two documents are duplicates when

    1. both have vectors and their cosine similarity is at least `cosine` (a zero vector is like none), or
    2. they have the same heading paths (as a set, non-empty) and their shingles' (`shingles`) Jaccard similarity
       is at least `jaccard`, or
    3. their shingles' Jaccard similarity alone is at least max(`jaccard`, `TEXT_ONLY_JACCARD` = 0.9).

    Duplicates of duplicates are one group (union-find); each group is sorted, the groups sorted, singletons left
    out. Deterministic: no sampling (pairs are found exactly, by prefix filtering on the rarest shingles).

    Example:
        >>> text = "refunds for annual plans are paid within thirty days of the request"
        >>> duplicate_groups({
        ...     "a": DocSketch(text, ("Billing > Refunds",)),
        ...     "b": DocSketch(text + " today", ("Billing > Refunds",)),
        ...     "c": DocSketch("how to reset a password", (), [1.0, 0.0]),
        ...     "d": DocSketch("resetting your password", (), [0.99, 0.01]),
        ... })
        [('a', 'b'), ('c', 'd')]
    """
    for name, value in (("cosine", cosine), ("jaccard", jaccard)):
        if not 0 < value <= 1:
            raise EvalError(f"{name} must be in (0, 1], got {value}")
    ids = sorted(docs)
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        a, b = find(i), find(j)
        if a != b:
            parent[max(a, b)] = min(a, b)

    for i, j in _vector_pairs([docs[d].vector for d in ids], ids, cosine):
        union(i, j)
    sets = [shingles(docs[d].text) for d in ids]
    heads = [frozenset(docs[d].headings) for d in ids]
    alone = max(jaccard, TEXT_ONLY_JACCARD)
    for i, j in _candidate_pairs(sets, min(jaccard, alone)):
        sim = _jaccard(sets[i], sets[j])
        if sim >= alone - 1e-12 or (sim >= jaccard - 1e-12 and heads[i] and heads[i] == heads[j]):
            union(i, j)
    groups: dict[int, list[str]] = {}
    for i, d in enumerate(ids):
        groups.setdefault(find(i), []).append(d)
    return sorted(tuple(g) for g in groups.values() if len(g) > 1)


_jaccard = jaccard  # `duplicate_groups` has a parameter of that name


def _vector_pairs(
    vectors: Sequence[Sequence[float] | None], ids: Sequence[str], cosine: float
) -> list[tuple[int, int]]:
    present = [i for i, v in enumerate(vectors) if v is not None]
    if len(present) < 2:
        return []
    dims = {len(vectors[i] or ()) for i in present}
    if len(dims) > 1:
        first = {len(vectors[i] or ()): ids[i] for i in present}
        raise EvalError(f"vectors of different lengths ({first}): sketch every document with the same model")
    matrix = np.array([vectors[i] for i in present], dtype=float)
    norms = np.linalg.norm(matrix, axis=1)
    keep = norms > 0
    matrix = matrix[keep] / norms[keep, None]
    index = [i for i, k in zip(present, keep, strict=True) if k]
    pairs = []
    for start in range(0, len(index), 1024):  # blocks keep memory flat for large corpora
        sims = matrix[start : start + 1024] @ matrix.T
        for a, b in zip(*np.nonzero(sims >= cosine - 1e-9), strict=True):
            if start + a < b:
                pairs.append((index[start + a], index[b]))
    return pairs


def _candidate_pairs(sets: Sequence[frozenset[tuple[str, ...]]], threshold: float) -> set[tuple[int, int]]:
    """Every pair (i < j) whose Jaccard similarity may reach `threshold`, and some that do not: with the shingles
    ordered rarest first, two sets with J ≥ t share a shingle among the first |s| − ⌈t·|s|⌉ + 1 of each."""
    df = Counter(s for shingle_set in sets for s in shingle_set)
    index: dict[tuple[str, ...], list[int]] = {}
    pairs: set[tuple[int, int]] = set()
    for i, shingle_set in enumerate(sets):
        ordered = sorted(shingle_set, key=lambda s: (df[s], s))
        prefix = len(ordered) - math.ceil(threshold * len(ordered) - 1e-9) + 1
        for s in ordered[:prefix]:
            pairs.update((j, i) for j in index.get(s, ()))
            index.setdefault(s, []).append(i)
    return pairs


# --- what-if ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricWhatIf:
    """One metric over all cases, without (`base`) and with the exclusion (`pruned`): `delta` = pruned − base, and the
    one-sided paired randomisation p-value of a change this large in the direction observed (None when no case
    changed); `significant` when p < 0.05. For `stale@k` lower is better: a fall is what helps.

    Example:
        >>> MetricWhatIf("precision@10", 0.31, 0.42, 0.0004, True, 50).verdict
        'precision@10 0.310 → 0.420 (+0.110, p<0.001): excluding them helps'
        >>> MetricWhatIf("stale@10", 0.2, 0.25, 0.31, False, 50).verdict
        'stale@10 0.200 → 0.250 (+0.050, p=0.310): not significant'
    """

    metric: str
    base: float
    pruned: float
    p_value: float | None
    significant: bool
    cases: int

    @property
    def delta(self) -> float:
        return self.pruned - self.base

    @property
    def lower_is_better(self) -> bool:
        return lower_is_better(self.metric)

    @property
    def improvement(self) -> float:
        """`delta` with positive meaning the exclusion is better."""
        return -self.delta if self.lower_is_better else self.delta

    @property
    def verdict(self) -> str:
        """One line, e.g. "precision@10 0.310 → 0.420 (+0.110, p=0.004): excluding them helps"."""
        head = f"{self.metric} {self.base:.3f} → {self.pruned:.3f} ({self.delta:+.3f}"
        if self.p_value is None:
            return f"{head}): no case changed"
        p = "p<0.001" if self.p_value < 0.001 else f"p={self.p_value:.3f}"
        if not self.significant:
            effect = "not significant"
        else:
            effect = "excluding them helps" if self.improvement > 0 else "excluding them hurts"
        return f"{head}, {p}): {effect}"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "base": self.base,
            "pruned": self.pruned,
            "delta": self.delta,
            "p_value": self.p_value,
            "significant": self.significant,
            "cases": self.cases,
            "lower_is_better": self.lower_is_better,
            "verdict": self.verdict,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MetricWhatIf:
        p = obj.get("p_value")
        return cls(
            str(obj["metric"]),
            float(obj["base"]),
            float(obj["pruned"]),
            None if p is None else float(p),
            bool(obj["significant"]),
            int(obj["cases"]),
        )


@dataclass(frozen=True)
class CategoryWhatIf:
    """One category's mean metrics without (`base`) and with the exclusion (`pruned`), over its `cases`."""

    name: str
    cases: int
    base: Mapping[str, float]
    pruned: Mapping[str, float]

    @property
    def delta(self) -> dict[str, float]:
        return {m: self.pruned[m] - self.base[m] for m in self.base}

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cases": self.cases,
            "base": dict(self.base),
            "pruned": dict(self.pruned),
            "delta": self.delta,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CategoryWhatIf:
        return cls(
            str(obj["name"]),
            int(obj["cases"]),
            {str(k): float(v) for k, v in obj["base"].items()},
            {str(k): float(v) for k, v in obj["pruned"].items()},
        )


@dataclass(frozen=True)
class WhatIf:
    """The same cases run without (`base_run`) and with an exclusion (`pruned_run`): every metric both runs have,
    overall (`metrics`) and per category (`by_category`, by name), and the verdicts on the key metrics."""

    base_run: str
    pruned_run: str
    k: int  # the largest k both runs have: the key metrics' k
    metrics: tuple[MetricWhatIf, ...]
    by_category: tuple[CategoryWhatIf, ...]

    def metric(self, name: str) -> MetricWhatIf:
        found = next((m for m in self.metrics if m.metric == name), None)
        if found is None:
            raise EvalError(f"no metric {name!r} in both runs; they have {[m.metric for m in self.metrics]}")
        return found

    @property
    def key_metrics(self) -> tuple[str, ...]:
        names = {m.metric for m in self.metrics}
        wanted = (f"precision@{self.k}", f"recall@{self.k}", f"ndcg@{self.k}", f"mrr@{self.k}", f"stale@{self.k}")
        return tuple(m for m in wanted if m in names)

    @property
    def verdicts(self) -> tuple[str, ...]:
        """One line per key metric (precision, recall, nDCG, MRR and stale at `k`)."""
        return tuple(self.metric(m).verdict for m in self.key_metrics)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_run": self.base_run,
            "pruned_run": self.pruned_run,
            "k": self.k,
            "metrics": [m.to_json() for m in self.metrics],
            "by_category": [c.to_json() for c in self.by_category],
            "verdicts": list(self.verdicts),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> WhatIf:
        return cls(
            str(obj["base_run"]),
            str(obj["pruned_run"]),
            int(obj["k"]),
            tuple(MetricWhatIf.from_json(m) for m in obj["metrics"]),
            tuple(CategoryWhatIf.from_json(c) for c in obj["by_category"]),
        )


def what_if(base: Run, pruned: Run, *, seed: int = 0) -> WhatIf:
    """Compare a run of a set (`base`) with a run of the same cases that excluded some documents (`pruned`), paired
    on case id (`eval.sweep.compare_paired`; a case's category is the base run's). EvalError when the case ids
    differ, when the runs' units differ, or when they share no metric."""
    if base.unit != pruned.unit:
        raise EvalError(f"the base run is unit={base.unit!r} but the pruned one unit={pruned.unit!r}: not comparable")
    before = {c.case_id: c for c in base.cases}
    after = {c.case_id: c for c in pruned.cases}
    if set(before) != set(after) or len(before) != len(base.cases) or len(after) != len(pruned.cases):
        only_b, only_p = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        raise EvalError(
            f"the runs are not of the same cases (only the base's: {only_b[:5]}, only the pruned's: {only_p[:5]}, "
            "or a case id repeats): run the same set with and without the exclusion"
        )
    if not before:
        raise EvalError("the runs have no cases to compare")
    shared = set.intersection(*(set(c.metrics) for c in (*base.cases, *pruned.cases)))
    names = [m for m in base.cases[0].metrics if m in shared]
    common_ks = set(base.ks) & set(pruned.ks)
    if not names or not common_ks:
        raise EvalError("the runs share no metric: run both with the same k values")
    ids = sorted(before)
    overall = []
    for name in names:
        b = {i: before[i].metrics[name] for i in ids}
        p = {i: after[i].metrics[name] for i in ids}
        lower = lower_is_better(name)
        better = compare_paired(p, b, seed=seed, lower_is_better=lower)
        # compare_paired asks "is the pruned run this much better by chance"; for a drop, ask the reverse
        chosen = better if better.improvement >= 0 else compare_paired(b, p, seed=seed, lower_is_better=lower)
        significant = chosen.p_value is not None and chosen.p_value < ALPHA
        overall.append(
            MetricWhatIf(name, better.current_mean, better.winner_mean, chosen.p_value, significant, len(ids))
        )
    categories: dict[str, list[str]] = {}
    for i in ids:
        categories.setdefault(before[i].category, []).append(i)
    by_category = tuple(
        CategoryWhatIf(
            name,
            len(members),
            _means([before[i] for i in members], names),
            _means([after[i] for i in members], names),
        )
        for name, members in sorted(categories.items())
    )
    return WhatIf(base.run_id, pruned.run_id, max(common_ks), tuple(overall), by_category)


def _means(cases: Sequence[CaseResult], names: Iterable[str]) -> dict[str, float]:
    means = mean_metrics(cases)
    return {m: means[m] for m in names}


# --- the CLI table ---------------------------------------------------------------------------------------------------

FRESHNESS = ("status", "updated_at", "owner", "superseded_by")


def format_distractors(
    report: DistractorReport,
    freshness: Mapping[str, Mapping[str, Any]] | None = None,
    groups: Sequence[Sequence[str]] = (),
) -> str:
    """The report as text for the CLI: a summary, then a markdown table (doc id, cases crowded, slots, pushed,
    categories; the freshness columns status, updated_at, owner and superseded_by when `freshness` (doc id → fields)
    is given; a duplicate-group marker G1, G2, … when `groups` (`duplicate_groups`) are), then the groups.

    Example:
        >>> row = Distractor("faq", 2, 3, 1, {"billing": 2}, {"faq#0": 3}, 0, ("c1", "c2"))
        >>> report = DistractorReport(10, ("r1",), 4, 0, 3, 40, 1, 0, 1, (row,))
        >>> print(format_distractors(report, groups=[("faq", "faq-old")]))
        distractors at k=10 over 4 case(s): 3 of 40 top-k slots (7.5%) answered nothing
        1 answering result(s) kept below k by them
        <BLANKLINE>
        | doc | cases | slots | pushed | categories | dup |
        |---|---|---|---|---|---|
        | faq | 2 | 3 | 1 | billing:2 | G1 |
        <BLANKLINE>
        G1: faq, faq-old
    """
    runs = f" in {len(report.runs)} runs" if len(report.runs) > 1 else ""
    lines = [
        f"distractors at k={report.k} over {report.cases} case(s){runs}: {report.slots} of {report.top_k_slots} "
        f"top-k slots ({report.share:.1%}) answered nothing",
        f"{report.pushed} answering result(s) kept below k by them",
    ]
    lines.extend(report.notes)
    shares = [f"{c.name} {c.share:.1%}" for c in report.by_category]
    if len(shares) > 1:
        lines.append("by category: " + ", ".join(shares))
    if not report.rows:
        return "\n".join([*lines, "", "no distractors"])
    marker = {d: f"G{n}" for n, group in enumerate(groups, 1) for d in group}
    header = ["doc", "cases", "slots", "pushed", "categories"]
    if freshness is not None:
        header.extend(FRESHNESS)
    if groups:
        header.append("dup")
    lines.extend(["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)])
    for r in report.rows:
        cells = [r.doc_id, str(r.cases), str(r.slots), str(r.pushed)]
        cells.append(", ".join(f"{name}:{n}" for name, n in r.categories.items()))
        if freshness is not None:
            known = freshness.get(r.doc_id, {})
            cells.extend("-" if known.get(key) is None else str(known[key]) for key in FRESHNESS)
        if groups:
            cells.append(marker.get(r.doc_id, ""))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    listed = {r.doc_id for r in report.rows}
    shown = [(n, group) for n, group in enumerate(groups, 1) if listed & set(group)]
    if shown:
        lines.append("")
        lines.extend(f"G{n}: {', '.join(group)}" for n, group in shown)
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
