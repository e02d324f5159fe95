"""The service's inner data model: frozen dataclasses, no HTTP or engine types.

Pydantic lives at the edges (`service.api.schemas`); everything inside passes these immutable values
and derives new ones with `dataclasses.replace`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class DocStatus(StrEnum):
    CURRENT = "current"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"
    DRAFT = "draft"


class DocFormat(StrEnum):
    MARKDOWN = "markdown"
    TEXT = "text"
    HTML = "html"


class Mode(StrEnum):
    DENSE = "dense"
    KEYWORD = "keyword"
    HYBRID = "hybrid"


class FusionMethod(StrEnum):
    RRF = "rrf"
    WEIGHTED = "weighted"


@dataclass(frozen=True)
class Document:
    """A caller's document. `id` is stable and caller-given; re-ingesting the same id replaces it.

    Example:
        >>> Document(id="billing/refunds", title="Refunds", text="# Refunds ...").status
        <DocStatus.CURRENT: 'current'>
    """

    id: str
    title: str
    text: str
    format: DocFormat = DocFormat.MARKDOWN
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    tenant: str | None = None
    status: DocStatus = DocStatus.CURRENT
    updated_at: dt.datetime | None = None
    valid_until: dt.datetime | None = None
    supersedes: str | None = None


@dataclass(frozen=True)
class Chunk:
    """A retrievable span of a document: `text` is `document.text[start:end]` as parsed and trimmed.

    For HTML the span is that of the chunk's block elements in the source (markup included) and `text` is
    their visible text. `embed_text` is what the models see: the title and heading path, then the text.

    Example:
        >>> Chunk("a#0", "a", 0, "Refunds", ("Billing", "Annual plans"), "Within 30 days.", 10, 25).heading
        'Billing > Annual plans'
    """

    chunk_id: str
    doc_id: str
    ordinal: int
    title: str
    heading_path: tuple[str, ...]
    text: str
    start: int
    end: int

    @property
    def heading(self) -> str:
        return " > ".join(self.heading_path)

    @property
    def embed_text(self) -> str:
        head = f"{self.title}\n{self.heading}" if self.heading_path else self.title
        return f"{head}\n\n{self.text}"


@dataclass(frozen=True)
class StageScore:
    """A hit's rank (1-based) and score in one pipeline stage; rank None: scored, not retrieved there."""

    rank: int | None
    score: float


@dataclass(frozen=True)
class Hit:
    """A ranked chunk with its document's fields, and per-stage ranks and scores for `explain`.
    `status` is the document's effective status (superseded once a current document supersedes it)."""

    chunk: Chunk
    score: float
    stages: Mapping[str, StageScore]
    status: DocStatus
    tenant: str | None
    tags: tuple[str, ...]
    updated_at: dt.datetime | None
    metadata: Mapping[str, Any]
    valid_until: dt.datetime | None = None  # None: no end date

    def current_at(self, now: dt.datetime) -> bool:
        """Whether the document is current at `now` (timezone-aware): status current and `valid_until`
        absent or later than `now` (expired at the instant itself, as the freshness filter has it).

        Example:
            >>> until = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
            >>> chunk = Chunk("a#0", "a", 0, "A", (), "x", 0, 1)
            >>> hit = Hit(chunk, 1.0, {}, DocStatus.CURRENT, None, (), None, {}, valid_until=until)
            >>> hit.current_at(until - dt.timedelta(seconds=1)), hit.current_at(until)
            (True, False)
            >>> Hit(chunk, 1.0, {}, DocStatus.SUPERSEDED, None, (), None, {}).current_at(until)
            False
        """
        return self.status is DocStatus.CURRENT and (self.valid_until is None or self.valid_until > now)
