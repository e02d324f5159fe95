"""Incidents as labelled cases: the normalised question that identifies one, and the case it becomes.

A support person reports a question the assistant answered wrongly and the source that answers it. Reports
of the same question (in the same set and tenant) are one incident; "the same" is decided by
`question_key`, so spelling variants in case, width, spacing and punctuation collapse:

    >>> question_key("What's the refund window?") == question_key("  WHAT'S   the refund-window ")
    True
    >>> question_key("退款期限是多少？") == question_key("退款期限是多少?")
    True

An accepted incident becomes the case `incident-<id>` (source `incident`) of its set, so every later eval
run checks it; `plumbline incidents export` writes those cases as JSON Lines for `eval/sets/`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from eval.cases import Case, Label

CASE_PREFIX = "incident-"
SOURCE = "incident"
STATUSES = ("new", "accepted", "rejected")
_NOT_WORD = re.compile(r"[\W_]+")


def question_key(question: str) -> str:
    """NFKC (full-width forms become ASCII), case-folded, with every run of whitespace and punctuation
    (CJK punctuation included) removed: what two reports of one question share."""
    return _NOT_WORD.sub("", unicodedata.normalize("NFKC", question).casefold())


def incident_case(
    incident_id: int,
    question: str,
    labels: Sequence[Label],
    category: str,
    filters: Mapping[str, Any],
    tenant: str | None,
    created_at: str | None,
) -> Case:
    """The labelled case an incident stands for; the tenant the user had is one of its filters."""
    scoped = {**filters, **({"tenant": tenant} if tenant else {})}
    return Case(
        id=f"{CASE_PREFIX}{incident_id}",
        question=question,
        relevant=tuple(labels),
        category=category,
        source=SOURCE,
        filters=scoped,
        created_at=created_at,
    )


def incident_id(case_id: str) -> int | None:
    """The incident behind a case id (`incident-12` -> 12), or None for any other case."""
    if case_id.startswith(CASE_PREFIX) and case_id[len(CASE_PREFIX) :].isdigit():
        return int(case_id[len(CASE_PREFIX) :])
    return None
