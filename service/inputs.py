"""What every way into the service validates alike, as pydantic models: a document as a caller writes it
(`DocumentIn`: a POST /documents body, a document `plumbline ingest --url` sends), search filters (`FiltersIn`: a
request's, a labelled case's, an incident's) and search options (`SearchOptions`: a /search request's, an eval run's
overrides, `plumbline eval run --override`), and the checked values they are built from. They forbid unknown
fields, so a typo (`filters: {"tennant": ...}`) is an error naming the field, not a silently ignored filter.
`service.api.schemas` builds its request bodies from them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from service.domain import DocFormat, DocStatus, FusionMethod, Mode

INT64 = 2**63
# Metadata is stored in every chunk's payload, and the engine cannot read back a payload nested deeper than
# about 127 levels: one such document made its points unreadable and undeletable (see `plumbline doctor`).
# Nothing a filter can match needs more than a few levels, so the limits are far below the engine's.
MAX_METADATA_DEPTH = 8
MAX_METADATA_BYTES = 64 * 1024
DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# The longest lists a filter may name (422 beyond), far past what a search needs, so that a body under the byte limit
# cannot make a filter of millions of conditions: tags and document ids (a document holds at most 100 tags; an
# application narrowing a search to the documents a user may see names them; 1,000 is `max_candidates`' default).
MAX_FILTER_TAGS = 1000
MAX_FILTER_DOC_IDS = 1000


def valid_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains invalid Unicode (a lone surrogate): send UTF-8 text") from None
    return value


def _utc(value: dt.datetime) -> dt.datetime:
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC (years 1 to 9999)") from None


def _date_only_is_midnight_utc(value: Any) -> Any:
    """`2026-01-01` means 2026-01-01T00:00:00Z, as it does in front matter (`service.index.loaders`)."""
    return f"{value}T00:00:00Z" if isinstance(value, str) and DATE_ONLY.match(value) else value


def _json_value(value: Any, where: str = "metadata", depth: int = 1) -> Any:
    """Metadata values as the engine can store them: finite numbers, 64-bit integers, valid text, and
    objects or lists nested at most `MAX_METADATA_DEPTH` levels (the top-level object is level 1)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and not -INT64 <= value < INT64:
        raise ValueError(f"{where}: an integer of {len(str(abs(value)))} digits does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a finite number")
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list | dict) and depth > MAX_METADATA_DEPTH:
        raise ValueError(f"{where}: nested too deep; metadata may nest objects and lists {MAX_METADATA_DEPTH} levels")
    if isinstance(value, list):
        return [_json_value(v, where, depth + 1) for v in value]
    if isinstance(value, dict):
        return {valid_text(str(k)): _json_value(v, f"{where}.{k}", depth + 1) for k, v in value.items()}
    return value


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = _json_value(value)
    size = len(json.dumps(checked, ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}: keep large data in the text")
    return checked


Text = Annotated[str, AfterValidator(valid_text)]
UtcDatetime = Annotated[AwareDatetime, BeforeValidator(_date_only_is_midnight_utc), AfterValidator(_utc)]
Metadata = Annotated[dict[str, Any], AfterValidator(_metadata)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentIn(Strict):
    id: Text = Field(min_length=1, max_length=512, description="stable, caller-given id")
    title: Text = Field("", max_length=1000, description="defaults to the first '# heading' or the id")
    text: Text = Field(min_length=1)
    format: DocFormat = DocFormat.MARKDOWN
    metadata: Metadata = Field(default_factory=dict)
    tags: list[Text] = Field(default_factory=list, max_length=100)
    tenant: Text | None = Field(None, max_length=200)
    status: DocStatus = DocStatus.CURRENT
    updated_at: UtcDatetime | None = None
    valid_until: UtcDatetime | None = None
    supersedes: Text | None = Field(None, max_length=512)


class FiltersIn(Strict):
    tenant: Text | None = None
    tags: list[Text] = Field(default_factory=list, max_length=MAX_FILTER_TAGS, description="any of these tags")
    doc_ids: list[Text] = Field(default_factory=list, max_length=MAX_FILTER_DOC_IDS, description="any of these ids")
    status: list[DocStatus] = Field(default_factory=list, max_length=len(DocStatus), description="any of these")
    updated_after: UtcDatetime | None = None
    updated_before: UtcDatetime | None = None
    metadata: Metadata = Field(
        default_factory=dict, description='{"key": value}, {"key": [v1, v2]} or {"key": {"gte": 1, "lt": 5}}'
    )
    exclude_doc_ids: list[Text] = Field(
        default_factory=list, max_length=MAX_FILTER_DOC_IDS, description="leave out these documents"
    )
    exclude_tags: list[Text] = Field(
        default_factory=list, max_length=MAX_FILTER_TAGS, description="leave out documents with any of these tags"
    )


class SearchOptions(Strict):
    """How to search; every field left out takes the service's default (see Settings)."""

    mode: Mode | None = None
    fusion: FusionMethod | None = None
    alpha: float | None = Field(None, description="weight of the dense side in weighted fusion, 0..1")
    rrf_k: int | None = None
    candidates: int | None = Field(None, description="candidate depth per retriever")
    rerank: bool | None = None
    rerank_depth: int | None = None
    filters: FiltersIn = Field(default_factory=FiltersIn)
    fresh_only: bool = Field(True, description="only current documents that have not expired")
