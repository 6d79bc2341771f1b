"""The dispatcher's request consumer on the real broker, with a small owner that records
what it is told: its fetch wait reaches kafka-python's fetcher, it joins the group and reads,
and a replaced consumer tells its owner, joins again and reads on from the committed offset."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka.delivery import reliable_producer
from headrace.workers.offsets import Partition
from headrace.workers.request_consumer import RequestConsumer
from tests.clock import FakeClock

pytestmark = pytest.mark.timeout(120)


class Owner:
    def __init__(self) -> None:
        self.assigned: list[list[TopicPartition]] = []
        self.revoked: list[list[Partition]] = []
        self.replaced = 0

    def topic_busy(self, topic: str) -> bool:
        return False

    def partitions_revoked(self, partitions: list[Partition]) -> None:
        self.revoked.append(partitions)

    def partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.assigned.append(partitions)

    def consumer_replaced(self) -> None:
        self.replaced += 1


def fetcher_wait_ms(consumer: KafkaConsumer) -> int:
    """What kafka-python will put in its next fetch request."""
    return int(consumer._fetcher.config["fetch_max_wait_ms"])


def read(requests: RequestConsumer, timeout_s: float = 30) -> list[bytes]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        polled = requests.poll(100, awaited=True, flood=False)
        if polled:
            return [r.value for records in polled.values() for r in records]
    return []


def test_fetch_wait_join_read_and_renew(stack: LocalStack, prefix: str) -> None:
    settings = Settings(topic_prefix=prefix)
    topic = f"{prefix}.requests.16"
    kafka_clients.ensure_topics(settings, [topic], partitions=1)
    producer = reliable_producer(settings, timeout_s=10)
    owner, clock = Owner(), FakeClock()
    requests = RequestConsumer(settings, f"{prefix}.dispatcher", [topic], owner, clock)
    try:
        producer.send(topic, b"first")
        producer.flush()
        assert read(requests) == [b"first"]
        assert owner.assigned and set(owner.assigned[0]) == {TopicPartition(topic, 0)}
        requests.consumer.commit()

        # the policy reaches the fetcher: eager while awaited, idle once quiet, busy in a flood
        assert fetcher_wait_ms(requests.consumer) == settings.kafka_fetch_wait_eager_ms
        requests.poll(10, awaited=False, flood=False)  # records read last poll: still eager
        assert fetcher_wait_ms(requests.consumer) == settings.kafka_fetch_wait_eager_ms
        clock.now += 5  # quiet past the grace period
        requests.poll(10, awaited=False, flood=False)
        assert fetcher_wait_ms(requests.consumer) == settings.kafka_fetch_wait_idle_ms
        requests.poll(10, awaited=True, flood=True)
        assert fetcher_wait_ms(requests.consumer) == settings.kafka_fetch_wait_busy_ms

        requests.renew("test")
        assert owner.replaced == 1
        assert requests.fetch_wait.current_ms == settings.kafka_fetch_wait_busy_ms
        producer.send(topic, b"second")
        producer.flush()
        assert read(requests) == [b"second"]  # from the committed offset: "first" not again
        assert len(owner.assigned) >= 2
    finally:
        requests.consumer.close(autocommit=False)
        producer.close()
