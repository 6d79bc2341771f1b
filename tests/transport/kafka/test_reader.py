"""The kafka-python reader on the real broker (tansu): its fetch wait follows the owner's
hints into kafka-python's fetcher; a group member joins and reads, and when replaced tells
its owner, joins again and reads on from the committed offset; an assigned reader gets past
a fetch that stopped with records past its position; against Apache Kafka (broker_flavor
"kafka") none of the tansu workarounds run."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.transport import Partition, UnsupportedClientError, open_transport
from headrace.transport.kafka.reader import KafkaReader
from headrace.transport.kafka.transport import KafkaTransport, check_client_version
from tests.clock import FakeClock

pytestmark = pytest.mark.timeout(120)


class Listener:
    def __init__(self) -> None:
        self.assigned_to: list[list[Partition]] = []
        self.revoked_from: list[list[Partition]] = []
        self.lost_all: list[list[Partition]] = []

    def assigned(self, partitions: list[Partition]) -> None:
        self.assigned_to.append(partitions)

    def revoked(self, partitions: list[Partition]) -> None:
        self.revoked_from.append(partitions)

    def lost(self, partitions: list[Partition]) -> None:
        self.lost_all.append(partitions)


def fetcher_wait_ms(reader: KafkaReader) -> int:
    """What kafka-python will put in its next fetch request."""
    consumer: KafkaConsumer = reader._consumer
    return int(consumer._fetcher.config["fetch_max_wait_ms"])


def read(reader: KafkaReader, timeout_s: float = 30) -> list[bytes]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reader.expect(awaited=True)
        polled = reader.poll(100)
        if polled:
            return [r.value for records in polled.values() for r in records]
    return []


def test_a_group_member_follows_fetch_hints_reads_and_renews(
    stack: LocalStack, prefix: str
) -> None:
    settings = Settings(topic_prefix=prefix)
    topic = f"{prefix}.requests.b16"
    transport = open_transport(settings)
    transport.ensure_topics([topic], partitions=1)
    writer = transport.writer(10)
    listener, clock = Listener(), FakeClock()
    reader = KafkaReader(settings, f"{prefix}.dispatcher", clock=clock)
    reader.subscribe([topic], listener)
    try:
        writer.send(topic, b"first")
        writer.flush()
        assert read(reader) == [b"first"]
        assert listener.assigned_to and set(listener.assigned_to[0]) == {(topic, 0)}
        reader.commit({(topic, 0): 1})

        # the hints reach the fetcher: eager while awaited, idle once quiet, busy in a flood
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_eager_ms
        reader.expect(awaited=False)  # records were read on the last poll: still eager
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_eager_ms
        reader.poll(10)
        clock.now += 5  # quiet past the grace period
        reader.expect(awaited=False)
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_idle_ms
        reader.expect(awaited=True, flood=True)
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_busy_ms

        reader.renew("test")
        assert listener.lost_all == [[(topic, 0)]]
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_busy_ms
        writer.send(topic, b"second")
        writer.flush()
        assert read(reader) == [b"second"]  # from the committed offset: "first" not again
        assert len(listener.assigned_to) >= 2
    finally:
        reader.close()
        writer.close()


def test_an_assigned_reader_gets_past_a_stalled_fetch(stack: LocalStack, prefix: str) -> None:
    """A partition paused behind the reader's back stands in for the stall seen after a tansu
    storage outage: the consumer fetches nothing there. A seek does not resume it; renewing
    the consumer does."""
    settings = Settings(topic_prefix=prefix)
    topic = f"{prefix}.replies"
    transport = open_transport(settings)
    transport.ensure_topics([topic], partitions=1)
    writer = transport.writer(10)
    reader = KafkaReader(settings, None, stall_s=1.0)
    reader.assign([topic], start="end")
    reader._consumer.pause(TopicPartition(topic, 0))
    try:
        writer.send(topic, b"stalled")
        writer.flush()
        assert read(reader) == [b"stalled"]
        assert reader.renewals == 1
    finally:
        reader.close()
        writer.close()


def test_a_partition_its_owner_calls_busy_is_not_watched(stack: LocalStack, prefix: str) -> None:
    settings = Settings(topic_prefix=prefix)
    topic = f"{prefix}.replies"
    transport = open_transport(settings)
    transport.ensure_topics([topic], partitions=1)
    writer = transport.writer(10)
    reader = KafkaReader(settings, None, stall_s=0.5, busy=lambda _: True)
    reader.assign([topic], start="end")
    reader._consumer.pause(TopicPartition(topic, 0))
    try:
        writer.send(topic, b"held back")
        writer.flush()
        assert read(reader, timeout_s=4) == []
        assert reader.renewals == 0
    finally:
        reader.close()
        writer.close()


def test_against_apache_kafka_no_tansu_workaround_runs(stack: LocalStack, prefix: str) -> None:
    settings = Settings(topic_prefix=prefix, broker_flavor="kafka")
    topic = f"{prefix}.replies"
    transport = KafkaTransport(settings)
    transport.ensure_topics([topic], partitions=1)
    writer = transport.writer(10)
    assert writer.readback is None  # no read-back of acknowledgements without an offset
    reader = transport.reader(None)
    reader.assign([topic], start="end")
    try:
        reader.expect(awaited=True)
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_kafka_ms
        writer.send(topic, b"one")
        writer.flush()
        assert read(reader) == [b"one"]
        assert fetcher_wait_ms(reader) == settings.kafka_fetch_wait_kafka_ms
    finally:
        reader.close()
        writer.close()


def test_an_unknown_client_version_fails_at_start_with_what_to_install() -> None:
    check_client_version("3.0.12")
    with pytest.raises(UnsupportedClientError, match=r"kafka-python 2\.2\.0 .*==3\.0\.12"):
        check_client_version("2.2.0")
