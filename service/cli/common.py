"""What the commands share: their exit codes, the `--data-dir` option, the settings it selects, and the audit entry
of a write made from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_ERROR = 0, 1, 2, 3


def data_dir_option(p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
    p.add_argument("--data-dir", type=Path, help="data directory (default: $PLUMBLINE_DATA_DIR or ./data)")


def settings_of(args: argparse.Namespace) -> Any:
    from service.settings import Settings

    return Settings(data_dir=args.data_dir) if args.data_dir else Settings()


def audit(runtime: Any, action: str, target: str, detail: dict[str, Any]) -> None:
    """A write made here, in the state store's audit log, as made by "local CLI (user@host)"."""
    from service.access.principals import local_cli

    runtime.record(local_cli().actor, action, target, detail)
