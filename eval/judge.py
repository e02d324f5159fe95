"""LLM answer grading, the pure half: the items, the judge's prompt and schema, reading its answers, aggregating
several samples per item, and the report.

An item is a question, the answer a generator gave, the passages it was given (`contexts`) and optionally the
evidence a correct answer rests on (`reference`), one JSON object a line:

    {"id": "a-1", "question": "what is the refund window", "answer": "30 days from purchase.",
     "contexts": ["Refunds are accepted within 30 days ..."], "reference": ["30 days"], "category": "billing"}

`contexts` may be left out when the caller names a run instead: the service fills them with that run's retrieved
texts. One judge call grades all three `CRITERIA` on 1..5, each with a one-sentence reason; a score s counts as
(s − 1) / 4 on 0..1. Each item is judged several times (samples): its grade per criterion is the median over the
samples the judge answered readably, with the spread (max − min) as a measure of the judge's own disagreement. An
item no sample graded is ungraded: counted apart, never a 0.

Answer grades measure the generator only once retrieval brings it the right passages: `AnswerReport.retrieval_note`
says so when the set's recall is low.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eval.cases import json_lines
from eval.errors import EvalError

ITEM_KEYS = {"id", "question", "answer", "contexts", "reference", "category"}
CRITERIA = ("faithfulness", "correctness", "completeness")
JUDGE_PROMPT_VERSION = "judge-v1"
SCALE = (1, 5)


@dataclass(frozen=True)
class AnswerItem:
    """One answer to grade. `contexts` None: not given yet (the service fills them from a run).

    Example:
        >>> AnswerItem("a-1", "refund window?", "30 days", ("Refunds within 30 days.",)).category
        'uncategorized'
    """

    id: str
    question: str
    answer: str
    contexts: tuple[str, ...] | None = None
    reference: tuple[str, ...] = ()
    category: str = "uncategorized"

    def __post_init__(self) -> None:
        if not self.id:
            raise EvalError("id is empty")
        if not self.question.strip():
            raise EvalError("question is empty")
        if self.contexts is not None and not self.contexts:
            raise EvalError("contexts is empty: give the passages the generator received, or leave it out")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "question": self.question, "answer": self.answer}
        if self.contexts is not None:
            out["contexts"] = list(self.contexts)
        if self.reference:
            out["reference"] = list(self.reference)
        out["category"] = self.category
        return out


def _texts(obj: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = obj[key]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise EvalError(f"{key} must be a list of strings")
    if any(not t.strip() for t in value):
        raise EvalError(f"{key} holds an empty text")
    return tuple(value)


def item_from_json(obj: object) -> AnswerItem:
    """One parsed JSON object → AnswerItem; EvalError saying what is wrong."""
    if not isinstance(obj, dict):
        raise EvalError("an item must be a JSON object")
    unknown = set(obj) - ITEM_KEYS
    if unknown:
        raise EvalError(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(ITEM_KEYS)}")
    for key in ("id", "question", "answer"):
        if key not in obj:
            raise EvalError(f"missing {key!r}")
    if isinstance(obj["id"], bool) or not isinstance(obj["id"], str | int):
        raise EvalError(f"id must be a string, got {obj['id']!r}")
    for key in ("question", "answer"):
        if not isinstance(obj[key], str):
            raise EvalError(f"{key} must be a string")
    category = obj.get("category") or "uncategorized"
    if not isinstance(category, str):
        raise EvalError("category must be a string")
    return AnswerItem(
        id=str(obj["id"]),
        question=obj["question"],
        answer=obj["answer"],
        contexts=_texts(obj, "contexts") if "contexts" in obj else None,
        reference=_texts(obj, "reference") if "reference" in obj else (),
        category=category,
    )


def parse_items(text: str, name: str = "<answers>") -> list[AnswerItem]:
    """Every item of a JSON Lines text, or one EvalError listing every bad line (`name:line: problem`).

    Example:
        >>> parse_items('{"id": 1, "question": "q", "answer": "a"}')[0].contexts is None
        True
        >>> parse_items('{"id": 1, "question": "q", "answer": "a", "score": 3}', "x.jsonl")
        Traceback (most recent call last):
        ...
        eval.errors.EvalError: 1 bad line(s): x.jsonl:1: unknown key(s) ['score']; allowed: ...
    """
    return json_lines(text, name, item_from_json, lambda item: item.id, "items")


# --- the judge's prompt ----------------------------------------------------------------------------------------------

JUDGE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        criterion: {
            "type": "object",
            "properties": {
                "score": {"type": "integer", "minimum": SCALE[0], "maximum": SCALE[1]},
                "reason": {"type": "string"},
            },
            "required": ["score", "reason"],
            "additionalProperties": False,
        }
        for criterion in CRITERIA
    },
    "required": list(CRITERIA),
    "additionalProperties": False,
}

_SYSTEM = """You grade one answer to one question. Grade each criterion on a scale of 1 (worst) to 5 (best) and give \
a one-sentence reason for each score.

faithfulness: is every claim in the answer supported by the context passages? 5: every claim is supported; \
1: the answer's main claims are unsupported or contradicted by the passages. An answer that says it does not know \
makes no unsupported claim.
correctness: does the answer agree with the {against}? 5: it agrees fully; 1: it contradicts it or is wrong.
completeness: does the answer address every part of the question? 5: every part; 1: none.

Judge only from the texts given, not from what you know. Answer with JSON only, exactly this shape:
{{"faithfulness": {{"score": 1-5, "reason": "..."}}, "correctness": {{"score": 1-5, "reason": "..."}}, \
"completeness": {{"score": 1-5, "reason": "..."}}}}"""


def _numbered(texts: Sequence[str]) -> str:
    return "\n\n".join(f"[{n}] {text}" for n, text in enumerate(texts, start=1))


def judge_messages(item: AnswerItem) -> list[dict[str, str]]:
    """The chat messages of one judge call grading all three criteria (`JUDGE_PROMPT_VERSION`). Without reference
    evidence, correctness is judged against the contexts, and the prompt says so.

    Example:
        >>> m = judge_messages(AnswerItem("a", "refund window?", "30 days", ("Refunds within 30 days.",)))
        >>> [x["role"] for x in m], "no reference evidence" in m[1]["content"]
        (['system', 'user'], True)
    """
    if item.contexts is None:
        raise EvalError(f"item {item.id!r} has no contexts: give them, or name the run whose retrieved texts to use")
    against = "reference evidence" if item.reference else "context passages (no reference evidence was given)"
    parts = [f"Question:\n{item.question}", f"Context passages:\n{_numbered(item.contexts)}"]
    if item.reference:
        parts.append(f"Reference evidence (what a correct answer rests on):\n{_numbered(item.reference)}")
    else:
        parts.append("There is no reference evidence: judge correctness against the context passages.")
    parts.append(f"Answer to grade:\n{item.answer}")
    return [
        {"role": "system", "content": _SYSTEM.format(against=against)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


# --- reading the judge's answer --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """One readable judge sample: per criterion the score on 0..1 ((s − 1) / 4 of the 1..5 score) and its reason."""

    scores: Mapping[str, float]
    reasons: Mapping[str, str] = field(default_factory=dict)


def _score(value: object) -> int | None:
    """A 1..5 whole number from an int, an integral float or a numeric string; None otherwise (out of range too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, int) or not SCALE[0] <= value <= SCALE[1]:
        return None
    return value


def _load(data: object) -> object:
    """The judge's answer as a JSON value: a parsed object as is; a text read as JSON, or the first {...} in it (a
    model may wrap its JSON in a code fence or a sentence)."""
    if not isinstance(data, str | bytes):
        return data
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        return json.loads(text)
    except ValueError:
        pass
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        return None
    try:
        return json.loads(match.group(0))
    except ValueError:
        return None


def parse_judgement(data: object) -> Judgement | None:
    """One sample of the judge (an object, or its text) → Judgement; None when unreadable: not an object, a criterion
    missing, or a score that is not a whole number 1..5 (a numeric string such as "4" is read; 0, 7 or 3.5 make the
    sample unreadable rather than be clamped: a judge off the scale misread the task).

    A criterion may be `{"score": 4, "reason": "..."}` or a bare score.

    Example:
        >>> j = parse_judgement({"faithfulness": {"score": "5", "reason": "all supported"},
        ...                      "correctness": {"score": 3, "reason": "partly"}, "completeness": 1})
        >>> j.scores, j.reasons["completeness"]
        ({'faithfulness': 1.0, 'correctness': 0.5, 'completeness': 0.0}, '')
        >>> parse_judgement({"faithfulness": 5, "correctness": 9, "completeness": 5}) is None
        True
    """
    obj = _load(data)
    if not isinstance(obj, Mapping):
        return None
    scores: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for criterion in CRITERIA:
        entry = obj.get(criterion)
        raw, reason = (entry.get("score"), entry.get("reason")) if isinstance(entry, Mapping) else (entry, None)
        score = _score(raw)
        if score is None:
            return None
        scores[criterion] = (score - SCALE[0]) / (SCALE[1] - SCALE[0])
        reasons[criterion] = reason.strip() if isinstance(reason, str) else ""
    return Judgement(scores, reasons)


# --- aggregating the samples of one item -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CriterionGrade:
    """One criterion of one item: the median score over readable samples (0..1), their spread (max − min), and the
    reason of the sample closest to the median."""

    median: float
    spread: float
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "spread": self.spread, "reason": self.reason}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CriterionGrade:
        return cls(float(obj["median"]), float(obj["spread"]), str(obj["reason"]))


@dataclass(frozen=True)
class ItemGrade:
    """One item's grade: per criterion (empty when ungraded), how many samples were used and how many unreadable."""

    id: str
    category: str
    criteria: Mapping[str, CriterionGrade]
    used: int
    unreadable: int

    @property
    def ungraded(self) -> bool:
        return not self.criteria

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "criteria": {c: g.to_json() for c, g in self.criteria.items()},
            "used": self.used,
            "unreadable": self.unreadable,
            "ungraded": self.ungraded,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ItemGrade:
        return cls(
            str(obj["id"]),
            str(obj["category"]),
            {c: CriterionGrade.from_json(g) for c, g in obj["criteria"].items()},
            int(obj["used"]),
            int(obj["unreadable"]),
        )


def aggregate(samples: Sequence[Judgement | None], *, item_id: str = "", category: str = "uncategorized") -> ItemGrade:
    """The samples of one item (None: unreadable) → its grade. Per criterion: the median over the readable samples,
    the spread, the reason of the first sample closest to the median. No readable sample: ungraded, never a 0.

    Example:
        >>> s = [Judgement(dict.fromkeys(CRITERIA, v), dict.fromkeys(CRITERIA, f"r{v}")) for v in (0.5, 1.0, 0.75)]
        >>> g = aggregate([*s, None], item_id="a-1")
        >>> g.criteria["faithfulness"], g.used, g.unreadable
        (CriterionGrade(median=0.75, spread=0.5, reason='r0.75'), 3, 1)
        >>> aggregate([None, None]).ungraded
        True
    """
    readable = [s for s in samples if s is not None]
    criteria: dict[str, CriterionGrade] = {}
    if readable:
        for criterion in CRITERIA:
            values = [s.scores[criterion] for s in readable]
            median = float(statistics.median(values))
            closest = min(range(len(readable)), key=lambda i: abs(values[i] - median))
            criteria[criterion] = CriterionGrade(
                median, max(values) - min(values), readable[closest].reasons.get(criterion, "")
            )
    return ItemGrade(item_id, category, criteria, len(readable), len(samples) - len(readable))


# --- the report ------------------------------------------------------------------------------------------------------


def _means(grades: Sequence[ItemGrade], attribute: str) -> dict[str, float]:
    graded = [g for g in grades if not g.ungraded]
    if not graded:
        return {}
    return {
        c: math.fsum(getattr(g.criteria[c], attribute) for g in graded) / len(graded)
        for c in CRITERIA
        if all(c in g.criteria for g in graded)
    }


@dataclass(frozen=True)
class CategoryGrade:
    """One category: per criterion the mean of its graded items' medians; how many items were graded and not."""

    name: str
    graded: int
    ungraded: int
    means: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "graded": self.graded, "ungraded": self.ungraded, "means": dict(self.means)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CategoryGrade:
        return cls(
            str(obj["name"]),
            int(obj["graded"]),
            int(obj["ungraded"]),
            {k: float(v) for k, v in obj["means"].items()},
        )


@dataclass(frozen=True)
class AnswerReport:
    """Answer grades of a set: per criterion the mean of item medians overall and per category (worst first), the
    mean spread (the judge's disagreement with itself), the ungraded count, and who judged (model, prompt version,
    samples per item). `to_json` / `from_json` round-trip.

    Example:
        >>> g = aggregate([Judgement(dict.fromkeys(CRITERIA, 1.0))], item_id="a-1")
        >>> report = AnswerReport.build([g, aggregate([None], item_id="a-2")], judge_model="m", samples_per_item=1)
        >>> report.overall["faithfulness"], report.ungraded
        (1.0, 1)
        >>> AnswerReport.from_json(report.to_json()) == report
        True
    """

    judge_model: str
    prompt_version: str
    samples_per_item: int
    overall: Mapping[str, float]
    by_category: tuple[CategoryGrade, ...]
    spread: Mapping[str, float]
    graded: int
    ungraded: int
    items: tuple[ItemGrade, ...] = ()
    set_name: str = ""

    @classmethod
    def build(
        cls,
        grades: Sequence[ItemGrade],
        *,
        judge_model: str,
        samples_per_item: int,
        prompt_version: str = JUDGE_PROMPT_VERSION,
        set_name: str = "",
    ) -> AnswerReport:
        """Aggregate the item grades."""
        if not grades:
            raise EvalError("no graded items")
        if samples_per_item < 1:
            raise EvalError(f"samples_per_item must be >= 1, got {samples_per_item}")
        categories = []
        for name in sorted({g.category for g in grades}):
            members = [g for g in grades if g.category == name]
            ungraded = sum(g.ungraded for g in members)
            categories.append(CategoryGrade(name, len(members) - ungraded, ungraded, _means(members, "median")))
        # worst first: by the lowest criterion mean; categories nothing graded last
        categories.sort(key=lambda c: (not c.means, min(c.means.values(), default=0.0), c.name))
        ungraded = sum(g.ungraded for g in grades)
        return cls(
            judge_model=judge_model,
            prompt_version=prompt_version,
            samples_per_item=samples_per_item,
            overall=_means(grades, "median"),
            by_category=tuple(categories),
            spread=_means(grades, "spread"),
            graded=len(grades) - ungraded,
            ungraded=ungraded,
            items=tuple(grades),
            set_name=set_name,
        )

    def retrieval_note(self, recall_at_10: float | None, threshold: float = 0.8) -> str | None:
        """A warning when the set's retrieval recall is below `threshold`, else None.

        Example:
            >>> report = AnswerReport("m", "judge-v1", 3, {}, (), {}, 0, 0, set_name="handbook")
            >>> report.retrieval_note(0.62).split(";")[0], report.retrieval_note(0.9)
            ('fix retrieval first: recall@10 of set handbook is 0.62, below 0.8', None)
        """
        if recall_at_10 is None or recall_at_10 >= threshold:
            return None
        name = f"set {self.set_name}" if self.set_name else "the set"
        return (
            f"fix retrieval first: recall@10 of {name} is {recall_at_10:.2f}, below {threshold:g}; "
            "answer grades measure the generator only once the right passages reach it"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "set_name": self.set_name,
            "judge_model": self.judge_model,
            "prompt_version": self.prompt_version,
            "samples_per_item": self.samples_per_item,
            "overall": dict(self.overall),
            "by_category": [c.to_json() for c in self.by_category],
            "spread": dict(self.spread),
            "graded": self.graded,
            "ungraded": self.ungraded,
            "items": [g.to_json() for g in self.items],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AnswerReport:
        try:
            return cls(
                judge_model=str(obj["judge_model"]),
                prompt_version=str(obj["prompt_version"]),
                samples_per_item=int(obj["samples_per_item"]),
                overall={k: float(v) for k, v in obj["overall"].items()},
                by_category=tuple(CategoryGrade.from_json(c) for c in obj["by_category"]),
                spread={k: float(v) for k, v in obj["spread"].items()},
                graded=int(obj["graded"]),
                ungraded=int(obj["ungraded"]),
                items=tuple(ItemGrade.from_json(g) for g in obj.get("items", ())),
                set_name=str(obj.get("set_name", "")),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise EvalError(f"not a stored answer report: {exc!r}") from None
