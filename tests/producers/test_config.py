"""ClientConfig: the client's part of the settings, taken once where the client is made;
its defaults are the settings' own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.producers.config import ClientConfig


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("HEADRACE_")]:
        monkeypatch.delenv(name)


def test_bare_defaults_are_the_settings_defaults(no_env: None) -> None:
    assert ClientConfig() == ClientConfig.of(Settings())


def test_it_is_taken_from_the_settings_it_is_given(
    monkeypatch: pytest.MonkeyPatch, no_env: None
) -> None:
    monkeypatch.setenv("HEADRACE_CLIENT_MAX_PENDING", "7")
    monkeypatch.setenv("HEADRACE_CLIENT_ON_FULL", "raise")
    monkeypatch.setenv("HEADRACE_BUCKETS", "[32, 128]")
    monkeypatch.setenv("HEADRACE_TENANT_KEYS_DIR", "/keys")
    monkeypatch.setenv("HEADRACE_CACHE_SEMANTIC_TENANTS", '["acme"]')
    settings = Settings()
    monkeypatch.delenv("HEADRACE_CLIENT_MAX_PENDING")  # read once: later changes are not seen

    config = ClientConfig.of(settings, block_timeout_s=2.5)

    assert (config.max_pending, config.on_full, config.buckets) == (7, "raise", (32, 128))
    assert config.tenant_keys_dir == Path("/keys") and config.semantic_cache
    assert config.block_timeout_s == 2.5  # a change given by the composition root
    assert config.cache_classes == frozenset(settings.cache_classes)
