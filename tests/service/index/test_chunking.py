from __future__ import annotations

import itertools
import re

import pytest

from service.domain import DocFormat, Document
from service.index.chunking import Chunker, ChunkerConfig
from service.index.parsing import BlockKind, parse


def _chunks(doc: Document, size: int = 1000, overlap: int = 100) -> list:
    return Chunker(ChunkerConfig(size=size, overlap=overlap)).chunk(doc)


@pytest.mark.parametrize("size", [300, 1000])
def test_handbook_chunks_are_exact_spans_with_sequential_ids(handbook_docs: list[Document], size: int) -> None:
    for doc in handbook_docs:
        chunks = _chunks(doc, size=size, overlap=size // 10)
        assert chunks, doc.id
        assert [c.chunk_id for c in chunks] == [f"{doc.id}#{i}" for i in range(len(chunks))]
        for c in chunks:
            assert c.text == doc.text[c.start : c.end]
            assert c.text.strip() == c.text
            assert c.text


def test_handbook_tables_are_never_split_from_their_header(handbook_docs: list[Document]) -> None:
    tables = 0
    for doc in handbook_docs:
        chunks = _chunks(doc, size=300, overlap=30)
        for section in parse(doc.text, doc.format, doc.title):
            for block in section.blocks:
                if block.kind is BlockKind.ATOMIC and block.text.startswith("|"):
                    tables += 1
                    holders = [c for c in chunks if c.start <= block.start and block.end <= c.end]
                    assert holders, f"table at {block.start} in {doc.id} is split"
                    # no chunk holds only a part of it
                    assert not [
                        c for c in chunks if block.start < c.end <= block.end - 1 or block.start < c.start < block.end
                    ]
    assert tables >= 15


def test_handbook_chunks_never_cross_a_heading(handbook_docs: list[Document]) -> None:
    heading_line = re.compile(r"^#{1,6} ", re.M)
    for doc in handbook_docs:
        for c in _chunks(doc, size=400, overlap=40):
            inside_code = "```" in c.text
            assert inside_code or not heading_line.search(c.text), c.chunk_id


def test_heading_path_prefix_is_what_the_models_see(handbook_docs: list[Document]) -> None:
    refunds = next(d for d in handbook_docs if d.id == "billing/refunds")
    deep = [c for c in _chunks(refunds) if len(c.heading_path) >= 2]
    assert deep
    c = deep[0]
    assert c.embed_text.startswith(f"{refunds.title}\n{' > '.join(c.heading_path)}\n\n")
    assert c.embed_text.endswith(c.text)


def test_size_is_respected_except_for_atomic_blocks(handbook_docs: list[Document]) -> None:
    for doc in handbook_docs:
        for c in _chunks(doc, size=300, overlap=30):
            if len(c.text) > 300 * 1.1:
                assert "|" in c.text or "```" in c.text, (c.chunk_id, len(c.text))


LONG = "# Policy\n\n## Rules\n\n" + " ".join(f"Sentence number {i} says something useful." for i in range(40)) + "\n"


def test_long_prose_splits_at_sentences_with_overlap() -> None:
    doc = Document(id="p", title="Policy", text=LONG)
    chunks = _chunks(doc, size=200, overlap=90)
    assert len(chunks) > 5
    for a, b in itertools.pairwise(chunks):
        assert a.text.endswith(".")
        assert b.text.startswith("Sentence")
        assert b.start < a.end  # overlap: the next chunk repeats the previous one's last sentence(s)
        assert a.end - b.start <= 90


def test_without_overlap_chunks_tile_the_section() -> None:
    doc = Document(id="p", title="Policy", text=LONG)
    chunks = _chunks(doc, size=200, overlap=0)
    for a, b in itertools.pairwise(chunks):
        assert a.end < b.start
        assert doc.text[a.end : b.start].strip() == ""


def test_an_over_long_sentence_is_cut_at_word_boundaries() -> None:
    text = "word " * 500
    doc = Document(id="w", title="W", text=text, format=DocFormat.TEXT)
    chunks = _chunks(doc, size=200, overlap=0)
    assert len(chunks) >= 10
    assert all(len(c.text) <= 200 and not c.text.endswith("wor") for c in chunks)


def test_long_lists_split_between_items() -> None:
    items = "\n".join(f"- item {i} with a little bit of text to make it longer" for i in range(30))
    doc = Document(id="l", title="L", text=f"# L\n\n## List\n\n{items}\n")
    chunks = _chunks(doc, size=250, overlap=0)
    assert len(chunks) > 3
    assert all(c.text.startswith("- item") for c in chunks)


def test_html_chunks_carry_visible_text() -> None:
    html = "<h1>Guide</h1><h2>Prices</h2><p>Pro costs <b>€69</b> a month.</p>"
    [c] = Chunker(ChunkerConfig()).chunk(Document(id="h", title="Guide", text=html, format=DocFormat.HTML))
    assert c.text == "Pro costs €69 a month."
    assert c.heading_path == ("Prices",)


def test_invalid_config() -> None:
    with pytest.raises(ValueError, match="chunking"):
        ChunkerConfig(size=100, overlap=60)


@pytest.mark.parametrize("name", ["handbook", "plain"])
def test_every_evidence_of_a_shipped_set_lies_within_one_chunk(name: str, handbook_docs: list[Document]) -> None:
    """A label's answering words must fit one chunk of the default chunking, or no result could ever satisfy it; the
    plain-language set's evidence also names exactly one passage (its questions have one answer)."""
    from eval.matching import normalize
    from eval.storage import load_set

    chunker = Chunker(ChunkerConfig())
    texts = {d.id: [normalize(c.text) for c in chunker.chunk(d)] for d in handbook_docs}
    for case in load_set(name)[1]:
        for label in case.relevant:
            if label.evidence is None:
                continue
            holding = [t for t in texts[label.doc_id] if normalize(label.evidence) in t]
            assert holding, f"{case.id}: {label.evidence!r} is in no single chunk of {label.doc_id}"
            if name == "plain":
                assert len(holding) == 1, f"{case.id}: {label.evidence!r} is in {len(holding)} chunks"
