"""Errors the clients raise mid-command, read as the service behind them (or as a bug)."""

from __future__ import annotations

import redis
from botocore.exceptions import EndpointConnectionError
from kafka.errors import KafkaConnectionError, KafkaTimeoutError
from sqlalchemy.exc import OperationalError

from headrace.config.settings import Settings
from headrace.health.reach import check_kafka, explain
from tests.gateway.gateway_proc import free_port

SETTINGS = Settings(
    kafka_bootstrap="k1:9092,k2:9092",
    redis_url="redis://:secret@cache.internal:6380/0",
    s3_endpoint_url="http://s3.internal:8333",
    sql_url="postgresql+psycopg://app:hunter2@db.internal:5432/jobs",
)


def test_client_errors_name_their_service_and_address_without_credentials() -> None:
    cases = [
        (KafkaConnectionError("refused"), "cannot reach Kafka at k1:9092,k2:9092 "),
        (KafkaTimeoutError("Unable to bootstrap"), "cannot reach Kafka at k1:9092,k2:9092 "),
        (redis.ConnectionError("refused"), "cannot reach Redis at cache.internal:6380 "),
        (
            EndpointConnectionError(endpoint_url="http://s3.internal:8333"),
            "cannot reach S3 at http://s3.internal:8333 ",
        ),
        (
            OperationalError("SELECT 1", {}, Exception("connection refused")),
            "cannot reach the SQL store at db.internal:5432/jobs ",
        ),
    ]
    for error, start in cases:
        explained = explain(error, SETTINGS)
        assert explained is not None and str(explained).startswith(start), explained
        assert "secret" not in str(explained) and "hunter2" not in str(explained)
    assert explain(ValueError("a bug"), SETTINGS) is None  # not a service: shown in full


def test_kafka_is_reached_when_any_bootstrap_server_answers() -> None:
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_kafka(Settings(kafka_bootstrap=f"127.0.0.1:{free_port()},127.0.0.1:{port}"))
