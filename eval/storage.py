"""Labelled sets (JSON Lines), runs and baselines (JSON): their formats, and the stores that find them by name.

Sets and baselines that ship with the code live in `eval/sets/` and `eval/baselines/` (version control) and
are read-only seeds; the service keeps its own in its state store (`Records`) and looks there first. Files
(`--save-run`, a set or baseline given by path) are written atomically and durably.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from eval.cases import Case, Label, dump_jsonl, load_cases, parse_jsonl
from eval.errors import AlreadyExists, EvalError, ReadOnly, UnknownName
from eval.gate import named
from eval.matching import Retrieved
from eval.report import mean_metrics
from eval.runner import CaseResult, Run
from eval.verdict import GatePolicy, GateResult

log = logging.getLogger("plumbline")
PACKAGE_DIR = Path(__file__).parent
# Run records keep the ranking in full but text only as a snippet of the first results: enough to
# read a failure, small enough to keep thousands of runs.
SNIPPET, SNIPPETS = 300, 10
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_name(name: str, what: str) -> str:
    if not NAME.match(name) or ".." in name:
        raise EvalError(f"{what} name {name!r} is invalid: use letters, digits, '_', '-', '.' (max 100)")
    return name


class Records(Protocol):
    """Where the service keeps writable sets, runs and baselines: `service.state.StateStore` (SQLite or
    PostgreSQL). Bodies are text as `dump_jsonl` and `dump_run` write them; this module parses them."""

    def get_set(self, name: str) -> str | None: ...
    def put_set(self, name: str, body: str) -> None: ...
    def set_names(self) -> list[str]: ...
    def save_run(
        self, run_id: str, set_name: str, created_at: str, summary: str, record: str, kind: str, tenant: str | None
    ) -> None: ...
    def get_run(self, run_id: str) -> str | None: ...
    def delete_run(self, run_id: str) -> bool: ...
    def run_summaries(
        self, limit: int, offset: int, set_name: str | None, kind: str | None, tenant: str | None
    ) -> list[str]: ...
    def count_runs(self, tenant: str) -> int: ...
    def latest_run_ids(self, kind: str) -> list[tuple[str, str]]: ...
    def get_baseline(self, name: str) -> str | None: ...
    def put_baseline(self, name: str, run_id: str, record: str, *, replace: bool) -> str | None: ...


class SetStore:
    """Labelled sets by name: the writable ones in `records`, then the read-only seeds `<seeds>/<name>.jsonl`
    (the packaged `eval/sets/`). With `records` None (a CLI reading the packaged sets) it cannot write."""

    def __init__(self, records: Records | None, seeds: Path | None = PACKAGE_DIR / "sets") -> None:
        self.records = records
        self.seeds = seeds

    def text(self, name: str) -> str:
        check_name(name, "set")
        body = self.records.get_set(name) if self.records is not None else None
        if body is not None:
            return body
        if self.seeds is not None and (self.seeds / f"{name}.jsonl").is_file():
            return (self.seeds / f"{name}.jsonl").read_text(encoding="utf-8")
        raise UnknownName(f"no labelled set named {name!r}; known: {', '.join(self.names()) or 'none'}")

    def get(self, name: str) -> list[Case]:
        return parse_jsonl(self.text(name), name)

    def put(
        self, name: str, text: str, check: Callable[[Case], object] | None = None, *, shadow: bool = False
    ) -> list[Case]:
        """Validate then replace; a malformed upload raises with its line numbers and changes nothing. A packaged
        set's name is refused (`ReadOnly`) unless `shadow` says the caller means to hide the packaged set."""
        if self.records is None:
            raise EvalError("this set store is read-only")
        if self.packaged(check_name(name, "set")) and not shadow:
            raise ReadOnly(
                f"set {name!r} ships with Plumbline and is read-only: store yours under another name, or shadow it "
                "deliberately (an admin's PUT /eval/sets/{name}?shadow=true); runs then say that it is shadowed"
            )
        cases = parse_jsonl(text, name, check)
        self.records.put_set(name, dump_jsonl(cases))
        return cases

    def packaged(self, name: str) -> bool:
        return self.seeds is not None and (self.seeds / f"{name}.jsonl").is_file()

    def source(self, name: str) -> str | None:
        """Where `text(name)` comes from: "stored", "packaged", "stored, shadowing packaged"; None if nowhere."""
        stored = self.records is not None and self.records.get_set(name) is not None
        if stored:
            return "stored, shadowing packaged" if self.packaged(name) else "stored"
        return "packaged" if self.packaged(name) else None

    def names(self) -> list[str]:
        stored = set(self.records.set_names()) if self.records is not None else set()
        seeds = (
            {p.stem for p in self.seeds.glob("*.jsonl")} if self.seeds is not None and self.seeds.is_dir() else set()
        )
        return sorted(stored | seeds)


@dataclass(frozen=True)
class RunSummary:
    """A run without its cases: what a listing shows."""

    run_id: str
    set_name: str
    created_at: str
    unit: str
    cases: int
    metrics: Mapping[str, float]
    gate: str | None  # "pass", "fail", or None when not gated
    kind: str
    params: Mapping[str, Any]
    gate_policy: Mapping[str, Any] | None = None  # what the gate judged by (`GatePolicy.to_json`); None before


@dataclass(frozen=True)
class Baseline:
    """A baseline: the run a gate compares with, the gate policy it judges by (set by whoever promoted it; None for
    one stored before policies were, which the service's default then judges by), and where it came from
    ("stored", "packaged", "stored, shadowing packaged" or "file"). Its record is the run's JSON with the policy
    under `gate_policy`; `sha256` hashes both, so a verdict names exactly what it was compared with and by."""

    run: Run
    policy: GatePolicy | None
    source: str

    @property
    def sha256(self) -> str:
        return canonical_digest(baseline_to_json(self.run, self.policy))


class RunStore:
    """Runs by id and baselines by name in `records`; baselines also from the read-only seeds (the packaged
    `eval/baselines/<name>.json`), which a stored baseline of the same name shadows."""

    def __init__(self, records: Records | None, seeds: Path | None = PACKAGE_DIR / "baselines") -> None:
        self.records = records
        self.seeds = seeds

    def _writable(self) -> Records:
        if self.records is None:
            raise EvalError("this run store is read-only")
        return self.records

    def save(self, run: Run) -> None:
        self._writable().save_run(
            check_name(run.run_id, "run"),
            run.set_name,
            run.created_at,
            dump_summary(run),
            dump_run(run),
            run.kind,
            run.tenant,
        )

    def get(self, run_id: str) -> Run:
        record = self._writable().get_run(check_name(run_id, "run"))
        if record is None:
            raise UnknownName(f"no run with id {run_id!r}")
        return run_from_json(json.loads(record))

    def delete(self, run_id: str) -> None:
        """Remove a stored run (`UnknownName` if there is none); a baseline promoted from it keeps its copy."""
        if not self._writable().delete_run(check_name(run_id, "run")):
            raise UnknownName(f"no run with id {run_id!r}")

    def summaries(
        self,
        limit: int = 100,
        offset: int = 0,
        set_name: str | None = None,
        kind: str | None = None,
        tenant: str | None = None,
    ) -> list[RunSummary]:
        """Runs newest first, without their cases; of one set, one kind and confined to one tenant if given."""
        out = []
        for row in self._writable().run_summaries(limit, offset, set_name, kind, tenant):
            obj = json.loads(row)
            out.append(
                RunSummary(
                    obj["run_id"],
                    obj["set"],
                    obj["created_at"],
                    obj["unit"],
                    obj["cases"],
                    obj["metrics"],
                    obj["gate"],
                    obj.get("kind", "manual"),  # summaries written before run kinds existed
                    obj.get("params", {}),
                    obj.get("gate_policy"),  # summaries written before gate policies were recorded have none
                )
            )
        return out

    def count(self, tenant: str) -> int:
        """Runs stored confined to `tenant`."""
        return self._writable().count_runs(tenant)

    def latest_ids(self, kind: str) -> dict[str, str]:
        """The id of the newest run of `kind` of each set (run ids sort by time)."""
        return dict(self._writable().latest_run_ids(kind))

    def promote(
        self, run_id: str, name: str, policy: GatePolicy, *, replace: bool = False, shadow: bool = False
    ) -> tuple[Baseline, str | None]:
        """Make a run the baseline `name`, judged by `policy` (its metrics named: `eval.gate.named`); the baseline as
        stored, and the run id of the one it replaces, if any. An existing one is replaced only when asked, and kept
        in the baselines' history; a packaged one's name only with `shadow` (`ReadOnly` otherwise). A policy gating
        a metric the run lacks is an `EvalError`."""
        check_name(name, "baseline")
        if self.packaged(name) and not shadow:
            raise ReadOnly(
                f"baseline {name!r} ships with Plumbline and is read-only: promote under another name, or shadow it "
                "deliberately (an admin's POST /eval/baselines with shadow: true)"
            )
        run = self.get(run_id)
        policy.check_names(run.ks)
        policy = named(policy, run)
        absent = [m for m in policy.metrics if run.cases and m not in run.cases[0].metrics]
        if absent:
            raise EvalError(f"run {run_id} has no {', '.join(absent)}: its baseline's policy cannot gate them")
        try:
            old: Run | None = self.baseline(name)
        except UnknownName:
            old = None
        if old is not None and not replace:
            raise AlreadyExists(
                f"baseline {name!r} exists (run {old.run_id}); send replace: true to replace it "
                "(the old one is kept in the baselines' history)"
            )
        self._writable().put_baseline(name, run.run_id, dump_baseline(run, policy), replace=replace)
        return self.located(name), old.run_id if old is not None else None

    def packaged(self, name: str) -> bool:
        return self.seeds is not None and (self.seeds / f"{name}.json").is_file()

    def baseline(self, name: str) -> Run:
        """A baseline's run by name: the stored one, then the packaged seeds. Never a path (an API caller names it)."""
        return self.located(name).run

    def located(self, name: str) -> Baseline:
        """A baseline by name, with its policy and where it came from: "stored", "packaged", or "stored, shadowing
        packaged"."""
        check_name(name, "baseline")
        record = self.records.get_baseline(name) if self.records is not None else None
        if record is not None:
            source = "stored, shadowing packaged" if self.packaged(name) else "stored"
            return baseline_from_json(json.loads(record), source)
        seed = self.seeds / f"{name}.json" if self.seeds is not None else None
        if seed is not None and seed.is_file():
            return _read_baseline(seed, "packaged")
        raise UnknownName(f"no baseline named {name!r}")


def run_to_json(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "set": run.set_name,
        "set_fingerprint": run.set_fingerprint,
        "created_at": run.created_at,
        "unit": run.unit,
        "k": list(run.ks),
        "params": dict(run.params),
        "gate": run.gate.to_json() if run.gate is not None else None,
        "kind": run.kind,
        **({"tenant": run.tenant} if run.tenant is not None else {}),
        "incident_outcomes": dict(run.incident_outcomes),
        "cases": [
            {
                "id": c.case_id,
                "question": c.question,
                "category": c.category,
                "source": c.source,
                "labels": c.labels,
                "metrics": dict(c.metrics),
                "first_relevant_rank": c.first_relevant_rank,
                "missed": [label.to_json() for label in c.missed],
                "retrieved": [
                    {
                        "chunk_id": r.chunk_id,
                        "doc_id": r.doc_id,
                        "score": r.score,
                        "text": r.text[:SNIPPET] if i < SNIPPETS else "",
                        **({"stale": True} if r.stale else {}),
                    }
                    for i, r in enumerate(c.retrieved)
                ],
                # the ranks (1-based) of the results that answer: absent in a run stored before they were kept
                **(
                    {"relevant_ranks": [i + 1 for i, ok in enumerate(c.relevant) if ok]}
                    if c.relevant is not None
                    else {}
                ),
            }
            for c in run.cases
        ],
    }


def run_from_json(obj: dict[str, Any]) -> Run:
    try:
        return Run(
            run_id=obj["run_id"],
            set_name=obj["set"],
            set_fingerprint=obj["set_fingerprint"],
            created_at=obj["created_at"],
            unit=obj["unit"],
            ks=tuple(obj["k"]),
            params=obj.get("params", {}),
            gate=GateResult.from_json(obj["gate"]) if obj.get("gate") is not None else None,
            kind=obj.get("kind", "manual"),
            tenant=obj.get("tenant"),
            incident_outcomes=obj.get("incident_outcomes", {}),
            cases=tuple(
                CaseResult(
                    case_id=c["id"],
                    question=c["question"],
                    category=c["category"],
                    source=c["source"],
                    labels=int(c["labels"]),
                    metrics=c["metrics"],
                    first_relevant_rank=c["first_relevant_rank"],
                    missed=tuple(Label(**label) for label in c["missed"]),
                    retrieved=tuple(Retrieved(**r) for r in c["retrieved"]),
                    relevant=_flags(c.get("relevant_ranks"), len(c["retrieved"])),
                )
                for c in obj["cases"]
            ),
        )
    except (KeyError, TypeError) as exc:
        raise EvalError(f"not a Plumbline run record: {exc}") from None


def _flags(ranks: list[int] | None, n: int) -> tuple[bool, ...] | None:
    """Relevance per rank from the stored 1-based ranks; None for a run stored without them."""
    if ranks is None:
        return None
    wanted = set(ranks)
    return tuple(i + 1 in wanted for i in range(n))


def dump_summary(run: Run) -> str:
    """What a listing shows of a run without reading its record: unit, case count, mean metrics, gate verdict and
    the policy it judged by, kind, and the parameters it ran with (an experiment's overrides among them)."""
    policy = run.gate.policy if run.gate else None
    summary = {
        "unit": run.unit,
        "cases": len(run.cases),
        "metrics": mean_metrics(run.cases),
        "gate": run.gate.verdict if run.gate else None,
        "gate_policy": policy.to_json() if policy is not None else None,
        "kind": run.kind,
        "params": dict(run.params),
    }
    return json.dumps(summary)


def canonical_digest(obj: Mapping[str, Any]) -> str:
    """SHA-256 of a record's canonical JSON (sorted keys, no spaces, UTF-8): the same run or baseline hashes the same
    wherever it is stored (file, SQLite, PostgreSQL)."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def run_digest(run: Run) -> str:
    return canonical_digest(run_to_json(run))


def baseline_to_json(run: Run, policy: GatePolicy | None) -> dict[str, Any]:
    """A baseline's record: its run's, with its gate policy under `gate_policy` (none for one stored before)."""
    return {**run_to_json(run), **({"gate_policy": policy.to_json()} if policy is not None else {})}


def baseline_from_json(obj: dict[str, Any], source: str) -> Baseline:
    policy = obj.get("gate_policy")
    return Baseline(run_from_json(obj), GatePolicy.from_json(policy) if policy is not None else None, source)


def dump_run(run: Run) -> str:
    return json.dumps(run_to_json(run), ensure_ascii=False, indent=1) + "\n"


def dump_baseline(run: Run, policy: GatePolicy) -> str:
    return json.dumps(baseline_to_json(run, policy), ensure_ascii=False, indent=1) + "\n"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EvalError(f"{path}: not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise EvalError(f"{path}: not a Plumbline run record")
    return obj


def load_run(path: Path) -> Run:
    return run_from_json(_read_json(path))


def _read_baseline(path: Path, source: str) -> Baseline:
    return baseline_from_json(_read_json(path), source)


def load_set(path_or_name: str, store: SetStore | None = None) -> tuple[str, Sequence[Case]]:
    """A set by file path, or by name through `store` (default: the packaged sets)."""
    path = Path(path_or_name)
    if path.suffix == ".jsonl" and path.is_file():
        return path.stem, load_cases(path)
    return path_or_name, (store or SetStore(None)).get(path_or_name)


def load_baseline(path_or_name: str, store: RunStore | None = None) -> Baseline:
    """For the CLI: a baseline by path to a run or baseline file (its `gate_policy`, if it has one), or by name
    (through `store`, default the packaged)."""
    path = Path(path_or_name)
    if path.suffix == ".json":
        if not path.is_file():
            raise UnknownName(f"no baseline file {path}")
        return _read_baseline(path, "file")
    return (store or RunStore(None)).located(path_or_name)
