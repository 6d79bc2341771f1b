"""Records signed with their tenant's key, so the pipeline itself (not only the broker's ACLs)
knows which tenant wrote them.

A tenant that has a key (``<tenant_keys_dir>/<tenant>``, a mounted secret shared by the
tenant's producers and the dispatchers) signs every request and cancellation it produces:
``signature`` is the hex HMAC-SHA256, with that key: a request's over the whole record as JSON
without its signature (``Request.signable``: input, params, session, cache directive, times,
all of it), a cancellation's over who cancels what. A dispatcher that has the tenant's key
takes only records that carry a valid signature: any other is dead-lettered, never answered
and never claimed (a forger who named a victim's request id and reply topic would otherwise
answer or cancel the victim's request, or with a signature seen on the topic send the same
request id with another input or session). A signed request older than the ledger remembers
answered ids (``answered_ttl_s``) is refused as a replay: within it, the id is answered
once. A tenant without a key is served as before.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from pathlib import Path

from headrace.schemas.tenants import TENANT_PATTERN, check_tenant

_VERSION = "v1"


def _sign(key: bytes, *fields: str) -> str:
    message = "\n".join((_VERSION, *fields)).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def request_signature(key: bytes, unsigned_json: str) -> str:
    """Over the request record as JSON without its signature (``Request.signable``)."""
    return _sign(key, "request/2", unsigned_json)


def control_signature(key: bytes, action: str, tenant: str, request_id: str) -> str:
    return _sign(key, "control", action, tenant, request_id)


def invalidation_signature(key: bytes, unsigned_json: str) -> str:
    """Over the invalidation record as JSON without its signature (``signable``)."""
    return _sign(key, "invalidation", unsigned_json)


def valid(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected, given)


def signed_by(
    keys: Mapping[str, bytes], tenant: str | None, given: str | None, sign: Callable[[bytes], str]
) -> bool:
    """Whether ``given`` is ``tenant``'s signature (``sign(key)``); true for a tenant with
    no key."""
    key = keys.get(tenant or "")
    return key is None or valid(sign(key), given)


def tenant_key(folder: Path | None, tenant: str) -> bytes | None:
    """``tenant``'s secret: the file named after it in ``folder`` (None: no such file, or not
    a valid tenant name)."""
    if folder is None:
        return None
    try:
        path = folder / check_tenant(tenant)
    except ValueError:
        return None
    return path.read_bytes().strip() if path.is_file() else None


def tenant_keys(folder: Path | None) -> dict[str, bytes]:
    """Every tenant key in ``folder``: a file named after its tenant (others are skipped)."""
    if folder is None or not folder.is_dir():
        return {}
    keys = {path.name: tenant_key(folder, path.name) for path in sorted(folder.iterdir())}
    return {tenant: key for tenant, key in keys.items() if key is not None}


__all__ = [
    "TENANT_PATTERN",
    "control_signature",
    "invalidation_signature",
    "request_signature",
    "signed_by",
    "tenant_key",
    "tenant_keys",
    "valid",
]
