"""Chunking: sections → chunks of about `size` characters, with `overlap` characters carried over.

Rules, in order: a chunk never crosses a heading (each chunk has one heading path); a table or code
block is never split (an oversized one becomes a chunk of its own); a long list splits between items,
long prose between sentences, and only a single over-long sentence is cut at a word boundary.
Overlap repeats whole trailing pieces (sentences, items) of the previous chunk, up to `overlap` characters.
Chunk ids are `<doc id>#<ordinal>`: stable as long as the document's text is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.domain import Chunk, DocFormat, Document
from service.index.parsing import Block, BlockKind, Section, parse

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？；])")


@dataclass(frozen=True)
class ChunkerConfig:
    """Sizes in characters.

    Example:
        >>> ChunkerConfig(size=800, overlap=80).size
        800
    """

    size: int = 1000
    overlap: int = 100

    def __post_init__(self) -> None:
        if self.size < 50 or not 0 <= self.overlap < self.size // 2:
            raise ValueError(f"invalid chunking {self}: need size >= 50 and 0 <= overlap < size/2")


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    text: str
    atomic: bool

    def __len__(self) -> int:
        return len(self.text)


class Chunker:
    """Splits documents into chunks.

    Example:
        >>> doc = Document(id="d", title="T", text="# T\\n\\n## A\\n\\nOne. Two.\\n")
        >>> [(c.chunk_id, c.heading_path, c.text) for c in Chunker(ChunkerConfig()).chunk(doc)]
        [('d#0', ('A',), 'One. Two.')]
    """

    def __init__(self, config: ChunkerConfig) -> None:
        self.config = config

    def chunk(self, doc: Document) -> list[Chunk]:
        verbatim = doc.format is not DocFormat.HTML
        chunks: list[Chunk] = []
        for section in parse(doc.text, doc.format, doc.title):
            for pieces in self._pack(self._pieces(doc.text, section, verbatim)):
                start, end = pieces[0].start, pieces[-1].end
                text = doc.text[start:end] if verbatim else "\n".join(p.text for p in pieces)
                chunks.append(
                    Chunk(
                        chunk_id=f"{doc.id}#{len(chunks)}",
                        doc_id=doc.id,
                        ordinal=len(chunks),
                        title=doc.title,
                        heading_path=section.heading_path,
                        text=text,
                        start=start,
                        end=end,
                    )
                )
        return chunks

    def _pieces(self, source: str, section: Section, verbatim: bool) -> list[_Piece]:
        out: list[_Piece] = []
        for block in section.blocks:
            if block.kind is BlockKind.ATOMIC or len(block.text) <= self.config.size:
                out.append(_Piece(block.start, block.end, block.text, block.kind is BlockKind.ATOMIC))
            elif block.kind is BlockKind.LIST and verbatim:
                for start, end in block.parts:
                    out.extend(self._split_prose(source, start, end, verbatim=True))
            else:
                out.extend(self._split_prose(source, block.start, block.end, verbatim, block))
        return out

    def _split_prose(
        self, source: str, start: int, end: int, verbatim: bool, block: Block | None = None
    ) -> list[_Piece]:
        """Sentences (then word-boundary cuts) of a prose span; for HTML the text is the block's."""
        text = source[start:end] if verbatim else (block.text if block else "")
        out: list[_Piece] = []
        cursor = 0
        for match in [*_SENTENCE_END.finditer(text), None]:
            stop = match.start() if match else len(text)
            for s, e in _cut(text, cursor, stop, self.config.size):
                piece = text[s:e]
                out.append(_Piece(start + s, start + e, piece, False) if verbatim else _Piece(start, end, piece, False))
            cursor = match.end() if match else stop
        return out

    def _pack(self, pieces: list[_Piece]) -> list[list[_Piece]]:
        size, overlap = self.config.size, self.config.overlap
        groups: list[list[_Piece]] = []
        current: list[_Piece] = []
        fresh = 0  # pieces in `current` that are not overlap from the previous chunk
        for piece in pieces:
            if current and fresh and _length(current) + len(piece) > size:
                groups.append(current)
                current = _tail(current, overlap, room=size - len(piece))
                fresh = 0
            current.append(piece)
            fresh += 1
        if fresh:
            groups.append(current)
        return groups


def _length(pieces: list[_Piece]) -> int:
    """Characters the pieces span once joined, counting one separator between neighbours."""
    return sum(map(len, pieces)) + len(pieces) - 1


def _tail(pieces: list[_Piece], overlap: int, room: int) -> list[_Piece]:
    """The longest run of trailing non-atomic pieces that fits in `overlap` (and in `room`)."""
    tail: list[_Piece] = []
    total = 0
    for piece in reversed(pieces):
        if piece.atomic or total + len(piece) > min(overlap, room):
            break
        tail.insert(0, piece)
        total += len(piece)
    return tail


def _cut(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Trimmed spans of text[start:end], cut at the last whitespace before each `size` boundary."""
    spans = []
    while start < end:
        while start < end and text[start].isspace():
            start += 1
        stop = min(end, start + size)
        if stop < end:
            space = text.rfind(" ", start + size // 2, stop)
            stop = space if space > 0 else stop
        s, e = start, stop
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            spans.append((s, e))
        start = stop
    return spans
