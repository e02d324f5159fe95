"""Files: labelled sets (JSON Lines), runs and baselines (JSON). Writes are atomic and durable.

Sets and baselines that ship with the code live in `eval/sets/` and `eval/baselines/` (version
control); the service writes its own under its data directory and looks there first.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.cases import Case, Label, dump_jsonl, load_cases, parse_jsonl
from eval.errors import AlreadyExists, EvalError, UnknownName
from eval.faults import crash_point
from eval.matching import Retrieved
from eval.runner import CaseResult, Run

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


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file, fsync, rename, fsync the folder: a crash leaves the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        crash_point("state:temp-written")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class SetStore:
    """Labelled sets by name: `<dir>/<name>.jsonl`, then the packaged `eval/sets/<name>.jsonl`."""

    def __init__(self, directory: Path, fallback: Path | None = PACKAGE_DIR / "sets") -> None:
        self.directory = directory
        self.fallback = fallback

    def path(self, name: str) -> Path:
        check_name(name, "set")
        for folder in (self.directory, self.fallback):
            if folder is not None and (folder / f"{name}.jsonl").is_file():
                return folder / f"{name}.jsonl"
        raise UnknownName(f"no labelled set named {name!r}; known: {', '.join(self.names()) or 'none'}")

    def get(self, name: str) -> list[Case]:
        return load_cases(self.path(name))

    def put(self, name: str, text: str, check: Callable[[Case], object] | None = None) -> list[Case]:
        """Validate then replace; a malformed upload raises with its line numbers and changes nothing."""
        cases = parse_jsonl(text, check_name(name, "set"), check)
        write_atomic(self.directory / f"{name}.jsonl", dump_jsonl(cases))
        return cases

    def names(self) -> list[str]:
        folders = [f for f in (self.directory, self.fallback) if f is not None and f.is_dir()]
        return sorted({p.stem for f in folders for p in f.glob("*.jsonl")})


class RunStore:
    """Runs as `<dir>/<run id>.json`; baselines as `<baselines dir>/<name>.json` (packaged ones too)."""

    def __init__(
        self, runs_dir: Path, baselines_dir: Path, fallback_baselines: Path | None = PACKAGE_DIR / "baselines"
    ) -> None:
        self.runs_dir = runs_dir
        self.baselines_dir = baselines_dir
        self.fallback_baselines = fallback_baselines

    def save(self, run: Run) -> None:
        write_atomic(self.runs_dir / f"{check_name(run.run_id, 'run')}.json", dump_run(run))

    def get(self, run_id: str) -> Run:
        path = self.runs_dir / f"{check_name(run_id, 'run')}.json"
        if not path.is_file():
            raise UnknownName(f"no run with id {run_id!r}")
        return load_run(path)

    def list(self) -> list[Run]:
        """Every readable run, newest first; an unreadable file is logged and skipped, never fatal."""
        runs = []
        for path in self.runs_dir.glob("*.json") if self.runs_dir.is_dir() else ():
            try:
                runs.append(load_run(path))
            except (EvalError, OSError, ValueError) as exc:
                log.warning("skipping unreadable run file %s: %s", path, exc)
        return sorted(runs, key=lambda r: r.run_id, reverse=True)

    def promote(self, run_id: str, name: str, *, replace: bool = False) -> str | None:
        """Make a run the baseline `name`; the run id of the baseline it replaces, if any. An existing one
        (stored, or packaged and so shadowed) is replaced only when asked, and a stored one is kept in
        `<baselines dir>/history/<name>.<its run id>.json`."""
        path = self.baselines_dir / f"{check_name(name, 'baseline')}.json"
        run = self.get(run_id)
        try:
            old: Run | None = self.baseline(name)
        except UnknownName:
            old = None
        if old is not None and not replace:
            raise AlreadyExists(
                f"baseline {name!r} exists (run {old.run_id}); send replace: true to replace it "
                "(the old one is kept in the baselines' history)"
            )
        if old is not None and path.is_file():
            write_atomic(self.baselines_dir / "history" / f"{name}.{old.run_id}.json", path.read_text("utf-8"))
        write_atomic(path, dump_run(run))
        return old.run_id if old is not None else None

    def baseline(self, name: str) -> Run:
        """A baseline by name: the data dir's, then the packaged ones. Never a path (an API caller names it)."""
        check_name(name, "baseline")
        for folder in (self.baselines_dir, self.fallback_baselines):
            if folder is not None and (folder / f"{name}.json").is_file():
                return load_run(folder / f"{name}.json")
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
        "gate": dict(run.gate) if run.gate is not None else None,
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
                    }
                    for i, r in enumerate(c.retrieved)
                ],
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
            gate=obj.get("gate"),
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
                )
                for c in obj["cases"]
            ),
        )
    except (KeyError, TypeError) as exc:
        raise EvalError(f"not a Plumbline run record: {exc}") from None


def dump_run(run: Run) -> str:
    return json.dumps(run_to_json(run), ensure_ascii=False, indent=1) + "\n"


def load_run(path: Path) -> Run:
    try:
        return run_from_json(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise EvalError(f"{path}: not JSON: {exc}") from None


def load_set(path_or_name: str, store: SetStore | None = None) -> tuple[str, Sequence[Case]]:
    """A set by file path, or by name through `store` (default: the packaged sets)."""
    path = Path(path_or_name)
    if path.suffix == ".jsonl" and path.is_file():
        return path.stem, load_cases(path)
    store = store or SetStore(PACKAGE_DIR / "sets", fallback=None)
    return path_or_name, store.get(path_or_name)


def load_baseline(path_or_name: str, store: RunStore | None = None) -> Run:
    """For the CLI: a baseline by path to a run file, or by name (through `store`, default the packaged)."""
    path = Path(path_or_name)
    if path.suffix == ".json":
        if not path.is_file():
            raise UnknownName(f"no baseline file {path}")
        return load_run(path)
    return (store or RunStore(PACKAGE_DIR / "runs", PACKAGE_DIR / "baselines", fallback_baselines=None)).baseline(
        path_or_name
    )
