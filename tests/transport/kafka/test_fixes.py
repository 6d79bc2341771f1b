"""kafka-python work-arounds on a real broker. A partition paused with records in hand, while
another partition's records are read, is fetched again once resumed (kafka-python 3.0.12
left it out of every fetch: the stall a bulk job's backpressure hit every ~6,000 records).
A record sent to a topic the producer knows only from its first metadata is acknowledged
even when a send to a newer topic refreshes the metadata (3.0.12 forgot its leader). A send
whose topic a metadata answer drops while it runs is sent once the topic is back (3.0.12
refused it with ValueError). A writer told its topics up front sends its first record to
each without waiting for a metadata answer of that topic's own (3.0.12 waited one refresh,
100 ms apart, for every new topic). A group
consumer's poll asks its IO thread whether the group coordinator is known only when it is not
(3.0.12 asked on every poll: a thread hand-off each time)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaTimeoutError
from kafka.partitioner import DefaultPartitioner
from kafka.structs import TopicPartition

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.transport import open_transport
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka.delivery import ReliableProducer
from headrace.transport.kafka.diagnostics import partition_state
from headrace.transport.kafka.fixes import known_coordinator_fast, resume, send, track_topic
from tests.transport.kafka.metadata import refresh, unknown_topic_waits

pytestmark = pytest.mark.timeout(90)


def poll_for(consumer: KafkaConsumer, tp: TopicPartition, timeout_s: float) -> list[ConsumerRecord]:
    """Poll until ``tp`` yields records or ``timeout_s`` passes; records of others are dropped."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = consumer.poll(timeout_ms=100).get(tp)
        if records:
            return records
    return []


def pause_mid_way_then_resume(
    stack: LocalStack, resume_with: Callable[[KafkaConsumer, TopicPartition], None]
) -> list[ConsumerRecord]:
    settings = Settings(topic_prefix=f"t-resume-{uuid.uuid4().hex[:8]}")
    busy, idle = f"{settings.topic_prefix}.busy", f"{settings.topic_prefix}.idle"
    kafka_clients.ensure_topics(settings, [busy, idle], partitions=1)
    producer = open_transport(settings).writer(10)
    consumer = kafka_clients.consumer(settings, group_id=None, max_poll_records=10)
    try:
        for i in range(200):
            producer.send(busy, f"busy {i}".encode())
        producer.flush()
        a, b = TopicPartition(busy, 0), TopicPartition(idle, 0)
        consumer.assign([a, b])
        consumer.seek_to_beginning(a, b)
        first = poll_for(consumer, a, 20)
        assert first, "the busy partition yielded nothing"
        consumer.pause(a)  # 10 of 200 read: the rest are in hand
        producer.send(idle, b"idle")
        producer.flush()
        assert poll_for(consumer, b, 20), "the idle partition yielded nothing"
        resume_with(consumer, a)
        return poll_for(consumer, a, 8)
    finally:
        consumer.close()
        producer.close()


def test_a_resumed_partition_is_read_on_from_its_position(stack: LocalStack) -> None:
    seen: dict[str, Any] = {}

    def look_then_resume(consumer: KafkaConsumer, tp: TopicPartition) -> None:
        seen.update(partition_state(consumer, tp) or {})
        resume(consumer, tp)

    records = pause_mid_way_then_resume(stack, look_then_resume)
    # the diagnosis the dispatcher logs: paused with its records parked in the fetcher
    assert seen["paused"] and not seen["fetchable"] and seen["fetcher"]["parked_records"]
    assert records, "the resumed partition was never fetched again"
    assert records[0].value == b"busy 10"


def one_topic(kind: str) -> tuple[Settings, str]:
    """Settings with a prefix of their own, and one topic of one partition under it."""
    settings = Settings(topic_prefix=f"t-{kind}-{uuid.uuid4().hex[:8]}")
    topic = f"{settings.topic_prefix}.t"
    kafka_clients.ensure_topics(settings, [topic], partitions=1)
    return settings, topic


def send_to_a_known_then_a_new_topic(track: bool) -> tuple[bool, bool]:
    """A producer whose first metadata knows one topic sends to it, then to a topic created
    after it started: is each record acknowledged within 5 s? The long linger holds the first
    record until the flush, after the second send's metadata refresh: without it the sender
    may send the first record before the refresh lands (on a slow broker it did), and the
    bug does not show."""
    settings = Settings(topic_prefix=f"t-track-{uuid.uuid4().hex[:8]}")
    known, new = f"{settings.topic_prefix}.known", f"{settings.topic_prefix}.new"
    kafka_clients.ensure_topics(settings, [known], partitions=1)
    producer = kafka_clients.producer(settings, linger_ms=3_000)
    try:
        time.sleep(1.0)  # its first metadata (of every topic) has come
        assert producer._metadata.partitions_for_topic(known) == {0}
        kafka_clients.ensure_topics(settings, [new], partitions=1)
        if track:
            track_topic(producer, known)
            track_topic(producer, new)
        first, second = producer.send(known, b"1"), producer.send(new, b"2")
        with contextlib.suppress(KafkaTimeoutError):
            producer.flush(timeout=5)
        return first.is_done and first.succeeded(), second.is_done and second.succeeded()
    finally:
        with contextlib.suppress(KafkaTimeoutError):  # a stuck record fails its close
            producer.close(timeout=0)


# the producer left stuck on purpose raises again when it is collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_record_for_a_topic_known_only_from_the_first_metadata_leaves(stack: LocalStack) -> None:
    assert send_to_a_known_then_a_new_topic(track=False) == (False, True)  # kafka-python's bug
    assert send_to_a_known_then_a_new_topic(track=True) == (True, True)


def first_sends_that_waited(writer: ReliableProducer, topics: list[str]) -> list[str]:
    """One record to each of ``topics`` (flushed): the topics whose send found their
    metadata unknown and waited for an answer."""
    waited = unknown_topic_waits(writer.producer)
    for topic in topics:
        writer.send(topic, b"first")
    assert len(writer.flush()) == len(topics)
    return waited


def first_sends_after_one(writer: ReliableProducer, topics: list[str]) -> list[str]:
    """A record to the first of ``topics``, then, once a metadata refresh has answered for
    what the writer tracks, one to each of the rest: those whose send waited to learn its
    topic."""
    assert first_sends_that_waited(writer, topics[:1]) == []  # known from the first answer
    assert refresh(writer.producer, topics[:1]), "no refresh: the test shows nothing"
    return first_sends_that_waited(writer, topics[1:])


def test_a_writer_told_its_topics_sends_to_each_without_waiting_to_learn_it(
    stack: LocalStack,
) -> None:
    settings = Settings(topic_prefix=f"t-track-{uuid.uuid4().hex[:8]}")
    topics = [f"{settings.topic_prefix}.b{i}" for i in range(6)]
    kafka_clients.ensure_topics(settings, topics, partitions=1)
    transport = open_transport(settings)
    plain, told = transport.writer(10), transport.writer(10)
    try:
        assert first_sends_after_one(plain, topics) == topics[1:]  # kafka-python's way
        told.track(["no topic name!", *topics])  # an illegal name is skipped, not raised
        assert refresh(told.producer, topics), "the topics were not tracked"
        assert first_sends_that_waited(told, topics) == []
        told._replace()  # a fresh producer (after a fatal error) is told them too
        fresh = told.producer
        assert set(topics) <= fresh._metadata._topics | fresh._sender._topics_to_add
    finally:
        plain.close()
        told.close()
        transport.close()


def test_a_send_whose_topic_a_metadata_answer_drops_while_it_runs_goes_once_the_topic_is_back(
    stack: LocalStack,
) -> None:
    settings, topic = one_topic("dropped")
    drops: list[str] = []

    class DropMidSend(DefaultPartitioner):  # type: ignore[misc]
        """Runs inside ``send``, after its metadata check: there the topic goes before the
        partition is picked, as when a metadata answer asked for before it was tracked
        lands at that moment (3.0.12's partitioner then raises)."""

        def partition(self, topic: str, *args: Any) -> int:
            if not drops:  # once per send under test
                drops.append(topic)
                producer._metadata._partitions.pop(topic, None)
            return int(super().partition(topic, *args))

    producer = kafka_clients.producer(settings, partitioner=DropMidSend())
    try:
        assert producer.partitions_for(topic) == {0}
        with pytest.raises(ValueError):  # kafka-python's own send
            producer.send(topic, key=b"k", value=b"plain")
        assert drops == [topic]
        drops.clear()
        future = send(producer, topic, key=b"k", value=b"fixed")
        assert drops == [topic], "the topic was not dropped mid-send: the test shows nothing"
        assert future.get(timeout=10).offset == 0  # sent once: the refused one never was
    finally:
        producer.close(timeout=5)


def test_a_send_whose_topic_goes_inside_the_partitioner_goes_once_the_topic_is_back(
    stack: LocalStack,
) -> None:
    """The same answer landing one line later: after the partitioner's own check of the
    topic, before it reads the partitions (3.0.12 raises TypeError there)."""
    settings, topic = one_topic("dropped-late")
    drops: list[str] = []

    class Late:
        def __init__(self, cluster: Any) -> None:
            self.cluster = cluster

        def __getattr__(self, name: str) -> Any:
            return getattr(self.cluster, name)

        def partitions_for_topic(self, name: str) -> Any:
            producer._metadata._partitions.pop(name, None)
            return self.cluster.partitions_for_topic(name)

    class DropInside(DefaultPartitioner):  # type: ignore[misc]
        def partition(self, topic: str, *args: Any) -> int:
            *rest, cluster = args
            if not drops:
                drops.append(topic)
                cluster = Late(cluster)
            return int(super().partition(topic, *rest, cluster))

    producer = kafka_clients.producer(settings, partitioner=DropInside())
    try:
        assert producer.partitions_for(topic) == {0}
        with pytest.raises(TypeError):  # kafka-python's own send
            producer.send(topic, key=b"k", value=b"plain")
        drops.clear()
        future = send(producer, topic, key=b"k", value=b"fixed")
        assert drops == [topic], "the topic was not dropped mid-send: the test shows nothing"
        assert future.get(timeout=10).offset == 0
    finally:
        producer.close(timeout=5)


def test_a_group_consumer_asks_its_io_thread_for_the_coordinator_only_when_it_is_not_known(
    stack: LocalStack,
) -> None:
    settings, topic = one_topic("coord")
    producer = open_transport(settings).writer(10)
    consumer = kafka_clients.consumer(
        settings, group_id=f"{settings.topic_prefix}.g", auto_offset_reset="earliest"
    )
    known_coordinator_fast(consumer)
    coordinator = consumer._coordinator
    asked: list[float] = []
    lookup = coordinator.ensure_coordinator_ready_async

    async def counted(timeout_ms: float | None = None) -> bool:  # runs on the IO thread
        asked.append(time.monotonic())
        return bool(await lookup(timeout_ms))

    coordinator.ensure_coordinator_ready_async = counted
    tp = TopicPartition(topic, 0)
    try:
        consumer.subscribe([topic])
        producer.send(topic, b"first")
        producer.flush()
        assert [r.value for r in poll_for(consumer, tp, 20)] == [b"first"]  # joined, read
        assert asked, "the first poll did not look the coordinator up"
        before = len(asked)
        for _ in range(20):
            consumer.poll(timeout_ms=10)
        assert len(asked) == before  # known and connected: asked on the polling thread
        coordinator.coordinator_dead("lost, in a test")  # as a failed request marks it
        producer.send(topic, b"second")
        producer.flush()
        values = [r.value for r in poll_for(consumer, tp, 20)]
        assert len(asked) > before  # not known: the IO thread looked it up again
        assert coordinator.coordinator_id is not None
        assert b"second" in values
    finally:
        consumer.close()
        producer.close()


def landed_within(settings: Settings, topic: str, value: bytes, seconds: float) -> bool:
    """Whether ``value`` is in ``topic`` (read back from the broker) within ``seconds``."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if any(r.value == value for r in open_transport(settings).scan(topic)):
            return True
        time.sleep(0.05)
    return False


def test_a_push_sends_at_once_and_the_next_send_lingers_again(stack: LocalStack) -> None:
    """``push`` (a worker's replies on their way while it says it is idle) sends what was
    sent now, not at the producer's linger; once ``flush`` returns, a record sent without a
    push waits for the linger again (the flag the push raised is lowered)."""
    settings = Settings(topic_prefix=f"t-push-{uuid.uuid4().hex[:8]}")
    topic = f"{settings.topic_prefix}.replies"
    kafka_clients.ensure_topics(settings, [topic], partitions=1)
    writer = ReliableProducer(
        lambda **more: kafka_clients.producer(settings, linger_ms=5000, **more), timeout_s=20
    )
    try:
        writer.track([topic])
        writer.send(topic, b"warm")
        writer.flush()
        writer.send(topic, b"pushed")
        writer.push()
        assert landed_within(settings, topic, b"pushed", 2.5), "it waited for the linger"
        writer.flush()
        writer.send(topic, b"lingers")
        assert not landed_within(settings, topic, b"lingers", 1.5), "the push's flag stayed up"
        writer.flush()  # sends it now
        assert landed_within(settings, topic, b"lingers", 2.5)
    finally:
        writer.close()
