"""A dead letter: what ``<prefix>.dead-letter`` holds for a record that could not be served
(which record, why, and a bounded copy of its bytes)."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import AwareDatetime, Field

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import SCHEMA_VERSION, RecordRef, _Message, utc_now

# A dead letter keeps at most this many bytes of its record: a record of control bytes
# escapes to six times its size in JSON, and a dead letter past the producer's
# max_request_size (1 MiB) could not be sent at all (the dispatcher stopped on it).
DEAD_LETTER_ORIGINAL_BYTES = 16 * 1024


class DeadLetter(_Message):
    schema_version: Literal[1] = SCHEMA_VERSION
    source: RecordRef
    code: ErrorCode
    reason: str
    original: str = Field(
        description=(
            "The start of the record's bytes (at most DEAD_LETTER_ORIGINAL_BYTES), decoded as "
            "UTF-8 with replacement; original_bytes and original_sha256 name the whole record."
        )
    )
    original_bytes: int | None = Field(default=None, ge=0, description="the record's length")
    original_sha256: str | None = Field(default=None, description="hex sha256 of the record")
    original_truncated: bool = False  # original holds only the record's start
    failed_at: AwareDatetime = Field(default_factory=utc_now)

    @classmethod
    def of(cls, raw: bytes, *, source: RecordRef, code: ErrorCode, reason: str) -> DeadLetter:
        """A dead letter for the record ``raw``: a bounded prefix of it, its length and its
        sha256, whatever its size or content."""
        head = raw[:DEAD_LETTER_ORIGINAL_BYTES]
        return cls(
            source=source,
            code=code,
            reason=reason[:2000],
            original=head.decode("utf-8", errors="replace"),
            original_bytes=len(raw),
            original_sha256=hashlib.sha256(raw).hexdigest(),
            original_truncated=len(raw) > len(head),
        )
