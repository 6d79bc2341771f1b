"""Tenant names: identities, not free strings. A tenant name is 1-64 letters, digits, ``_``
or ``-``; it never holds the ``:`` that separates the parts of a Redis, cache or S3 key, so
``(tenant, id)`` pairs can never collide in a key (``("a:b", "c")`` and ``("a", "b:c")``
both made ``a:b:c`` when any string was a tenant)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

from headrace.schemas.errors import InvalidRequestError

TENANT_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
TenantName = Annotated[str, StringConstraints(pattern=TENANT_PATTERN)]
_TENANT = re.compile(TENANT_PATTERN)


class TenantNameError(InvalidRequestError):
    """Not a valid tenant name."""


def check_tenant(name: str) -> str:
    """``name`` if it is a valid tenant name; ``TenantNameError`` otherwise."""
    if not isinstance(name, str) or _TENANT.fullmatch(name) is None:
        raise TenantNameError(f"tenant {name!r}: a tenant name is 1-64 letters, digits, '_' or '-'")
    return name
