"""SQL-store tests run on a SQLite file and on the PostgreSQL server running on this machine
(a database of its own per test, dropped after): the ``store_url`` fixture."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

POSTGRES = os.environ.get(
    "HEADRACE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/jobs.db"
        return
    with postgres_database() as url:
        yield url


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """The URL of a database of its own on the machine's PostgreSQL, dropped after."""
    name = f"headrace_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield POSTGRES.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
