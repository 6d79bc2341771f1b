"""Explicit invalidation records, read from ``<prefix>.invalidate`` (a request's own cache
directive is in schemas.messages)."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from headrace.schemas.messages import SCHEMA_VERSION, Identifier, Tag, _Message
from headrace.schemas.tenants import TenantName


class Invalidation(_Message):
    """An explicit invalidation: every cached result of ``tenant`` tagged with one of
    ``tags``, the entries ``keys`` (of ``tenant``), all of ``tenant`` (``all_of_tenant``), or
    every result of one model version (``model`` and ``model_version``, any tenant)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    tenant: TenantName | None = None
    tags: list[Tag] = Field(default_factory=list)
    keys: list[Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]] = Field(
        default_factory=list
    )
    all_of_tenant: bool = False
    model: Identifier | None = None
    model_version: str | None = None
    # for a tenant with a signing key: over ``signable()`` (schemas/signing.py)
    signature: str | None = Field(default=None, max_length=128)

    def signable(self) -> str:
        """The record as JSON without its signature: what a signature covers."""
        return self.model_dump_json(exclude={"signature"})

    @model_validator(mode="after")
    def _something_to_do(self) -> Self:
        tenant_scoped = bool(self.tags or self.keys or self.all_of_tenant)
        if tenant_scoped and self.tenant is None:
            raise ValueError("tags, keys and all_of_tenant need a tenant")
        if (self.model is None) != (self.model_version is None):
            raise ValueError("model and model_version go together")
        if not tenant_scoped and self.model is None:
            raise ValueError("an invalidation names tags, keys, a tenant or a model version")
        return self
