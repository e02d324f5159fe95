"""The README's configuration table is what `scripts/settings_table.py` generates from `Settings`, and every setting
says what it does: a field added, removed, renamed or redescribed fails here until the README is regenerated."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.settings_table import END, START, current_block, env_name, main, replace_block, rows, table
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FIX = "python scripts/settings_table.py --write README.md"


def test_every_setting_has_a_description() -> None:
    missing = [name for name, info in Settings.model_fields.items() if not (info.description or "").strip()]
    assert not missing, f"settings without a description (the README's table needs one): {missing}"


def test_the_readme_table_is_the_generated_one() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count(START) == 1, f"README.md needs exactly one {START} marker"
    assert text.count(END) == 1, f"README.md needs exactly one {END} marker"
    assert current_block(text) == table(), f"README.md's configuration table is out of date: run {FIX}"


def test_one_row_per_field_in_declaration_order() -> None:
    body = rows()[2:]
    assert len(body) == len(Settings.model_fields)
    assert [row.split("`")[1] for row in body] == [env_name(name) for name in Settings.model_fields]


def test_write_replaces_only_the_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{START}\n| old | table |\n{END}\n\nafter\n", encoding="utf-8")
    assert main(["--write", str(readme)]) == 0
    updated = readme.read_text(encoding="utf-8")
    assert current_block(updated) == table()
    assert updated.startswith(f"# title\n\n{START}\n")
    assert updated.endswith(f"{END}\n\nafter\n")
    assert replace_block(updated, table()) == updated  # a second write changes nothing


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ValueError, match="markers"):
        current_block("no table here\n")
