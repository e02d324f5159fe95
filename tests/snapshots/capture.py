"""What the public surface looks like, as text: the OpenAPI document and every `plumbline` command's help.

`tests/test_surface.py` compares both with the committed snapshots beside this file, so a change of an endpoint, a
schema, a default or a command's options shows up as a diff someone has to commit on purpose. After such a change:
    .venv/bin/python -m tests.snapshots.capture
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPENAPI = HERE / "openapi.json"
CLI_HELP = HERE / "cli-help.txt"
HELP_COLUMNS = "120"  # argparse wraps to the terminal: a fixed width makes the text the same everywhere


def openapi_text() -> str:
    """The OpenAPI document the app serves, as `GET /openapi.json` returns it (keys in the app's order)."""
    from service.api.app import create_app
    from service.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(data_dir=Path(tmp) / "data"))
        return json.dumps(app.openapi(), indent=1, ensure_ascii=False) + "\n"


def cli_help_text() -> str:
    """`plumbline --help` and every subcommand's `--help`, depth first, each under a `$ plumbline ... --help` line."""
    from service.cli.main import _parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        return "".join(f"$ {' '.join(path)} --help\n{parser.format_help()}\n" for path, parser in _walk(_parser()))
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("plumbline",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


if __name__ == "__main__":
    OPENAPI.write_text(openapi_text())
    CLI_HELP.write_text(cli_help_text())
    print(f"wrote {OPENAPI} and {CLI_HELP}")
