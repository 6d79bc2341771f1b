"""One typed settings object for every headrace process.

Values come, highest priority first, from keyword arguments, environment variables
(``HEADRACE_*``; nested fields use ``__``), a TOML file named by ``HEADRACE_CONFIG``,
and the defaults, which point at the embedded local stack (``headrace dev up``).
Secrets are never defaults: they come from the environment or the TOML file.

The fields are in parts by role: ``connections.py`` (services, names, state),
``serving.py`` (the model, loading, batching), ``faults.py`` (failures, limits, fault
injection); the result cache's are here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from headrace.config.cache_policy import DEFAULT_CLASSES, ExpiryPolicy
from headrace.config.connections import ConnectionSettings
from headrace.config.faults import FaultSettings
from headrace.config.serving import ServingSettings
from headrace.config.tag_rules import TagRule


class Settings(BaseSettings, ConnectionSettings, ServingSettings, FaultSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADRACE_", env_nested_delimiter="__", extra="forbid"
    )

    # --- result cache ------------------------------------------------------------------------
    # Clients read the cache (L1 here, L2 Redis, L3 S3) before sending a request, and their
    # requests ask workers to write results through. Off by default: a hit never reaches the
    # request topics, which a user counting replies there should choose knowingly.
    cache_enabled: bool = False
    cache_l1_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)  # per process; 0: no L1
    cache_s3_bucket: str = "headrace-cache"  # L3; "" turns L3 off
    cache_timeout_s: float = Field(default=0.5, gt=0)  # a tier slower than this is skipped
    # A request identical to one being computed (same cache key and generations, lane and
    # priority) waits on that computation and is answered with its result (docs/cache.md).
    cache_coalesce: bool = True
    # The semantic cache: a generation may be answered with the cached answer to a near
    # prompt of the same scope (docs/cache.md). Opt-in twice: its tenant here ("*": every
    # tenant) and the request (semantic=True). Prompts are embedded in the client's process
    # by cache_semantic_model; served at cosine >= cache_semantic_threshold, guards passed.
    cache_semantic_tenants: list[str] = Field(default_factory=list)
    cache_semantic_threshold: float = Field(default=0.92, gt=0, le=1)
    cache_semantic_model: str = "all-MiniLM-L6-v2"
    # Expiry per entry class (a request names its class; "default" otherwise).
    cache_classes: dict[str, ExpiryPolicy] = Field(default_factory=lambda: dict(DEFAULT_CLASSES))
    # Events on upstream topics that invalidate tags (read by `headrace invalidator`).
    cache_tag_rules: list[TagRule] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_path = os.environ.get("HEADRACE_CONFIG")
        if config_path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_path)))
        sources.append(file_secret_settings)
        return tuple(sources)

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        return cls(**overrides)


def default(name: str) -> Any:
    """The default of setting ``name``: the one source for a policy object that repeats a
    setting's default (the dispatcher's ``CoreConfig``, its health, lane and ladder policies),
    without reading the environment."""
    return Settings.model_fields[name].get_default(call_default_factory=True)
