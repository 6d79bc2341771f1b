"""What a ``Client`` reads of the settings (``ClientConfig``), taken once where the client is
made (``ClientConfig.of(settings)``): its own policy, from the pending cap and backpressure
to resends, request limits and the cache classes it accepts. Its connections (broker, Redis,
the cache tiers, the model registry) are still opened from the settings themselves.

The defaults are the settings' own (``default``): one source for each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from headrace.config.settings import Settings, default


@dataclass(frozen=True)
class ClientConfig:
    topic_prefix: str = default("topic_prefix")
    buckets: tuple[int, ...] = tuple(default("buckets"))
    model: str = default("model")  # a request's model when it names none
    tenant_keys_dir: Path | None = None  # tenants that sign (the setting's default)
    max_pending: int = default("client_max_pending")  # requests awaiting replies at once
    on_full: Literal["block", "raise"] = default("client_on_full")
    block_timeout_s: float = default("client_block_timeout_s")
    # a request unanswered this long is produced again, where the broker may lose it
    resend_after_s: float | None = default("client_resend_after_s")
    max_resends: int = default("client_max_resends")
    delivery_timeout_s: float = default("reply_delivery_timeout_s")  # a flush's bound
    max_request_bytes: int = default("max_request_bytes")
    cache_enabled: bool = default("cache_enabled")
    cache_classes: frozenset[str] = frozenset(default("cache_classes"))
    semantic_cache: bool = False  # some tenant's semantic cache is on

    @classmethod
    def of(cls, settings: Settings, **changes: Any) -> ClientConfig:
        """The client's part of ``settings``, with ``changes`` (field name -> value)."""
        taken: dict[str, Any] = dict(
            topic_prefix=settings.topic_prefix,
            buckets=tuple(settings.buckets),
            model=settings.model,
            tenant_keys_dir=settings.tenant_keys_dir,
            max_pending=settings.client_max_pending,
            on_full=settings.client_on_full,
            block_timeout_s=settings.client_block_timeout_s,
            resend_after_s=settings.client_resend_after_s,
            max_resends=settings.client_max_resends,
            delivery_timeout_s=settings.reply_delivery_timeout_s,
            max_request_bytes=settings.max_request_bytes,
            cache_enabled=settings.cache_enabled,
            cache_classes=frozenset(settings.cache_classes),
            semantic_cache=bool(settings.cache_semantic_tenants),
        )
        return cls(**{**taken, **changes})
