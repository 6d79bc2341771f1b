"""A control record (``<prefix>.control``): what a client asks of the pipeline about a
request already sent."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from headrace.schemas.messages import SCHEMA_VERSION, Identifier, _Message, utc_now
from headrace.schemas.tenants import TenantName


class Control(_Message):
    """A control record on ``<prefix>.control``; today the only action is ``cancel``."""

    schema_version: Literal[1] = SCHEMA_VERSION
    action: Literal["cancel"]
    tenant: TenantName
    request_id: Identifier
    signature: str | None = Field(default=None, max_length=128)  # see schemas/signing.py
    sent_at: AwareDatetime = Field(default_factory=utc_now)
