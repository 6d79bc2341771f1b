from __future__ import annotations

from headrace import connections
from headrace.config.settings import Settings


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


def test_a_proxy_and_the_shared_directory() -> None:
    settings = Settings(kafka_proxy_url="socks5://proxy:1080", state_dir="/var/hr")  # type: ignore[arg-type]
    assert settings.kafka_options()["proxy_url"] == "socks5://proxy:1080"
    assert str(settings.shared_dir) == "/var/hr"  # no shared_state_dir: the state directory
    assert settings.port_of("127.0.0.1:19092") == 19092
