"""Clients for Kafka, Redis and Celery, configured from Settings in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import boto3
import redis
from botocore.config import Config as BotoConfig
from celery import Celery
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from runtime.settings import Settings

# tansu holds JoinGroup for about the rebalance timeout: keep these short (ENVIRONMENT.md).
GROUP_TIMEOUTS: dict[str, int] = {
    "max_poll_interval_ms": 5000,
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
}


def set_fetch_wait(consumer: KafkaConsumer, wait_ms: int) -> None:
    """Change a live consumer's ``fetch_max_wait_ms`` (see the kafka_fetch_wait_* settings).

    tansu does not answer a parked fetch the moment a record lands. Measured here (lag of a
    parked consumer, idle CPU of one consumer): 5 ms -> 2-5 ms lag, 25% CPU; 100 ms -> 6 ms
    lag, 3% CPU; 500 ms -> 150 ms lag.

    kafka-python reads it from its fetcher's config for every fetch it builds; there is no
    public setter, so this reaches into it and does nothing if that is absent.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    config = getattr(fetcher, "config", None)
    if isinstance(config, dict):
        config["fetch_max_wait_ms"] = wait_ms


def producer(settings: Settings, **overrides: Any) -> KafkaProducer:
    options: dict[str, Any] = {
        **settings.kafka_options(),
        # Every caller flushes after its sends, which sends at once: the linger only lets a
        # batch's replies share one produce request. With the default 16 KB batches, 30
        # replies of 8 KB took 15 round trips (16-24 ms per flush, measured).
        "linger_ms": 5,
        "batch_size": 1 << 20,
        "acks": "all",
        "max_block_ms": 10_000,
        # a broker stalled on its storage holds a produce request; give up on it (and retry,
        # idempotently) after 10 s rather than the default 30 s
        "request_timeout_ms": 10_000,
        **overrides,
    }
    return KafkaProducer(**options)


def consumer(settings: Settings, *topics: str, **overrides: Any) -> KafkaConsumer:
    options: dict[str, Any] = {
        **settings.kafka_options(),
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": settings.kafka_fetch_wait_busy_ms,
        **GROUP_TIMEOUTS,
        **overrides,
    }
    return KafkaConsumer(*topics, **options)


def ensure_topics(settings: Settings, names: Iterable[str], partitions: int | None = None) -> None:
    """Create the topics that do not exist yet."""
    admin = KafkaAdminClient(**settings.kafka_options())
    try:
        existing = set(admin.list_topics())
        wanted = [n for n in dict.fromkeys(names) if n not in existing]
        if not wanted:
            return
        count = partitions or settings.request_partitions
        for name in wanted:
            with contextlib.suppress(TopicAlreadyExistsError):  # created meanwhile
                admin.create_topics([NewTopic(name, count, 1)])
    finally:
        admin.close()


# SeaweedFS started without an IAM config accepts any key pair; these are labels, not secrets
# (production sets s3_access_key_id and s3_secret_access_key).
LOCAL_S3_KEY_ID = "headrace-local"
LOCAL_S3_SECRET = "headrace-local"


def s3_client(settings: Settings, read_timeout_s: float = 5) -> Any:
    secret = settings.s3_secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        aws_access_key_id=settings.s3_access_key_id or LOCAL_S3_KEY_ID,
        aws_secret_access_key=secret.get_secret_value() if secret else LOCAL_S3_SECRET,
        region_name=settings.s3_region,
        config=BotoConfig(
            connect_timeout=1, read_timeout=read_timeout_s, retries={"max_attempts": 1}
        ),
    )


def redis_client(settings: Settings, timeout_s: float = 5) -> redis.Redis:
    return redis.Redis.from_url(
        settings.redis_url,
        password=settings.redis_password_value(),
        socket_timeout=timeout_s,
        socket_connect_timeout=min(2, timeout_s),
        health_check_interval=10,
    )


def broker_url(settings: Settings) -> str:
    """The Redis URL with the password from settings put in (Celery reads it from the URL)."""
    password = settings.redis_password_value()
    if password is None:
        return settings.redis_url
    parts = urlsplit(settings.redis_url)
    netloc = f":{quote(password, safe='')}@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def celery_app(settings: Settings) -> Celery:
    """A Celery app on the Redis broker, JSON only, late acks, prefetch 1."""
    app = Celery("headrace", broker=broker_url(settings))
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600},
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
    return app
