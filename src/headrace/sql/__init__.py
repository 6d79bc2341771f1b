"""The SQL store every durable record shares (jobs, files, API keys, usage, the model
registry): one database, one versioned schema (``headrace.sql.migrations``)."""

from headrace.sql.database import (
    Base,
    UTCDateTime,
    migrate,
    newest_revision,
    open_engine,
    revision,
    schema_at_head,
)

__all__ = [
    "Base",
    "UTCDateTime",
    "migrate",
    "newest_revision",
    "open_engine",
    "revision",
    "schema_at_head",
]
