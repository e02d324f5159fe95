"""Which retrieved results satisfy which labels, at which rank.

`unit="chunk"` keeps chunk ranks (what fills a context window): a chunk label is satisfied by that
chunk, a document label by any chunk of the document, an evidence label by a chunk of the document
whose text contains the evidence after whitespace, Unicode and Markdown-emphasis normalisation (`normalize`).
`unit="doc"` first collapses results to documents (the first occurrence keeps its rank) and judges
every label at document level: the label's document (a chunk label's is the part of its id before
`#`) must be the result. This is BEIR's unit; on BEIR data every metric then equals trec_eval's.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from eval.cases import Label
from eval.errors import EvalError

Unit = Literal["chunk", "doc"]


@dataclass(frozen=True)
class Retrieved:
    """One ranked result as the evaluator sees it. `stale`: the result's document was not current when
    it was retrieved (superseded, archived or draft, or past its valid_until); it feeds `stale@k`."""

    chunk_id: str
    doc_id: str
    text: str = ""
    score: float = 0.0
    stale: bool = False


@dataclass(frozen=True)
class Judgement:
    """For one case: each positive label's first satisfying rank (1-based; None if missed) and grade,
    and for each result (after the unit's collapse) whether it satisfies at least one positive label and
    whether its document was stale (not current) when retrieved."""

    first_ranks: tuple[int | None, ...]
    grades: tuple[int, ...]
    relevant: tuple[bool, ...]
    stale: tuple[bool, ...] = ()


def normalize(text: str) -> str:
    """NFKC, case-folded, Markdown emphasis and code marks (`*`, `` ` ``) dropped, whitespace runs collapsed to
    one space: evidence copied from a rendered page ("a full cash refund") matches the source's
    "a **full cash refund**".

    Example:
        >>> normalize("Receives a **FULL  cash** refund")
        'receives a full cash refund'
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().translate(_MARKS).split())


_MARKS = str.maketrans("", "", "*`")


def collapse_to_documents(results: Sequence[Retrieved]) -> list[Retrieved]:
    """One result per document, at the rank of its first chunk."""
    seen: set[str] = set()
    out = []
    for r in results:
        if r.doc_id not in seen:
            seen.add(r.doc_id)
            out.append(r)
    return out


def judge(labels: Sequence[Label], results: Sequence[Retrieved], unit: Unit) -> Judgement:
    """Match positive labels against ranked results (see the module docstring for the rules)."""
    if unit not in ("chunk", "doc"):
        raise EvalError(f"unit must be 'chunk' or 'doc', got {unit!r}")
    positive = [label for label in labels if label.grade > 0]
    if not positive:
        raise EvalError("no label has a grade above 0: the case cannot be scored")
    ranked = collapse_to_documents(results) if unit == "doc" else list(results)
    texts: list[str | None] = [None] * len(ranked)

    def satisfies(i: int, label: Label) -> bool:
        r = ranked[i]
        if unit == "doc":
            return r.doc_id == label.document
        if label.chunk_id is not None:
            return r.chunk_id == label.chunk_id
        if r.doc_id != label.doc_id:
            return False
        if label.evidence is None:
            return True
        if texts[i] is None:
            texts[i] = normalize(r.text)
        return normalize(label.evidence) in (texts[i] or "")

    hits = [[satisfies(i, label) for i in range(len(ranked))] for label in positive]
    first_ranks = tuple(next((i + 1 for i, ok in enumerate(row) if ok), None) for row in hits)
    relevant = tuple(any(row[i] for row in hits) for i in range(len(ranked)))
    stale = tuple(r.stale for r in ranked)
    return Judgement(first_ranks, tuple(label.grade for label in positive), relevant, stale)
