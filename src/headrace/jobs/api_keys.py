"""API keys in the job store: only each key's SHA-256 is kept. ``ApiKeyRows`` is the part of
``store.JobStore`` that reads and writes them."""

from __future__ import annotations

import builtins
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from headrace.jobs.tables import ApiKey
from headrace.schemas.params import Priority
from headrace.schemas.tenants import check_tenant


@dataclass(frozen=True)
class KeyOwner:
    tenant: str
    priority: Priority


@dataclass(frozen=True)
class ApiKeyInfo:
    hash_prefix: str
    tenant: str
    label: str
    created_at: datetime
    expires_at: datetime | None


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyRows:
    """Keys that name a tenant (and their requests' default class); ``engine``: the store's."""

    engine: Engine

    def add_api_key(
        self,
        tenant: str,
        label: str = "",
        expires_at: datetime | None = None,
        priority: Priority | None = None,
    ) -> str:
        """A new key for ``tenant`` (a valid tenant name: ``TenantNameError`` otherwise),
        printed once; only its SHA-256 is kept. After ``expires_at`` it names no tenant.
        ``priority``: the class of its requests that do not name one (None: ``default``)."""
        check_tenant(tenant)
        key = f"hr-{secrets.token_urlsafe(32)}"
        with Session(self.engine) as s, s.begin():
            s.add(
                ApiKey(
                    key_hash=key_hash(key),
                    tenant=tenant,
                    label=label,
                    created_at=datetime.now(UTC),
                    expires_at=expires_at,
                    priority=priority,
                )
            )
        return key

    def key_owner(self, key: str) -> KeyOwner | None:
        """The tenant a live key acts for, and its requests' default class."""
        with Session(self.engine) as s:
            record = s.get(ApiKey, key_hash(key))
        if record is None:
            return None
        if record.expires_at is not None and record.expires_at <= datetime.now(UTC):
            return None
        priority = cast(Priority, record.priority or "default")
        return KeyOwner(record.tenant, priority)

    def tenant_of_key(self, key: str) -> str | None:
        owner = self.key_owner(key)
        return None if owner is None else owner.tenant

    def api_keys(self, tenant: str | None = None) -> builtins.list[ApiKeyInfo]:
        """Every key (or ``tenant``'s), oldest first, by the start of its hash."""
        with Session(self.engine) as s:
            query = select(ApiKey).order_by(ApiKey.created_at)
            if tenant is not None:
                query = query.where(ApiKey.tenant == tenant)
            return [
                ApiKeyInfo(k.key_hash[:12], k.tenant, k.label, k.created_at, k.expires_at)
                for k in s.scalars(query)
            ]

    def revoke_api_key(self, key_or_hash_prefix: str) -> int:
        """Delete the key given whole, or the one key whose hash starts with this (at least
        8 hex digits, as ``api_keys`` shows it); how many were revoked (0 or 1)."""
        given = key_or_hash_prefix.strip()
        with Session(self.engine) as s, s.begin():
            if given.startswith("hr-"):
                found = [k for k in [s.get(ApiKey, key_hash(given))] if k is not None]
            elif len(given) >= 8:
                query = select(ApiKey).where(ApiKey.key_hash.startswith(given.lower()))
                found = list(s.scalars(query))
            else:
                found = []
            if len(found) != 1:
                return 0
            s.delete(found[0])
            return 1
