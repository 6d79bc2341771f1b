from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from headrace import connections
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


def test_secrets_are_masked_and_passed_to_kafka() -> None:
    settings = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="PLAIN",
        kafka_sasl_username="svc",
        kafka_sasl_password="s3cret",  # type: ignore[arg-type]
    )
    assert "s3cret" not in repr(settings)
    options = settings.kafka_options()
    assert options["sasl_plain_password"] == "s3cret"
    assert options["security_protocol"] == "SASL_SSL"


def test_tls_files_and_redis_password_pass_through() -> None:
    settings = Settings(
        kafka_security_protocol="SSL",
        kafka_ssl_cafile="/etc/ca.pem",  # type: ignore[arg-type]
        kafka_ssl_password="keypass",  # type: ignore[arg-type]
        redis_url="rediss://cache.internal:6380/2",
        redis_password="p@ss/word",  # type: ignore[arg-type]
    )
    assert "keypass" not in repr(settings) and "p@ss" not in repr(settings)
    options = settings.kafka_options()
    assert options["ssl_cafile"] == "/etc/ca.pem" and options["ssl_password"] == "keypass"
    assert "ssl_certfile" not in options
    assert connections.broker_url(settings) == "rediss://:p%40ss%2Fword@cache.internal:6380/2"
    client = connections.redis_client(settings)
    assert client.connection_pool.connection_kwargs["password"] == "p@ss/word"


def test_celery_accepts_json_only() -> None:
    app = tasks.celery_app(Settings())
    assert app.conf.accept_content == ["json", "headrace-batch"]  # framed JSON: task_body
    assert app.conf.task_serializer == "json" and app.conf.result_serializer == "json"
    assert app.conf.task_acks_late and app.conf.worker_prefetch_multiplier == 1
