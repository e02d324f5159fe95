"""A real PostgreSQL server for tests, from Debian's `postgresql` package, in a temp dir on a free port.

PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user (`runuser`). Where the
binaries are missing the tests that need it skip, saying why, except when PLUMBLINE_REQUIRE_POSTGRES is set
(`.ci/run` sets it to 1): then a missing server is a failure, so CI can never skip them silently.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from deploy.local_stack import free_port
from tests.needs import missing


def binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a throwaway server; yield its SQLAlchemy URL; stop it and remove its files."""
    with stoppable_postgres_server() as server:
        yield server.url


@dataclass(frozen=True)
class Server:
    """A running test server: its URL, `stop()` at once (`pg_ctl -m immediate stop`: an outage as it happens) and
    `start()` again on the same port and data."""

    url: str
    stop: Callable[[], None]
    start: Callable[[], None]


@contextmanager
def stoppable_postgres_server() -> Iterator[Server]:
    """`postgres_server`, yielding a `Server` the test can stop and start again: for the tests of what the service
    does while its state store is gone, and when it is back."""
    bin_dir = binaries()
    if bin_dir is None:
        missing(
            "PostgreSQL is not installed (apt-get install postgresql): the PostgreSQL contract tests need it",
            "PLUMBLINE_REQUIRE_POSTGRES",
        )
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="plumbline-pg-"))
    data = root / "data"
    if as_user:
        shutil.chown(root, "postgres")
    port = free_port()
    run = [*as_user]
    subprocess.run(
        [*run, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"

    def start() -> None:
        pg_ctl = [*run, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]
        subprocess.run(pg_ctl, check=True, capture_output=True)

    start()

    def stop() -> None:
        subprocess.run([*run, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)

    try:
        yield Server(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", stop, start)
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def fresh_postgres_database(server_url: str) -> str:
    """A new, empty database on the test server: its URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"
