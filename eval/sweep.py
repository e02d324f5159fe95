"""Parameter sweeps, the pure half: the space, its configurations, the tune/test split, the rows, the Pareto front,
the winner and its held-out comparison with the current configuration.

The service builds an index per chunking (`INDEX_PARAMETERS`) and replays the tune split per configuration, timing
each search; everything else is here. A sweep chooses on the tune split only, then reports the winner against the
current configuration on the held-out test split, paired case by case (`compare_paired`): a winner chosen among many
configurations on the same cases looks better there than it is, and only the held-out split says by how much.

Parameters some configurations ignore are dropped from those configurations, and configurations that then coincide
are merged (counted in `SweepSpace.notes`): `alpha` under `fusion=rrf`, `rrf_k` under `fusion=weighted`, `fusion`,
`alpha` and `rrf_k` under `mode=dense` or `mode=keyword`, `rerank_depth` under `rerank=false`. Invalid combinations
(`chunk_overlap` ≥ `chunk_size`/2, `candidates` below `k`) are dropped and counted, never silently.

Example:
    >>> space = SweepSpace.parse({"chunk_size": [400, 800], "fusion": ["weighted", "rrf"], "alpha": [0.3, 0.7]})
    >>> for config in space.grid()[:3]:
    ...     print(config.label())
    chunk_size=400 fusion=weighted alpha=0.3
    chunk_size=400 fusion=weighted alpha=0.7
    chunk_size=400 fusion=rrf
    >>> space.size, space.notes[0]
    (6, '2 combination(s) merged: a parameter their configuration ignores (alpha under fusion=rrf) told them apart')
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random as _random
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from eval.cases import Case
from eval.errors import EvalError
from eval.gate import paired_randomization_p
from eval.metrics import lower_is_better
from eval.report import mean_metrics
from eval.runner import CaseResult

Value = int | float | bool | str

MAX_CONFIGS = 200  # a grid larger than this is refused: use random search, or shrink the space
MAX_COMBINATIONS = 100_000  # the most combinations a space may hold before merging and dropping (it is enumerated)
ALPHA = 0.05  # the held-out comparison's significance level
TIE = 1e-9  # qualities closer than this are a tie (`choose`)


@dataclass(frozen=True)
class Parameter:
    """One sweepable parameter: its kind ("int", "float", "bool" or "choice") and its bounds or choices.

    Example:
        >>> PARAMETERS["alpha"].check(1)
        1.0
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    index: bool = False  # changing it needs a rebuilt index

    def check(self, value: object) -> Value:
        """`value` as this parameter's type, or EvalError saying what it must be."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise EvalError(f"{self.name} values must be true or false, got {value!r}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise EvalError(f"{self.name} values must be one of {list(self.choices)}, got {value!r}")
            return str(value)
        number: int | float
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise EvalError(f"{self.name} values must be whole numbers, got {value!r}")
            number = value
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise EvalError(f"{self.name} values must be numbers, got {value!r}")
            number = float(value)
        if not ((self.low is None or number >= self.low) and (self.high is None or number <= self.high)):
            raise EvalError(f"{self.name} values must be {self.bounds()}, got {value!r}")
        return number

    def bounds(self) -> str:
        if self.high is None:
            return f">= {self.low:g}"
        return f"between {self.low:g} and {self.high:g}"

    def example(self) -> Value:
        """A valid value, for messages."""
        if self.kind == "bool":
            return True
        if self.kind == "choice":
            return self.choices[0]
        return float(self.low or 0) if self.kind == "float" else int(self.low or 0)

    def order(self, value: Value) -> tuple[int, float | str]:
        """Sort key of a value: numbers ascending, false before true, choices in their declared order."""
        if self.kind == "choice":
            return (self.choices.index(str(value)), "")
        return (0, float(value))


PARAMETERS: Mapping[str, Parameter] = {
    p.name: p
    for p in (
        Parameter("chunk_size", "int", 100, 20_000, index=True),
        # below chunk_size / 2 as well: checked per configuration
        Parameter("chunk_overlap", "int", 0, None, index=True),
        Parameter("mode", "choice", choices=("hybrid", "dense", "keyword")),
        Parameter("fusion", "choice", choices=("weighted", "rrf")),
        Parameter("alpha", "float", 0, 1),
        Parameter("rrf_k", "int", 1, None),
        Parameter("candidates", "int", 1, 1000),
        Parameter("rerank", "bool"),
        Parameter("rerank_depth", "int", 1, 1000),
        Parameter("k", "int", 1, 100),
    )
}
INDEX_PARAMETERS = ("chunk_size", "chunk_overlap")  # a configuration that changes these needs its own index
SEARCH_PARAMETERS = tuple(name for name in PARAMETERS if name not in INDEX_PARAMETERS)
_ORDER = {name: n for n, name in enumerate(PARAMETERS)}


def _format(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Config(Mapping[str, Value]):
    """One configuration: the swept parameters' values (those left out keep the service's), in `PARAMETERS` order.

    Example:
        >>> c = Config.of({"alpha": 0.3, "chunk_size": 500, "mode": "hybrid"})
        >>> c.label(), dict(c.index_key()), c.search_part()
        ('chunk_size=500 mode=hybrid alpha=0.3', {'chunk_size': 500}, {'mode': 'hybrid', 'alpha': 0.3})
    """

    pairs: tuple[tuple[str, Value], ...] = ()

    @classmethod
    def of(cls, values: Mapping[str, object]) -> Config:
        """A validated configuration (EvalError naming what is wrong)."""
        unknown = sorted(set(values) - set(PARAMETERS))
        if unknown:
            raise EvalError(f"unknown parameter(s) {unknown}; sweepable: {', '.join(PARAMETERS)}")
        checked = {name: PARAMETERS[name].check(v) for name, v in values.items()}
        problem = _invalid(checked)
        if problem:
            raise EvalError(f"invalid configuration: {problem}")
        return cls(tuple(sorted(checked.items(), key=lambda kv: _ORDER[kv[0]])))

    def __getitem__(self, name: str) -> Value:
        for key, value in self.pairs:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def index_key(self) -> Config:
        """The chunking part, itself a (hashable) Config: configurations with equal keys share one index."""
        return Config(tuple((k, v) for k, v in self.pairs if k in INDEX_PARAMETERS))

    def search_part(self) -> dict[str, Value]:
        """The search parameters, as the service's search overrides take them."""
        return {k: v for k, v in self.pairs if k not in INDEX_PARAMETERS}

    def label(self) -> str:
        """Short and readable, unique within a sweep: `chunk_size=500 mode=hybrid alpha=0.3`."""
        return " ".join(f"{k}={_format(v)}" for k, v in self.pairs) or "(the service's settings)"

    def to_json(self) -> dict[str, Value]:
        return dict(self.pairs)

    @classmethod
    def from_json(cls, obj: object) -> Config:
        if not isinstance(obj, Mapping):
            raise EvalError("a configuration must be an object of parameter values")
        return cls.of(obj)


def _invalid(values: Mapping[str, Value]) -> str | None:
    """Why this combination cannot run, or None."""
    size, overlap = values.get("chunk_size"), values.get("chunk_overlap")
    if size is not None and overlap is not None and float(overlap) >= float(size) / 2:
        return "chunk_overlap >= chunk_size/2"
    candidates, k = values.get("candidates"), values.get("k")
    if candidates is not None and k is not None and float(candidates) < float(k):
        return "candidates below k"
    return None


def _ignored(values: Mapping[str, Value]) -> tuple[tuple[str, str], ...]:
    """(parameter, why) for each parameter this combination ignores."""
    out: list[tuple[str, str]] = []
    mode, fusion = values.get("mode"), values.get("fusion")
    if mode in ("dense", "keyword"):
        out.extend((p, f"under mode={mode}") for p in ("fusion", "alpha", "rrf_k") if p in values)
    else:
        if fusion == "rrf" and "alpha" in values:
            out.append(("alpha", "under fusion=rrf"))
        if fusion == "weighted" and "rrf_k" in values:
            out.append(("rrf_k", "under fusion=weighted"))
    if values.get("rerank") is False and "rerank_depth" in values:
        out.append(("rerank_depth", "under rerank=false"))
    return tuple(out)


@dataclass(frozen=True)
class SweepSpace:
    """The values to sweep per parameter (each list sorted, parameters in `PARAMETERS` order: the index parameters
    outermost, so configurations sharing an index are adjacent in `grid()`).

    Example:
        >>> space = SweepSpace.parse({"k": [5, 10], "chunk_size": [300, 600]})
        >>> [c.label() for c in space.grid()]
        ['chunk_size=300 k=5', 'chunk_size=300 k=10', 'chunk_size=600 k=5', 'chunk_size=600 k=10']
        >>> [c.label() for c in space.random(2, seed=1)] == [c.label() for c in space.random(2, seed=1)]
        True
    """

    axes: tuple[tuple[str, tuple[Value, ...]], ...]
    max_configs: int = MAX_CONFIGS

    @classmethod
    def parse(cls, obj: Mapping[str, Any], *, max_configs: int = MAX_CONFIGS) -> SweepSpace:
        """Validate `{"parameter": [values, ...]}`: every problem in one EvalError."""
        if not isinstance(obj, Mapping):
            raise EvalError('a sweep space must be an object of value lists, e.g. {"alpha": [0.3, 0.5, 0.7]}')
        if isinstance(max_configs, bool) or not isinstance(max_configs, int) or max_configs < 1:
            raise EvalError(f"max_configs must be a whole number >= 1, got {max_configs!r}")
        if not obj:
            raise EvalError(f"the sweep space names no parameter; sweepable: {', '.join(PARAMETERS)}")
        problems: list[str] = []
        unknown = sorted(str(name) for name in obj if name not in PARAMETERS)
        if unknown:
            problems.append(f"unknown parameter(s) {unknown}; sweepable: {', '.join(PARAMETERS)}")
        axes: list[tuple[str, tuple[Value, ...]]] = []
        for name in sorted((n for n in obj if n in PARAMETERS), key=_ORDER.__getitem__):
            raw, param = obj[name], PARAMETERS[name]
            if not isinstance(raw, list | tuple):
                problems.append(f"{name}: give a list of values, e.g. [{_format(param.example())}]")
                continue
            if not raw:
                problems.append(f"{name}: the list is empty; give at least one value, or leave {name} out")
                continue
            values: list[Value] = []
            for value in raw:
                try:
                    checked = param.check(value)
                except EvalError as exc:
                    problems.append(str(exc))
                    continue
                if checked in values:
                    problems.append(f"{name}: {_format(checked)} is listed twice")
                    continue
                values.append(checked)
            axes.append((name, tuple(sorted(values, key=param.order))))
        if "chunk_overlap" in obj and "chunk_size" not in obj:
            problems.append(
                "chunk_overlap is checked against chunk_size: give chunk_size too (a list of one value keeps it fixed)"
            )
        if problems:
            raise EvalError("invalid sweep space: " + "; ".join(problems))
        combinations = math.prod(len(values) for _, values in axes)
        if combinations > MAX_COMBINATIONS:
            raise EvalError(
                f"the sweep space has {combinations:,} combinations, more than {MAX_COMBINATIONS:,}: "
                "give fewer values per parameter"
            )
        return cls(tuple(axes), max_configs)

    @cached_property
    def _expanded(self) -> tuple[tuple[Config, ...], tuple[str, ...]]:
        configs: dict[Config, None] = {}
        invalid: dict[str, int] = {}
        merged: dict[str, int] = {}
        names = [name for name, _ in self.axes]
        for combo in itertools.product(*(values for _, values in self.axes)):
            values = dict(zip(names, combo, strict=True))
            problem = _invalid(values)
            if problem:
                invalid[problem] = invalid.get(problem, 0) + 1
                continue
            ignored = _ignored(values)
            config = Config(tuple((k, v) for k, v in values.items() if k not in {p for p, _ in ignored}))
            if config in configs:
                why = ", ".join(f"{p} {w}" for p, w in ignored)
                merged[why] = merged.get(why, 0) + 1
                continue
            configs[config] = None
        notes = [f"{n} combination(s) dropped: {why}" for why, n in sorted(invalid.items())]
        notes.extend(
            f"{n} combination(s) merged: a parameter their configuration ignores ({why}) told them apart"
            for why, n in sorted(merged.items())
        )
        return tuple(configs), tuple(notes)

    @property
    def size(self) -> int:
        """How many distinct, valid configurations the space holds."""
        return len(self._expanded[0])

    @property
    def notes(self) -> tuple[str, ...]:
        """What was dropped (invalid) or merged (identical once ignored parameters are left out), with counts."""
        return self._expanded[1]

    def grid(self) -> list[Config]:
        """Every configuration, index parameters outermost; EvalError when there are more than `max_configs`."""
        configs = self._expanded[0]
        if not configs:
            raise EvalError("no valid configuration in the sweep space: " + "; ".join(self.notes))
        if len(configs) > self.max_configs:
            raise EvalError(
                f"the grid has {len(configs)} configurations, more than the bound {self.max_configs}: "
                f"use random search with n <= {self.max_configs}, or shrink the space"
            )
        return list(configs)

    def random(self, n: int, seed: int) -> list[Config]:
        """`n` distinct configurations drawn from the grid (all of them when it holds no more than `n`), seeded, in
        grid order (configurations sharing an index stay adjacent)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.max_configs:
            raise EvalError(f"random search takes n between 1 and {self.max_configs}, got {n!r}")
        configs = self._expanded[0]
        if not configs:
            raise EvalError("no valid configuration in the sweep space: " + "; ".join(self.notes))
        if n >= len(configs):
            return list(configs)
        chosen = sorted(_random.Random(seed).sample(range(len(configs)), n))
        return [configs[i] for i in chosen]

    def to_json(self) -> dict[str, Any]:
        return {"parameters": {name: list(values) for name, values in self.axes}, "max_configs": self.max_configs}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SweepSpace:
        return cls.parse(obj["parameters"], max_configs=int(obj.get("max_configs", MAX_CONFIGS)))


# --- splitting -------------------------------------------------------------------------------------------------------

SPLIT_ORIGINS = ("case", "hash", "mixed")


def hash_share(seed: int, case_id: str) -> float:
    """Where a case falls in [0, 1), from sha256 of `"{seed}:{id}"`: stable across runs, machines and set order.

    Example:
        >>> 0 <= hash_share(0, "c-1") < 1, hash_share(0, "c-1") == hash_share(0, "c-1")
        (True, True)
    """
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_cases(cases: Sequence[Case], *, seed: int, test_share: float = 0.5) -> tuple[list[Case], list[Case], str]:
    """(tune, test, origin). Cases that carry `split` keep it; the others go to test when their `hash_share` is below
    `test_share`. origin: "case" (every case carried one), "hash" (none did) or "mixed".

    Example:
        >>> from eval.cases import Label
        >>> cases = [Case(f"c{i}", "q", (Label(doc_id="d"),), split=("tune", "test")[i % 2]) for i in range(4)]
        >>> tune, test, origin = split_cases(cases, seed=0)
        >>> [c.id for c in tune], [c.id for c in test], origin
        (['c0', 'c2'], ['c1', 'c3'], 'case')
    """
    if not 0 < test_share < 1:
        raise EvalError(f"test_share must be between 0 and 1 (exclusive), got {test_share!r}")
    labelled = sum(1 for c in cases if c.split is not None)
    origin = "case" if labelled == len(cases) else "hash" if labelled == 0 else "mixed"
    tune: list[Case] = []
    test: list[Case] = []
    for case in cases:
        side = case.split or ("test" if hash_share(seed, case.id) < test_share else "tune")
        (test if side == "test" else tune).append(case)
    if not tune or not test:
        empty = "tune" if not tune else "test"
        advice = {
            "case": f'label some cases "split": "{empty}"',
            "hash": f"add cases (a split needs at least 2), or try another seed or test_share (now {test_share:g})",
            "mixed": f'label some cases "split": "{empty}", or leave more cases unlabelled',
        }[origin]
        raise EvalError(
            f"the {empty} split is empty: tune has {len(tune)} case(s), test {len(test)} (split by {origin}); {advice}"
        )
    return tune, test, origin


@dataclass(frozen=True)
class SplitSummary:
    """How a sweep's cases were split: origin ("case", "hash" or "mixed"), the seed and the counts."""

    origin: str
    tune: int
    test: int
    seed: int = 0
    test_share: float = 0.5

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "tune": self.tune,
            "test": self.test,
            "seed": self.seed,
            "test_share": self.test_share,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SplitSummary:
        return cls(obj["origin"], int(obj["tune"]), int(obj["test"]), int(obj["seed"]), float(obj["test_share"]))


# --- rows ------------------------------------------------------------------------------------------------------------


def context_tokens(texts: Sequence[str], count: Callable[[str], int]) -> int:
    """The tokens a generator would receive: the sum over the texts it is given.

    Example:
        >>> context_tokens(["a b", "c"], lambda t: len(t.split()))
        3
    """
    return sum(count(t) for t in texts)


def latency_summary(ms: Sequence[float]) -> tuple[float, float]:
    """(p50, p95) of search times in milliseconds, linear interpolation between ranks.

    Example:
        >>> latency_summary([10.0, 20.0, 30.0])
        (20.0, 29.0)
    """
    if not ms:
        raise EvalError("no search was timed")
    p50, p95 = np.percentile(np.asarray(ms, dtype=float), [50, 95])
    return float(p50), float(p95)


@dataclass(frozen=True)
class Row:
    """One configuration's outcome on the tune split: mean metrics, the chosen metric per case (for paired tests),
    search latency, the median context tokens per query, and whether it is on the Pareto front.

    Example:
        >>> row = Row(Config.of({"k": 5}), {"recall@5": 0.8}, {"c1": 1.0, "c2": 0.6}, 12.0, 30.5, 900.0)
        >>> Row.from_json(row.to_json()) == row
        True
    """

    config: Config
    metrics: Mapping[str, float]
    case_metrics: Mapping[str, float]
    p50_ms: float
    p95_ms: float
    context_tokens: float
    pareto: bool = False

    @property
    def label(self) -> str:
        return self.config.label()

    def quality(self, metric: str) -> float:
        if metric not in self.metrics:
            raise EvalError(f"{self.label}: no metric {metric!r}; it has {', '.join(self.metrics)}")
        return self.metrics[metric]

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config.to_json(),
            "label": self.label,
            "metrics": dict(self.metrics),
            "case_metrics": dict(self.case_metrics),
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "context_tokens": self.context_tokens,
            "pareto": self.pareto,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Row:
        return cls(
            Config.from_json(obj["config"]),
            {k: float(v) for k, v in obj["metrics"].items()},
            {k: float(v) for k, v in obj["case_metrics"].items()},
            float(obj["p50_ms"]),
            float(obj["p95_ms"]),
            float(obj["context_tokens"]),
            bool(obj.get("pareto", False)),
        )


def make_row(
    config: Config,
    cases: Sequence[CaseResult],
    *,
    quality: str,
    latencies_ms: Sequence[float],
    contexts: Sequence[Sequence[str]],
    count: Callable[[str], int],
) -> Row:
    """A row from a configuration's tune-split results: `latencies_ms` one per search, `contexts` the top-k texts per
    query (what a generator would receive), `count` a tokenizer's length."""
    if not cases:
        raise EvalError(f"{config.label()}: no case results")
    if quality not in cases[0].metrics:
        raise EvalError(f"no metric {quality!r} in the results; they have {', '.join(cases[0].metrics)}")
    if not contexts:
        raise EvalError(f"{config.label()}: no contexts to count")
    p50, p95 = latency_summary(latencies_ms)
    return Row(
        config=config,
        metrics=mean_metrics(cases),
        case_metrics={c.case_id: c.metrics[quality] for c in cases},
        p50_ms=p50,
        p95_ms=p95,
        context_tokens=float(statistics.median(context_tokens(texts, count) for texts in contexts)),
    )


def _oriented(quality: str) -> Callable[[Row], float]:
    """A row's quality with higher always better (a lower-is-better metric negated)."""
    sign = -1.0 if lower_is_better(quality) else 1.0
    return lambda row: sign * row.quality(quality)


def _dominates(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """a is at least as good as b everywhere (quality up, costs down) and better somewhere."""
    no_worse = a[0] >= b[0] and a[1] <= b[1] and a[2] <= b[2]
    return no_worse and (a[0] > b[0] or a[1] < b[1] or a[2] < b[2])


def pareto_front(rows: Sequence[Row], *, quality: str) -> list[bool]:
    """Per row, whether no other row dominates it: quality at least as high, p95 latency and context tokens at
    most as large, one of them strictly. Equal rows are both on the front.

    Example:
        >>> rows = [Row(Config.of({"k": k}), {"ndcg@10": q}, {}, 1.0, p95, 100.0) for k, q, p95 in
        ...         [(1, 0.9, 50.0), (2, 0.8, 20.0), (3, 0.7, 30.0)]]
        >>> pareto_front(rows, quality="ndcg@10")
        [True, True, False]
    """
    key = _oriented(quality)
    points = [(key(r), r.p95_ms, r.context_tokens) for r in rows]
    return [not any(_dominates(other, point) for other in points) for point in points]


def mark_pareto(rows: Sequence[Row], *, quality: str) -> list[Row]:
    """The rows with `pareto` set from `pareto_front`."""
    return [replace(r, pareto=p) for r, p in zip(rows, pareto_front(rows, quality=quality), strict=True)]


def choose(rows: Sequence[Row], *, quality: str) -> Row:
    """The best quality on the tune split; qualities within 1e-9 tie, broken by fewer context tokens (deterministic),
    then lower p95 latency (measured, so noisy: a last resort), then label.

    Example:
        >>> a = Row(Config.of({"k": 5}), {"mrr@10": 0.5}, {}, 1.0, 20.0, 10.0)
        >>> b = Row(Config.of({"k": 9}), {"mrr@10": 0.5 + 1e-12}, {}, 1.0, 10.0, 10.0)
        >>> choose([a, b], quality="mrr@10").label
        'k=9'
    """
    if not rows:
        raise EvalError("no rows to choose from")
    key = _oriented(quality)
    best = max(key(r) for r in rows)
    tied = [r for r in rows if key(r) >= best - TIE]
    return min(tied, key=lambda r: (r.context_tokens, r.p95_ms, r.label))


# --- the held-out comparison -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """The winner against the current configuration on the held-out split, paired on case id: the means of the
    quality metric, `delta` (winner − current), the one-sided p-value that the winner is this much better by chance
    (None when no case changed), and the mean metrics of both when known.

    Example:
        >>> c = compare_paired({"a": 1.0, "b": 1.0, "c": 0.5}, {"a": 0.5, "b": 1.0, "c": 0.5})
        >>> round(c.delta, 4), c.cases, Comparison.from_json(c.to_json()) == c
        (0.1667, 3, True)
    """

    winner_mean: float
    current_mean: float
    delta: float
    p_value: float | None
    significant: bool
    cases: int
    lower_is_better: bool = False
    winner_metrics: Mapping[str, float] = field(default_factory=dict)
    current_metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def improvement(self) -> float:
        """`delta` with positive meaning the winner is better."""
        return -self.delta if self.lower_is_better else self.delta

    def to_json(self) -> dict[str, Any]:
        return {
            "winner_mean": self.winner_mean,
            "current_mean": self.current_mean,
            "delta": self.delta,
            "p_value": self.p_value,
            "significant": self.significant,
            "cases": self.cases,
            "lower_is_better": self.lower_is_better,
            "winner_metrics": dict(self.winner_metrics),
            "current_metrics": dict(self.current_metrics),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Comparison:
        p = obj.get("p_value")
        return cls(
            float(obj["winner_mean"]),
            float(obj["current_mean"]),
            float(obj["delta"]),
            None if p is None else float(p),
            bool(obj["significant"]),
            int(obj["cases"]),
            bool(obj.get("lower_is_better", False)),
            {k: float(v) for k, v in obj.get("winner_metrics", {}).items()},
            {k: float(v) for k, v in obj.get("current_metrics", {}).items()},
        )


def compare_paired(
    winner_case_values: Mapping[str, float],
    current_case_values: Mapping[str, float],
    *,
    seed: int = 0,
    lower_is_better: bool = False,
    permutations: int = 10_000,
    alpha: float = ALPHA,
) -> Comparison:
    """Winner vs current on the same cases (per case id: the quality metric's value); `significant` when the winner
    is better and p < `alpha`. EvalError when the case ids differ."""
    if set(winner_case_values) != set(current_case_values):
        only_w = sorted(set(winner_case_values) - set(current_case_values))
        only_c = sorted(set(current_case_values) - set(winner_case_values))
        raise EvalError(
            f"the winner and the current configuration were scored on different cases (only the winner's: "
            f"{only_w[:5]}, only the current's: {only_c[:5]}): run both on the same held-out split"
        )
    if not winner_case_values:
        raise EvalError("no held-out cases to compare on")
    ids = sorted(winner_case_values)
    winner = np.array([winner_case_values[i] for i in ids], dtype=float)
    current = np.array([current_case_values[i] for i in ids], dtype=float)
    # paired_randomization_p asks "is the mean this low by chance": give it the winner's per-case loss
    losses = (winner - current) if lower_is_better else (current - winner)
    p = paired_randomization_p(losses, permutations, seed)
    delta = float(winner.mean() - current.mean())
    better = (-delta if lower_is_better else delta) > 0
    return Comparison(
        winner_mean=float(winner.mean()),
        current_mean=float(current.mean()),
        delta=delta,
        p_value=p,
        significant=p is not None and p < alpha and better,
        cases=len(ids),
        lower_is_better=lower_is_better,
    )


def held_out(winner: Sequence[CaseResult], current: Sequence[CaseResult], *, quality: str, seed: int = 0) -> Comparison:
    """`compare_paired` on the quality metric of two runs of the test split, with both runs' mean metrics."""
    comparison = compare_paired(
        {c.case_id: c.metrics[quality] for c in winner},
        {c.case_id: c.metrics[quality] for c in current},
        seed=seed,
        lower_is_better=lower_is_better(quality),
    )
    return replace(comparison, winner_metrics=mean_metrics(winner), current_metrics=mean_metrics(current))


def recommend(winner: str, current: str, comparison: Comparison | None) -> str:
    """What to do with the winner, from its held-out comparison.

    Example:
        >>> recommend("k=5", "k=10", Comparison(0.8, 0.7, 0.1, 0.01, True, 50))
        'adopt: k=5 beats the current configuration on the held-out split (Δ=+0.100, p=0.0100)'
    """
    if winner == current:
        return "keep the current configuration: it is the best on the tune split"
    if comparison is None:
        return "keep the current configuration: the winner was not compared on the held-out split"
    p = "n/a, no case changed" if comparison.p_value is None else f"{comparison.p_value:.4f}"
    if comparison.improvement < 0:
        return f"keep: the winner is worse on the held-out split (Δ={comparison.delta:+.3f}, p={p})"
    if comparison.significant:
        return (
            f"adopt: {winner} beats the current configuration on the held-out split (Δ={comparison.delta:+.3f}, p={p})"
        )
    return f"keep the current configuration: the difference on the held-out split is not significant (p={p})"


# --- the result ------------------------------------------------------------------------------------------------------

SWEEP_MODES = ("grid", "random")


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: the space and how it was searched, the split, every configuration's tune-split row, the
    winner (chosen on tune), the current configuration, and the winner against it on the held-out split.

    Example:
        >>> space = SweepSpace.parse({"k": [5, 10]})
        >>> rows = [Row(c, {"recall@10": q}, {}, 5.0, 9.0, 300.0, True) for c, q in zip(space.grid(), (0.7, 0.8))]
        >>> result = SweepResult(space, "grid", 0, SplitSummary("hash", 20, 20), "recall@10", tuple(rows), "k=10",
        ...                      Config.of({"k": 5}), Comparison(0.8, 0.7, 0.1, 0.2, False, 20))
        >>> result.recommendation
        'keep the current configuration: the difference on the held-out split is not significant (p=0.2000)'
        >>> SweepResult.from_json(result.to_json()) == result
        True
    """

    space: SweepSpace
    mode: str
    seed: int
    split: SplitSummary
    quality: str
    rows: tuple[Row, ...]
    winner: str  # the winning row's label
    current: Config
    held_out: Comparison | None
    notes: tuple[str, ...] = ()  # what the space dropped or merged, and anything else worth saying

    def __post_init__(self) -> None:
        if self.mode not in SWEEP_MODES:
            raise EvalError(f"mode must be one of {list(SWEEP_MODES)}, got {self.mode!r}")
        if self.split.origin not in SPLIT_ORIGINS:
            raise EvalError(f"split origin must be one of {list(SPLIT_ORIGINS)}, got {self.split.origin!r}")
        if self.winner not in {r.label for r in self.rows}:
            raise EvalError(f"the winner {self.winner!r} is not among the rows")

    @property
    def winner_row(self) -> Row:
        return next(r for r in self.rows if r.label == self.winner)

    @property
    def recommendation(self) -> str:
        return recommend(self.winner, self.current.label(), self.held_out)

    def to_json(self) -> dict[str, Any]:
        return {
            "space": self.space.to_json(),
            "mode": self.mode,
            "seed": self.seed,
            "split": self.split.to_json(),
            "quality": self.quality,
            "rows": [r.to_json() for r in self.rows],
            "winner": self.winner,
            "current": self.current.to_json(),
            "current_label": self.current.label(),
            "held_out": None if self.held_out is None else self.held_out.to_json(),
            "recommendation": self.recommendation,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SweepResult:
        try:
            return cls(
                space=SweepSpace.from_json(obj["space"]),
                mode=obj["mode"],
                seed=int(obj["seed"]),
                split=SplitSummary.from_json(obj["split"]),
                quality=obj["quality"],
                rows=tuple(Row.from_json(r) for r in obj["rows"]),
                winner=obj["winner"],
                current=Config.from_json(obj["current"]),
                held_out=None if obj.get("held_out") is None else Comparison.from_json(obj["held_out"]),
                notes=tuple(obj.get("notes", ())),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise EvalError(f"not a stored sweep result: {exc!r}") from None


def format_sweep_table(result: SweepResult) -> str:
    """A Markdown table of the rows, best quality first (★: on the Pareto front; ◀ winner: chosen on tune), then the
    held-out comparison and the recommendation."""
    key = _oriented(result.quality)
    rows = sorted(result.rows, key=lambda r: (-key(r), r.p95_ms, r.context_tokens, r.label))
    lines = [
        f"| | configuration | {result.quality} | p50 ms | p95 ms | context tokens |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = ("★" if r.pareto else "") + (" ◀ winner" if r.label == result.winner else "")
        lines.append(
            f"| {mark.strip()} | {r.label} | {r.quality(result.quality):.4f} | {r.p50_ms:.1f} | {r.p95_ms:.1f} "
            f"| {r.context_tokens:g} |"
        )
    s = result.split
    lines.append("")
    lines.append(
        f"{result.mode} search, {len(result.rows)} configuration(s); split by {s.origin}: "
        f"tune {s.tune}, test {s.test} case(s); ★ Pareto front (quality, p95, context tokens)"
    )
    h = result.held_out
    if h is not None:
        p = "n/a" if h.p_value is None else f"{h.p_value:.4f}"
        lines.append(
            f"held-out {result.quality}: winner {h.winner_mean:.4f}, current ({result.current.label()}) "
            f"{h.current_mean:.4f}, Δ={h.delta:+.4f}, p={p}, {h.cases} case(s)"
        )
    lines.extend(f"note: {n}" for n in result.notes)
    lines.append(result.recommendation)
    return "\n".join(lines)
