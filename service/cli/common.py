"""What the commands share: their exit codes, the `--data-dir` option, the settings it selects, and the audit entries
of writes made from the command line."""

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
    """A change made here outside the state store (the index), in its audit log after the change, as made by
    "local CLI (user@host)"."""
    from service.access.principals import local_cli

    runtime.record(local_cli().actor, action, target, detail)


def auditing(runtime: Any, action: str, detail: dict[str, Any]) -> Any:
    """Declare the audit entry of the state-store change the block makes here (`Runtime.auditing`), as made by
    "local CLI (user@host)": the transaction that makes it writes it, filling in its target."""
    from service.access.principals import local_cli

    return runtime.auditing(local_cli().actor, action, detail=detail)
