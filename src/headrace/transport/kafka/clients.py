"""kafka-python clients configured from Settings in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from headrace.config.settings import Settings

# tansu holds JoinGroup for about the rebalance timeout: keep these short (ENVIRONMENT.md).
TANSU_GROUP_TIMEOUTS: dict[str, int] = {
    "max_poll_interval_ms": 5000,
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
}
# Apache Kafka: a member that stops polling for 30 s leaves the group (the poll loops here
# never block that long); a dead one is seen within 10 s.
KAFKA_GROUP_TIMEOUTS: dict[str, int] = {
    "max_poll_interval_ms": 30_000,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 3000,
}


# kafka-python's own metrics (sensors per fetch, per partition, per request) are read by
# nothing here (headrace exports its own), and they cost: an idle dispatcher fetching 23
# partitions every ~20 ms recorded 67k samples in 30 s, an eighth of its CPU. Off.
KAFKA_CLIENT_METRICS = False


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
        "metrics_enabled": KAFKA_CLIENT_METRICS,
        **overrides,
    }
    return KafkaProducer(**options)


def consumer_options(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """KafkaConsumer options for ``settings``' broker: tansu starts with the busy fetch wait
    (readers tune it as they go), Apache Kafka waits ``kafka_fetch_wait_kafka_ms``."""
    tansu = settings.broker_flavor == "tansu"
    return {
        **settings.kafka_options(),
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": (
            settings.kafka_fetch_wait_busy_ms if tansu else settings.kafka_fetch_wait_kafka_ms
        ),
        **(TANSU_GROUP_TIMEOUTS if tansu else KAFKA_GROUP_TIMEOUTS),
        "metrics_enabled": KAFKA_CLIENT_METRICS,
        **overrides,
    }


def consumer(settings: Settings, *topics: str, **overrides: Any) -> KafkaConsumer:
    return KafkaConsumer(*topics, **consumer_options(settings, **overrides))


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
