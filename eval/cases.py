"""Labelled cases and their JSON Lines format, with line-numbered validation errors.

    {"id": "c-0042", "question": "what is the refund window for annual plans",
     "relevant": [{"doc_id": "billing/refunds"},
                  {"doc_id": "policies/annual-terms", "evidence": "30 days"},
                  {"chunk_id": "billing/refunds#3", "grade": 2}],
     "category": "billing", "source": "log", "filters": {"tenant": "acme"},
     "created_at": "2026-11-30T10:00:00Z"}

A label names a chunk, a document, or a document plus evidence (the words that answer the question).
Evidence labels survive re-chunking: they are what makes a chunk-size sweep honest. Grade defaults to
1; grade 0 is a judged non-relevant, kept for reference and never counted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from eval.errors import EvalError

CASE_KEYS = {"id", "question", "relevant", "category", "source", "filters", "created_at", "split", "generator"}
SPLITS = ("tune", "test")  # a case's split: tuned on (sweeps choose there), or held out (the winner is reported there)
LABEL_KEYS = {"doc_id", "chunk_id", "evidence", "grade"}
MAX_ERRORS_SHOWN = 20
T = TypeVar("T")


@dataclass(frozen=True)
class Label:
    """One relevant source. Exactly one of: `chunk_id`; `doc_id`; `doc_id` + `evidence`.

    Example:
        >>> Label(doc_id="billing/refunds", evidence="30 days").kind
        'evidence'
    """

    doc_id: str | None = None
    chunk_id: str | None = None
    evidence: str | None = None
    grade: int = 1

    def __post_init__(self) -> None:
        if self.chunk_id is not None and (self.doc_id is not None or self.evidence is not None):
            raise EvalError("a chunk label names only chunk_id (its document is implied)")
        if self.chunk_id is None and self.doc_id is None:
            raise EvalError("a label needs doc_id (optionally with evidence) or chunk_id")
        if self.evidence is not None and not isinstance(self.evidence, str):
            raise EvalError(f"evidence must be a string, got {self.evidence!r}")
        if self.evidence is not None and not self.evidence.strip():
            raise EvalError("evidence is empty: give the words that answer the question, or drop it")
        for name, value in (("doc_id", self.doc_id), ("chunk_id", self.chunk_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise EvalError(f"{name} must be a non-empty string")
        if isinstance(self.grade, bool) or not isinstance(self.grade, int) or self.grade < 0:
            raise EvalError(f"grade must be a whole number >= 0, got {self.grade!r}")

    @property
    def kind(self) -> str:
        if self.chunk_id is not None:
            return "chunk"
        return "evidence" if self.evidence is not None else "doc"

    @property
    def document(self) -> str:
        """The document this label points into (a chunk id is `<doc id>#<n>`)."""
        if self.chunk_id is not None:
            return self.chunk_id.rpartition("#")[0] or self.chunk_id
        return self.doc_id or ""  # __post_init__ guarantees one of the two

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("doc_id", "chunk_id", "evidence"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.grade != 1:
            out["grade"] = self.grade
        return out


@dataclass(frozen=True)
class Case:
    """One labelled question.

    Example:
        >>> Case("c-1", "refund window?", (Label(doc_id="billing/refunds"),)).positive[0].grade
        1
    """

    id: str
    question: str
    relevant: tuple[Label, ...]
    category: str = "uncategorized"
    source: str = "unknown"
    filters: Mapping[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    split: str | None = None  # one of SPLITS; None: a sweep splits the case by a seeded hash of its id
    # a synthetic case's maker: {"model": ..., "prompt_version": ...} (eval.synthetic); empty for a human's case
    generator: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.split is not None and self.split not in SPLITS:
            raise EvalError(f"split must be one of {list(SPLITS)}, got {self.split!r}")
        if not self.id:
            raise EvalError("id is empty")
        if not self.question.strip():
            raise EvalError("question is empty")
        if not self.positive:
            raise EvalError(
                "no label has a grade above 0: such a case can be neither passed nor failed; add a relevant label"
            )

    @property
    def positive(self) -> tuple[Label, ...]:
        return tuple(label for label in self.relevant if label.grade > 0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "relevant": [label.to_json() for label in self.relevant],
            "category": self.category,
            "source": self.source,
        }
        if self.filters:
            out["filters"] = dict(self.filters)
        if self.created_at:
            out["created_at"] = self.created_at
        if self.split is not None:
            out["split"] = self.split
        if self.generator:
            out["generator"] = dict(self.generator)
        return out


def case_from_json(obj: object) -> Case:
    """One parsed JSON object → Case; raises EvalError saying what is wrong."""
    if not isinstance(obj, dict):
        raise EvalError("a case must be a JSON object")
    unknown = set(obj) - CASE_KEYS
    if unknown:
        raise EvalError(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(CASE_KEYS)}")
    for key in ("id", "question", "relevant"):
        if key not in obj:
            raise EvalError(f"missing {key!r}")
    if isinstance(obj["id"], bool) or not isinstance(obj["id"], str | int):
        raise EvalError(f"id must be a string, got {obj['id']!r}")
    if not isinstance(obj["question"], str):
        raise EvalError("question must be a string")
    relevant = obj["relevant"]
    if not isinstance(relevant, list) or not relevant:
        raise EvalError("relevant must be a non-empty list of labels")
    labels = []
    for n, raw in enumerate(relevant):
        if not isinstance(raw, dict):
            raise EvalError(f"relevant[{n}] must be an object")
        bad = set(raw) - LABEL_KEYS
        if bad:
            raise EvalError(f"relevant[{n}]: unknown key(s) {sorted(bad)}; allowed: {sorted(LABEL_KEYS)}")
        try:
            labels.append(Label(**raw))
        except EvalError as exc:
            raise EvalError(f"relevant[{n}]: {exc}") from None
    filters = obj.get("filters") or {}
    if not isinstance(filters, dict):
        raise EvalError("filters must be an object")
    generator = obj.get("generator") or {}
    if not isinstance(generator, dict) or not all(isinstance(v, str) for v in generator.values()):
        raise EvalError('generator must be an object of strings, e.g. {"model": "...", "prompt_version": "..."}')
    return Case(
        id=str(obj["id"]),
        question=obj["question"],
        relevant=tuple(labels),
        category=str(obj.get("category") or "uncategorized"),
        source=str(obj.get("source") or "unknown"),
        filters=filters,
        created_at=obj.get("created_at"),
        split=obj.get("split"),
        generator=generator,
    )


def parse_jsonl(text: str, name: str = "<set>", check: Callable[[Case], object] | None = None) -> list[Case]:
    """All cases of a JSON Lines text, or one EvalError listing every bad line (`name:line: problem`).

    `check` may reject a case that is well-formed here but unusable by the retriever (e.g. filters the
    service does not know) by raising ValueError; it is reported on that case's line."""

    def read(obj: object) -> Case:
        case = case_from_json(obj)
        if check is not None:
            check(case)
        return case

    return json_lines(text, name, read, lambda case: case.id, "cases")


def json_lines(text: str, name: str, read: Callable[[object], T], key: Callable[[T], str], what: str) -> list[T]:
    """Every object of a JSON Lines text read by `read` (which raises ValueError saying what is wrong), each `key`
    unique, or one EvalError listing every bad line (`name:line: problem`, the first 20 shown). Blank lines are
    skipped; a text with none is an error too.

    Example:
        >>> json_lines('{"id": "a"}', "x", lambda o: o["id"], str, "ids")
        ['a']
    """
    found: list[T] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    # split on "\n" only: str.splitlines() also splits on U+2028, U+2029 and U+0085, which JSON
    # strings may hold raw (dump_jsonl writes them unescaped)
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = read(json.loads(line))
        except json.JSONDecodeError as exc:
            errors.append(f"{name}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            errors.append(f"{name}:{lineno}: nested too deep to read; a line needs at most a few levels")
            continue
        except ValueError as exc:  # EvalError, or the reader's own check
            errors.append(f"{name}:{lineno}: {exc}")
            continue
        if (ident := key(item)) in seen:
            errors.append(f"{name}:{lineno}: duplicate id {ident!r} (first on line {seen[ident]})")
            continue
        seen[ident] = lineno
        found.append(item)
    if not errors and not found:
        errors.append(f"{name}: no {what}")
    if errors:
        shown = errors[:MAX_ERRORS_SHOWN]
        more = f"; and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
        raise EvalError(f"{len(errors)} bad line(s): " + "; ".join(shown) + more)
    return found


def load_cases(path: Path) -> list[Case]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvalError(f"{path} does not exist") from None
    return parse_jsonl(text, str(path))


def dump_jsonl(cases: Iterable[Case]) -> str:
    return "".join(json.dumps(c.to_json(), ensure_ascii=False) + "\n" for c in cases)


def fingerprint(cases: Sequence[Case]) -> str:
    """A short hash of the set's content: a gate warns when run and baseline used different sets."""
    return hashlib.sha256(dump_jsonl(cases).encode()).hexdigest()[:16]
