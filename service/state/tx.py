"""Write transactions of the state store, with the crash point the kill-point tests use.

`state:before-commit` fires after a transaction's statements and before its commit: a process killed there
must leave the store as it was before the write (SQLite rolls the journal back on the next open; PostgreSQL
aborts the transaction when the connection drops).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.dialects import postgresql, sqlite

from service.infra.faults import crash_point


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    with engine.begin() as conn:
        yield conn
        crash_point("state:before-commit")


STARTUP_LOCK = 7_263_001  # the PostgreSQL advisory lock id held by start-up work (migrating, importing)


def one_at_a_time(conn: Connection) -> None:
    """Hold the start-up lock until `conn`'s transaction ends, so replicas starting together take turns (SQLite
    needs nothing: its write transactions take turns already)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": STARTUP_LOCK})


def upsert(dialect: str) -> Any:
    """The dialect's `insert` construct, which has `on_conflict_do_update` (SQLite 3.24+ and PostgreSQL alike)."""
    return postgresql.insert if dialect == "postgresql" else sqlite.insert
