"""SQLAlchemy 2.x over a SQLite file (the default) or PostgreSQL (by URL), and the schema's
migrations (alembic, ``headrace/sql/migrations``).

Writers (the job store, ``headrace models add``) bring the database to the newest revision
when they open it; readers that only look things up (workers, dispatchers, clients reading
the model registry) never migrate: a schema that is not there yet reads as empty.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import DateTime, TypeDecorator, create_engine
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"


class Base(DeclarativeBase):
    """The declarative base of every table headrace keeps."""


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every database (SQLite keeps no zone: it is put back on read)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL; None for any other database."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def open_engine(url: str, *, create: bool = True) -> Engine | None:
    """An engine for ``url``. A SQLite file's folder is made when ``create``; without it, a
    SQLite file that does not exist yet gives None (nothing was ever stored there)."""
    path = sqlite_path(url)
    if path is not None:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            return None
    return create_engine(url, future=True)


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def newest_revision() -> str | None:
    """The revision the migrations bring a database to."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def schema_at_head(engine: Engine) -> bool:
    try:
        return revision(engine) == newest_revision()
    except (OperationalError, ProgrammingError):
        return False


def migrate(engine: Engine) -> None:
    """Bring the database to the newest revision. Two processes migrating one database at
    once: the loser's failure is forgiven when the winner left it at the newest revision."""
    if schema_at_head(engine):
        return
    cfg = _alembic_config()
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except (OperationalError, ProgrammingError):
        if not schema_at_head(engine):
            raise
        log.info("another process migrated the SQL store first")
