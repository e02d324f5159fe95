"""Reading documents from disk for `plumbline ingest`: a folder of files, or a BEIR `corpus.jsonl`.

In a folder, `.md`/`.markdown`, `.txt` and `.html`/`.htm` files become documents whose id is the path
relative to the folder without its extension (`billing/refunds`). Markdown may start with YAML front
matter holding any document field (title, tags, tenant, status, updated_at, valid_until, supersedes,
metadata, id); the body after it is the text. Without a title, the first `# heading` or the id is used.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from service.domain import DocFormat, DocStatus, Document
from service.errors import InvalidRequest
from service.filters import parse_datetime

T = TypeVar("T")

FORMATS = {
    ".md": DocFormat.MARKDOWN,
    ".markdown": DocFormat.MARKDOWN,
    ".txt": DocFormat.TEXT,
    ".html": DocFormat.HTML,
    ".htm": DocFormat.HTML,
}
FIELDS = {"id", "title", "tags", "tenant", "status", "updated_at", "valid_until", "supersedes", "metadata"}


def iter_documents(path: Path) -> Iterator[Document]:
    """Documents under `path` (a folder, a single file, or a BEIR corpus.jsonl), sorted by path."""
    if path.is_file() and path.suffix == ".jsonl":
        yield from _beir_corpus(path)
    elif path.is_file():
        yield _file_document(path, path.parent)
    elif path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS):
            yield _file_document(file, path)
    else:
        raise InvalidRequest(f"{path} does not exist")


def batched(docs: Iterable[T], size: int) -> Iterator[list[T]]:
    """`docs` in lists of `size` (the last one shorter), read as they come: an ingest's batches.

    Example:
        >>> [len(b) for b in batched([Document(str(n), "t", "x") for n in range(5)], 2)]
        [2, 2, 1]
    """
    batch: list[T] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def count_documents(path: Path) -> int:
    if path.is_file() and path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())
    if path.is_file():
        return 1
    return sum(1 for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)


def _beir_corpus(path: Path) -> Iterator[Document]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                yield Document(
                    id=str(row["_id"]),
                    title=row.get("title") or "",
                    text=row["text"],
                    format=DocFormat.TEXT,
                    metadata=row.get("metadata") or {},
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidRequest(f"{path}:{n}: not a BEIR corpus line (needs _id and text): {exc}") from None


def _file_document(file: Path, root: Path) -> Document:
    fmt = FORMATS[file.suffix.lower()]
    raw = file.read_text(encoding="utf-8")
    meta: Mapping[str, Any] = {}
    if fmt is DocFormat.MARKDOWN and raw.startswith("---"):
        meta, raw = _front_matter(raw, file)
    unknown = set(meta) - FIELDS
    if unknown:
        raise InvalidRequest(f"{file}: unknown front matter keys {sorted(unknown)}; allowed: {sorted(FIELDS)}")
    doc_id = str(meta.get("id") or file.relative_to(root).with_suffix("").as_posix())
    try:
        return Document(
            id=doc_id,
            title=str(meta.get("title") or ""),
            text=raw,
            format=fmt,
            metadata=dict(meta.get("metadata") or {}),
            tags=tuple(str(t) for t in meta.get("tags") or ()),
            tenant=_optional_str(meta.get("tenant")),
            status=DocStatus(meta.get("status", "current")),
            updated_at=_when(meta.get("updated_at"), file, "updated_at"),
            valid_until=_when(meta.get("valid_until"), file, "valid_until"),
            supersedes=_optional_str(meta.get("supersedes")),
        )
    except ValueError as exc:
        raise InvalidRequest(f"{file}: {exc}") from None


def _front_matter(raw: str, file: Path) -> tuple[Mapping[str, Any], str]:
    end = raw.find("\n---", 3)
    if end < 0:
        raise InvalidRequest(f"{file}: front matter opened with '---' is never closed")
    try:
        meta = yaml.safe_load(raw[3:end]) or {}
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"{file}: front matter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise InvalidRequest(f"{file}: front matter must be a mapping of document fields")
    body_start = raw.find("\n", end + 4)
    return meta, raw[body_start + 1 :] if body_start >= 0 else ""


def _optional_str(value: object) -> str | None:
    """YAML reads `tenant: 2024` as a number; ids and tenants are text."""
    return None if value is None else str(value)


def _when(value: object, file: Path, key: str) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    return parse_datetime(str(value), f"{file}: {key}")
