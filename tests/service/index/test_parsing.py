from __future__ import annotations

from service.domain import DocFormat
from service.index.parsing import BlockKind, parse

MD = """# Refunds

Intro paragraph.

## Annual plans

Annual plans can be refunded.

| Plan | Window |
|---|---|
| Pro | 30 days |

### Pro-rated credits

- first item
- second item

```bash
# not a heading
lkconnect up
```
"""


def test_markdown_sections_follow_the_heading_tree() -> None:
    sections = parse(MD, DocFormat.MARKDOWN, "Refunds")
    assert [s.heading_path for s in sections] == [(), ("Annual plans",), ("Annual plans", "Pro-rated credits")]


def test_title_heading_is_kept_when_it_differs_from_the_title() -> None:
    sections = parse(MD, DocFormat.MARKDOWN, "Billing handbook")
    assert sections[1].heading_path == ("Refunds", "Annual plans")


def test_blocks_keep_exact_spans_and_kinds() -> None:
    sections = parse(MD, DocFormat.MARKDOWN, "Refunds")
    for s in sections:
        for b in s.blocks:
            assert MD[b.start : b.end] == b.text
    kinds = [b.kind for b in sections[1].blocks]
    assert kinds == [BlockKind.PROSE, BlockKind.ATOMIC]
    lst, code = sections[2].blocks
    assert lst.kind is BlockKind.LIST
    assert [MD[s:e] for s, e in lst.parts] == ["- first item", "- second item"]
    assert code.kind is BlockKind.ATOMIC
    assert "# not a heading" in code.text


def test_plain_text_is_paragraphs() -> None:
    text = "First para\nstill first.\n\n\nSecond para."
    [section] = parse(text, DocFormat.TEXT, "T")
    assert [b.text for b in section.blocks] == ["First para\nstill first.", "Second para."]


def test_html_headings_tables_and_skipped_scripts() -> None:
    html = """<html><head><title>x</title><script>var hidden = 1;</script></head><body>
    <h1>Guide</h1><p>Welcome <b>all</b>.</p>
    <h2>Prices</h2><table><tr><th>Plan</th><th>Price</th></tr><tr><td>Pro</td><td>€69</td></tr></table>
    <h2>Contact</h2><ul><li>Mail us</li><li>Call us</li></ul></body></html>"""
    sections = parse(html, DocFormat.HTML, "Guide")
    assert [s.heading_path for s in sections] == [(), ("Prices",), ("Contact",)]
    assert sections[0].blocks[0].text == "Welcome all."
    table = sections[1].blocks[0]
    assert table.kind is BlockKind.ATOMIC
    assert table.text == "| Plan | Price |\n|---|---|\n| Pro | €69 |"
    assert html[table.start : table.end].startswith("<table>")
    assert html[table.start : table.end].endswith("</table>")
    assert [b.text for b in sections[2].blocks] == ["Mail us", "Call us"]
    assert all("hidden" not in b.text for s in sections for b in s.blocks)
