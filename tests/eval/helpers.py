"""Small builders shared by the eval tests: labels, cases, results and runs in one line each."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from eval.cases import Case, Label
from eval.matching import Retrieved, Unit
from eval.runner import FunctionRetriever, Query, Run, run_set


def res(chunk_id: str, text: str = "", score: float = 0.0) -> Retrieved:
    """A result whose document is the part of `chunk_id` before the last `#` (the id itself if none)."""
    return Retrieved(chunk_id, chunk_id.rpartition("#")[0] or chunk_id, text, score)


def docs(*doc_ids: str) -> list[Retrieved]:
    """One chunk per document, in this order."""
    return [res(f"{d}#0") for d in doc_ids]


def case(
    case_id: str,
    *labels: Label,
    question: str | None = None,
    category: str = "general",
    source: str = "handwritten",
) -> Case:
    return Case(case_id, question or f"question {case_id}", tuple(labels), category=category, source=source)


def doc_case(case_id: str, *doc_ids: str, category: str = "general", source: str = "handwritten") -> Case:
    """A case whose labels are whole documents (grade 1)."""
    return case(case_id, *(Label(doc_id=d) for d in doc_ids), category=category, source=source)


def run_with(
    cases: Sequence[Case],
    rankings: Mapping[str, Sequence[Retrieved]] | Callable[[Case], Sequence[Retrieved]],
    *,
    ks: Sequence[int] = (1, 5, 10),
    unit: Unit = "chunk",
    set_name: str = "test",
) -> Run:
    """Run `cases` through a retriever that answers each question with the given ranking."""
    by_question = {c.question: c for c in cases}

    def answer(q: Query) -> Sequence[Retrieved]:
        c = by_question[q.text]
        return rankings(c) if callable(rankings) else rankings.get(c.id, [])

    return run_set(cases, FunctionRetriever(answer), set_name=set_name, ks=ks, unit=unit)


def filler(case_id: str, n: int) -> list[Retrieved]:
    """`n` results that satisfy no label of any case built with these helpers."""
    return [res(f"noise/{case_id}/{i}#0") for i in range(n)]
