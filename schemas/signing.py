"""Records signed with their tenant's key, so the pipeline itself (not only the broker's ACLs)
knows which tenant wrote them.

A tenant that has a key (``<tenant_keys_dir>/<tenant>``, a mounted secret shared by the
tenant's producers and the dispatchers) signs every request and cancellation it produces:
``signature`` is the hex HMAC-SHA256, with that key, of the fields that say who asks for what
and where the answer goes. A dispatcher that has the tenant's key takes only records that
carry a valid signature: any other is dead-lettered, never answered and never claimed (a
forger who named a victim's request id and reply topic would otherwise answer or cancel the
victim's request). A tenant without a key is served as before.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from headrace.schemas.tenants import TENANT_PATTERN, check_tenant

_VERSION = "v1"


def _sign(key: bytes, *fields: str) -> str:
    message = "\n".join((_VERSION, *fields)).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def request_signature(key: bytes, tenant: str, request_id: str, reply_to: str) -> str:
    return _sign(key, "request", tenant, request_id, reply_to)


def control_signature(key: bytes, action: str, tenant: str, request_id: str) -> str:
    return _sign(key, "control", action, tenant, request_id)


def invalidation_signature(key: bytes, unsigned_json: str) -> str:
    """Over the invalidation record as JSON without its signature (``signable``)."""
    return _sign(key, "invalidation", unsigned_json)


def valid(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected, given)


def tenant_keys(folder: Path | None) -> dict[str, bytes]:
    """Every tenant key in ``folder``: a file named after its tenant (others are skipped)."""
    if folder is None or not folder.is_dir():
        return {}
    keys = {}
    for path in sorted(folder.iterdir()):
        try:
            tenant = check_tenant(path.name)
        except ValueError:
            continue
        if path.is_file():
            keys[tenant] = path.read_bytes().strip()
    return keys


__all__ = [
    "TENANT_PATTERN",
    "control_signature",
    "invalidation_signature",
    "request_signature",
    "tenant_keys",
    "valid",
]
