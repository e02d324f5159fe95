from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from service.domain import DocFormat, DocStatus, Document
from service.errors import InvalidRequest
from service.index.loaders import count_documents, iter_documents


def test_handbook_front_matter(handbook_docs: list[Document]) -> None:
    by_id = {d.id: d for d in handbook_docs}
    assert 30 <= len(by_id) <= 60
    pricing = by_id["billing/pricing"]
    assert pricing.supersedes == "billing/pricing-2025"
    assert pricing.status is DocStatus.CURRENT
    assert by_id["billing/pricing-2025"].status is DocStatus.SUPERSEDED
    assert pricing.updated_at is not None
    assert pricing.updated_at.tzinfo is not None
    assert pricing.metadata["department"] == "billing"
    assert pricing.tags
    assert not pricing.text.startswith("---")
    assert pricing.text.lstrip().startswith("# ")
    assert by_id["hr/travel-freeze-2026"].valid_until == dt.datetime(2026, 6, 30, tzinfo=dt.UTC)
    assert {d.tenant for d in handbook_docs} == {"larkspur", "fjord"}


def test_folder_of_mixed_formats(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.md").write_text("# X\n\nbody")
    (tmp_path / "y.txt").write_text("plain")
    (tmp_path / "z.html").write_text("<h1>Z</h1><p>p</p>")
    (tmp_path / "ignored.pdf").write_bytes(b"%PDF")
    docs = list(iter_documents(tmp_path))
    assert [(d.id, d.format) for d in docs] == [
        ("a/x", DocFormat.MARKDOWN),
        ("y", DocFormat.TEXT),
        ("z", DocFormat.HTML),
    ]
    assert count_documents(tmp_path) == 3


def test_beir_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "4983", "title": "T", "text": "abstract"}) + "\n\n")
    [doc] = iter_documents(corpus)
    assert (doc.id, doc.title, doc.text, doc.format) == ("4983", "T", "abstract", DocFormat.TEXT)
    assert count_documents(corpus) == 1
    corpus.write_text('{"title": "no id"}\n')
    with pytest.raises(InvalidRequest, match=r"corpus\.jsonl:1"):
        list(iter_documents(corpus))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\ntitle: [unclosed\n---\nbody", "not valid YAML"),
        ("---\ntitle: T\nbody never closed", "never closed"),
        ("---\ncolour: red\n---\nbody", "unknown front matter keys"),
        ("---\nstatus: ancient\n---\nbody", "ancient"),
        ("---\nupdated_at: sometime\n---\nbody", "ISO 8601"),
        ("---\n- a list\n---\nbody", "mapping"),
    ],
)
def test_bad_front_matter(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "d.md").write_text(text)
    with pytest.raises(InvalidRequest, match=message):
        list(iter_documents(tmp_path))


def test_missing_path() -> None:
    with pytest.raises(InvalidRequest, match="does not exist"):
        list(iter_documents(Path("/nonexistent/folder")))
