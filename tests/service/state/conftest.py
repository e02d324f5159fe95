"""`state_url`: a fresh, empty state store URL, once on SQLite and once on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres import fresh_postgres_database


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.database)])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    else:
        yield fresh_postgres_database(request.getfixturevalue("postgres_url"))
