"""What the commands share: their exit codes, the `--data-dir` option, the settings it selects, and the audit entries
of writes made from the command line."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.errors import PlumblineError

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_ERROR = 0, 1, 2, 3
POLL_SECONDS = 2.0  # how often a command following work on a service asks for its progress
POLL_GIVE_UP_SECONDS = 300.0  # how long it rides out failing polls before giving up


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


@contextmanager
def progress_bar(what: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback (done, total): a bar on a terminal; elsewhere the service's periodic log lines do."""
    if not sys.stderr.isatty():
        yield lambda _done, _total: None
        return
    from tqdm import tqdm

    with tqdm(unit="case", desc=what) as bar:

        def update(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield update


def poll(client: Any, url: str) -> dict[str, Any]:
    """GET `url` as JSON, riding out a restarting replica or a busy moment (transport errors, 429, 5xx) for up to
    POLL_GIVE_UP_SECONDS in a row."""

    import httpx  # here: the server and the commands that do not call one need not import it

    give_up = time.monotonic() + POLL_GIVE_UP_SECONDS
    while True:
        try:
            response = client.get(url)
            if response.status_code < 500 and response.status_code != 429:
                body: dict[str, Any] = response.json()
                return body
            problem = f"{response.status_code}: {response.text[:200]}"
        except httpx.TransportError as exc:
            problem = str(exc)
        if time.monotonic() > give_up:
            raise PlumblineError(f"{url} kept failing for {POLL_GIVE_UP_SECONDS:g} s; last: {problem}")
        logging.getLogger("plumbline").warning("%s: %s; asking again", url, problem)
        time.sleep(POLL_SECONDS)
