"""ReliableProducer across restarts of a tansu that keeps its log in S3: every record whose
flush returned is in the log exactly once. tansu answers the first produce after a restart
with offset -1 and about half the time does not store that batch; the producer reads the
partition back and sends only what is missing."""

from __future__ import annotations

import collections
import threading
import time
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.transport import open_transport
from headrace.transport.kafka import clients as kafka_clients
from tests.conftest import DURABLE_BROKER
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RESTARTS = 3
FLUSH_EVERY = 20


def test_flushed_records_survive_broker_restarts_exactly_once(
    durable_broker: LocalStack,
) -> None:
    settings = Settings(
        kafka_bootstrap=DURABLE_BROKER, topic_prefix=f"t-delivery-{uuid.uuid4().hex[:8]}"
    )
    topic = f"{settings.topic_prefix}.records"
    kafka_clients.ensure_topics(settings, [topic], partitions=1)
    producer = open_transport(settings).writer(60)
    restarts_done = threading.Event()

    def restart() -> None:  # while records are in flight: the case that loses a batch
        for _ in range(RESTARTS):
            time.sleep(1.0)
            durable_broker.stop_service("kafka")
            durable_broker.up(only=("kafka",))
        time.sleep(1.0)
        restarts_done.set()

    restarter = threading.Thread(target=restart)
    restarter.start()
    flushed: list[bytes] = []
    batch: list[bytes] = []
    n = 0
    while not restarts_done.is_set():
        value = f"r-{n}".encode()
        n += 1
        producer.send(topic, value, key=value)
        batch.append(value)
        if len(batch) == FLUSH_EVERY:
            producer.flush()  # raises if not delivered within 60 s
            flushed += batch
            batch = []
    restarter.join()
    producer.close()

    counts = collections.Counter(record.value for record in read_topic(settings, topic))
    missing = [v for v in flushed if counts[v] == 0]
    doubled = [v for v, c in counts.items() if c > 1]
    print(f"{len(flushed)} records flushed; {producer.uncertain} acknowledged without an offset")
    assert not missing, f"{len(missing)} flushed records not in the log: {missing[:5]}"
    assert not doubled, f"{len(doubled)} records twice in the log: {doubled[:5]}"
    assert len(flushed) > RESTARTS * FLUSH_EVERY
