from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from headrace.config.connections import ConnectionSettings
from headrace.config.faults import FaultSettings
from headrace.config.serving import ServingSettings
from headrace.config.settings import Settings
from headrace.workers import tasks


def test_env_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", "acme")
    monkeypatch.setenv("HEADRACE_BUCKETS", "[32, 128]")
    monkeypatch.setenv("HEADRACE_MAX_WAIT_MS", "7.5")
    settings = Settings()
    assert settings.topic_prefix == "acme"
    assert settings.buckets == [32, 128]
    assert settings.max_wait_ms == 7.5


def test_toml_file_then_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "headrace.toml"
    config.write_text('topic_prefix = "from-file"\nmax_batch_tokens = 2048\n')
    monkeypatch.setenv("HEADRACE_CONFIG", str(config))
    assert Settings().max_batch_tokens == 2048
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", "from-env")
    assert Settings().topic_prefix == "from-env"


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(buckets=[64, 32])
    with pytest.raises(ValidationError):
        Settings(max_batch_tokens=0)
    with pytest.raises(ValidationError):
        Settings(no_such_setting=1)  # type: ignore[call-arg]


def test_every_part_s_fields_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings are in parts by role (connections, serving, faults); each part's fields
    are read from ``HEADRACE_*`` as any other."""
    monkeypatch.setenv("HEADRACE_REDIS_URL", "redis://elsewhere:6379/1")  # connections
    monkeypatch.setenv("HEADRACE_GENERATION_SLOTS", "8")  # serving
    monkeypatch.setenv("HEADRACE_MAX_ATTEMPTS", "5")  # faults
    monkeypatch.setenv("HEADRACE_CACHE_ENABLED", "true")  # the settings' own
    settings = Settings()
    assert settings.redis_url == "redis://elsewhere:6379/1"
    assert (settings.generation_slots, settings.max_attempts, settings.cache_enabled) == (
        8,
        5,
        True,
    )
    parts = set(ConnectionSettings.model_fields) | set(ServingSettings.model_fields)
    parts |= set(FaultSettings.model_fields)
    assert parts < set(Settings.model_fields)


def test_celery_accepts_json_only() -> None:
    app = tasks.celery_app(Settings())
    assert app.conf.accept_content == ["json", "headrace-batch"]  # framed JSON: task_body
    assert app.conf.task_serializer == "json" and app.conf.result_serializer == "json"
    assert app.conf.task_acks_late and app.conf.worker_prefetch_multiplier == 1
