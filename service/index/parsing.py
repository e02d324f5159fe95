"""Parsing: a document's text → sections, each a heading path and the blocks under it.

Every block keeps its character span in the original text, so chunks can point back into the document.
Markdown goes through markdown-it (CommonMark plus pipe tables); HTML through the standard library's
parser; plain text is paragraphs separated by blank lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from markdown_it.token import Token

from service.domain import DocFormat


class BlockKind(StrEnum):
    PROSE = "prose"  # may be split at sentence boundaries
    LIST = "list"  # may be split between items
    ATOMIC = "atomic"  # tables and code: never split


@dataclass(frozen=True)
class Block:
    kind: BlockKind
    start: int
    end: int
    text: str
    # For LIST blocks: the spans of the top-level items, so a long list splits between items.
    parts: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Section:
    heading_path: tuple[str, ...]
    blocks: tuple[Block, ...]


def parse(text: str, fmt: DocFormat, title: str) -> list[Section]:
    """Sections in document order. A top-level heading equal to `title` is left out of heading paths.

    Example:
        >>> [s.heading_path for s in parse("# Refunds\\nIntro\\n## Annual plans\\nText", DocFormat.MARKDOWN, "Refunds")]
        [(), ('Annual plans',)]
    """
    if fmt is DocFormat.MARKDOWN:
        sections = _parse_markdown(text)
    elif fmt is DocFormat.HTML:
        sections = _HtmlSections(text).sections()
    else:
        sections = [Section((), tuple(_paragraphs(text, 0, len(text))))]
    return [Section(_drop_title(s.heading_path, title), s.blocks) for s in sections if s.blocks]


def _drop_title(path: tuple[str, ...], title: str) -> tuple[str, ...]:
    if path and path[0].strip().casefold() == title.strip().casefold():
        return path[1:]
    return path


class _SectionBuilder:
    """Collects blocks under the current heading path."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self._stack: list[tuple[int, str]] = []
        self._blocks: list[Block] = []

    def heading(self, level: int, title: str) -> None:
        self._close()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, " ".join(title.split())))

    def block(self, block: Block) -> None:
        if block.text:
            self._blocks.append(block)

    def _close(self) -> None:
        if self._blocks:
            self.sections.append(Section(tuple(t for _, t in self._stack), tuple(self._blocks)))
        self._blocks = []

    def finish(self) -> list[Section]:
        self._close()
        return self.sections


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    for match in re.finditer("\n", text):
        offsets.append(match.end())
    offsets.append(len(text))
    return offsets


def _span(text: str, start: int, end: int) -> tuple[int, int]:
    """Trim whitespace off both ends of text[start:end]."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _parse_markdown(text: str) -> list[Section]:
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    lines = _line_offsets(text)
    builder = _SectionBuilder()

    def offsets(token: Token) -> tuple[int, int]:
        first, last = token.map or (0, 0)  # every block-level opening token carries its line range
        return _span(text, lines[first], lines[min(last, len(lines) - 1)])

    for i, token in enumerate(tokens):
        if token.level != 0 or token.map is None or token.nesting == -1:
            continue
        if token.type == "heading_open":
            builder.heading(int(token.tag[1:]), tokens[i + 1].content)
            continue
        start, end = offsets(token)
        if token.type in ("table_open", "fence", "code_block", "html_block"):
            kind = BlockKind.ATOMIC
        elif token.type in ("bullet_list_open", "ordered_list_open"):
            items = tuple(offsets(t) for t in _children(tokens, i) if t.type == "list_item_open" and t.level == 1)
            builder.block(Block(BlockKind.LIST, start, end, text[start:end], items))
            continue
        elif token.type == "hr":
            continue
        else:
            kind = BlockKind.PROSE
        builder.block(Block(kind, start, end, text[start:end]))
    return builder.finish()


def _children(tokens: list[Token], open_index: int) -> list[Token]:
    depth, out = 0, []
    for token in tokens[open_index:]:
        depth += token.nesting
        out.append(token)
        if depth == 0:
            break
    return out


def _paragraphs(text: str, start: int, end: int) -> list[Block]:
    blocks = []
    for match in re.finditer(r"\S(?:.*?)(?=\n\s*\n|\Z)", text[start:end], flags=re.S):
        s, e = _span(text, start + match.start(), start + match.end())
        blocks.append(Block(BlockKind.PROSE, s, e, text[s:e]))
    return blocks


_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {"p", "li", "pre", "blockquote", "dd", "dt", "table", "figcaption", "caption"}
_SKIP = {"script", "style", "head", "nav", "noscript", "template"}


class _HtmlSections(HTMLParser):
    """Headings become the path; tables become pipe-table text kept whole; other blocks are prose."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self._source = source
        self._lines = _line_offsets(source)
        self._builder = _SectionBuilder()
        self._skip = 0
        self._open: str | None = None  # the heading or block element being collected
        self._start = 0
        self._buf: list[str] = []
        self._rows: list[list[str]] = []

    def sections(self) -> list[Section]:
        self.feed(self._source)
        self.close()
        self._flush(len(self._source))
        return self._builder.finish()

    def _offset(self) -> int:
        line, col = self.getpos()
        return self._lines[line - 1] + col

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:  # noqa: ARG002
        if tag in _SKIP:
            self._skip += 1
        elif self._open == "table":
            if tag == "tr":
                self._rows.append([])
            elif tag in ("td", "th") and self._rows:
                self._rows[-1].append("")
        elif tag in _HEADINGS or tag in _BLOCKS:
            self._flush(self._offset())
            self._open, self._start = tag, self._offset()
        elif tag == "br":
            self._buf.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == self._open:
            end = self._source.find(">", self._offset()) + 1 or len(self._source)
            self._flush(end)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._open == "table" and self._rows and self._rows[-1]:
            self._rows[-1][-1] += data
        elif self._open != "table":
            if self._open is None and data.strip():
                self._open, self._start = "p", self._offset()
            self._buf.append(data)

    def _flush(self, end: int) -> None:
        tag, self._open = self._open, None
        if tag in _HEADINGS:
            self._builder.heading(_HEADINGS[tag], "".join(self._buf))
        elif tag == "table":
            rows = [[" ".join(c.split()) for c in r] for r in self._rows if r]
            if rows:
                lines = ["| " + " | ".join(r) + " |" for r in rows]
                lines.insert(1, "|" + "---|" * len(rows[0]))
                self._builder.block(Block(BlockKind.ATOMIC, self._start, end, "\n".join(lines)))
        elif tag is not None:
            body = "\n".join(" ".join(line.split()) for line in "".join(self._buf).split("\n")).strip()
            kind = BlockKind.ATOMIC if tag == "pre" else BlockKind.PROSE
            self._builder.block(Block(kind, self._start, end, body))
        self._buf, self._rows = [], []
