"""The README's configuration table, generated from `service.settings.Settings`.

    python scripts/settings_table.py                    # print the table (Markdown)
    python scripts/settings_table.py --write README.md  # replace the table between the README's markers

One row per field, in declaration order: the environment variable (`PLUMBLINE_<FIELD>`), its type with its bounds,
its default and its description. `tests/test_settings_table.py` fails when the README's table is not what this
prints, so a new or changed setting shows up in the README or the test says how to put it there.
"""

from __future__ import annotations

import argparse
import enum
import json
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.settings import Settings

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"
HEADER = ("| variable | type | default | what it does |", "|---|---|---|---|")
PREFIX = str(Settings.model_config.get("env_prefix", ""))


def env_name(field: str) -> str:
    """The environment variable a field is read from.

    Example:
        >>> env_name("chunk_size")
        'PLUMBLINE_CHUNK_SIZE'
    """
    return f"{PREFIX}{field}".upper()


def type_name(annotation: Any) -> str:
    """A field's type in words: `int`, `path`, `edge / qdrant` (a choice), `int or unset`, `JSON object`.

    Example:
        >>> type_name(int | None), type_name(Literal["on", "off"]), type_name(dict[str, float])
        ('int or unset', 'on / off', 'JSON object (str: float)')
    """
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        inner = " or ".join(type_name(a) for a in members)
        return f"{inner} or unset" if len(members) < len(get_args(annotation)) else inner
    if origin is Literal:
        return " / ".join(str(a) for a in get_args(annotation))
    if origin is dict:
        key, value = get_args(annotation)
        return f"JSON object ({type_name(key)}: {type_name(value)})"
    if origin is list:
        (item,) = get_args(annotation)
        return f"JSON list of {type_name(item)}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " / ".join(str(member.value) for member in annotation)
    if annotation is Path:
        return "path"
    return str(getattr(annotation, "__name__", annotation))


def bounds(info: FieldInfo) -> str:
    """A field's numeric bounds: `1..2`, `>= 0`, `> 0, <= 300`; empty when it has none.

    Example:
        >>> bounds(Settings.model_fields["index_copies"]), bounds(Settings.model_fields["qdrant_timeout"])
        ('1..2', '> 0, <= 300')
    """
    found: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                found[name] = getattr(item, name)
    if "ge" in found and "le" in found:
        return f"{found['ge']}..{found['le']}"
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return ", ".join(f"{words[name]} {found[name]}" for name in ("ge", "gt", "le", "lt") if name in found)


def default_text(info: FieldInfo) -> str:
    """A field's default as it would be written in the environment: `—` for none, JSON for lists and maps.

    Example:
        >>> default_text(Settings.model_fields["eval_schedule"]), default_text(Settings.model_fields["qdrant_url"])
        ('`{}`', '—')
    """
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "—"
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, enum.Enum):
        text = str(value.value)
    elif isinstance(value, dict | list | tuple):
        text = json.dumps(value)
    else:
        text = str(value)
    return f"`{text}`" if text else '`""`'


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped, and `<` before a letter escaped, so that
    `<data_dir>` is no HTML tag.

    Example:
        >>> print(cell("a | b <= 3, default <data_dir>/x"))
        a \\| b <= 3, default \\<data_dir>/x
    """
    return re.sub(r"<(?=[A-Za-z/!?])", r"\\<", " ".join(text.split()).replace("|", "\\|"))


def rows() -> list[str]:
    """The table's lines, header first."""
    lines = list(HEADER)
    for name, info in Settings.model_fields.items():
        kind = type_name(info.annotation)
        limit = bounds(info)
        kind = f"{kind}, {limit}" if limit else kind
        what = cell(info.description or "")
        lines.append(f"| `{env_name(name)}` | {cell(kind)} | {default_text(info)} | {what} |")
    return lines


def table() -> str:
    return "\n".join(rows()) + "\n"


def replace_block(text: str, block: str) -> str:
    """`text` with what lies between the markers replaced by `block` (the markers kept, each on its own line).

    Example:
        >>> replace_block(f"a\\n{START}\\nold\\n{END}\\nb\\n", "new\\n")
        'a\\n<!-- settings-table:start -->\\nnew\\n<!-- settings-table:end -->\\nb\\n'
    """
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {START} and {END} are missing, or out of order")
    return f"{text[: start + len(START)]}\n{block}{text[end:]}"


def current_block(text: str) -> str:
    """What lies between the markers now (after the start marker's line break)."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {START} and {END} are missing, or out of order")
    return text[start + len(START) : end].removeprefix("\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, metavar="FILE", help="replace the table between the markers in FILE")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(table())
        return 0
    text = args.write.read_text(encoding="utf-8")
    updated = replace_block(text, table())
    if updated != text:
        args.write.write_text(updated, encoding="utf-8")
        print(f"{args.write}: configuration table updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
