"""The public surface does not drift by accident: the OpenAPI document and every command's help are compared with
the committed snapshots in `tests/snapshots/` (regenerate them on purpose: `python -m tests.snapshots.capture`)."""

from __future__ import annotations

from tests.snapshots.capture import CLI_HELP, OPENAPI, cli_help_text, openapi_text


def test_openapi_document_matches_the_snapshot() -> None:
    assert openapi_text() == OPENAPI.read_text()


def test_every_command_help_matches_the_snapshot() -> None:
    assert cli_help_text() == CLI_HELP.read_text()
