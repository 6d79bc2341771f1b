"""ReliableProducer across restarts of a tansu that keeps its log in S3: every record whose
flush returned is in the log exactly once. tansu answers the first produce after a restart
with offset -1 and about half the time does not store that batch; the producer reads the
partition back and sends only what is missing. A producer left stuck (a batch waiting,
nothing in flight, its leader never connected again) is given up on: what the log holds
counts as delivered, only the rest is sent again."""

from __future__ import annotations

import collections
import threading
import time
import uuid
from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.transport import open_transport
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka import delivery
from tests.conftest import DURABLE_BROKER
from tests.integration.topics import read_topic
from tests.transport.kafka.fake_producer import FakeProducer, Log, reading

# xdist_group: the durable broker has one port; its modules share a worker (tests/parallel.py)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("durable_broker"),
]

RESTARTS = 3
FLUSH_EVERY = 20


@pytest.mark.parametrize(
    ("writers", "shared", "idempotent"),
    [(1, False, False), (3, True, True)],
    ids=["one-writer", "three-sharing"],
)
def test_flushed_records_survive_broker_restarts_exactly_once(
    durable_broker: LocalStack, writers: int, shared: bool, idempotent: bool
) -> None:
    """Shared: three threads' writers on one producer, as a worker's reply sinks are (they
    are idempotent); a producer replaced or given up for one is so for all of them."""
    settings = Settings(
        kafka_bootstrap=DURABLE_BROKER, topic_prefix=f"t-delivery-{uuid.uuid4().hex[:8]}"
    )
    topic = f"{settings.topic_prefix}.records"
    kafka_clients.ensure_topics(settings, [topic], partitions=1)
    transport = open_transport(settings)
    producers = [transport.writer(60, idempotent=idempotent, shared=shared) for _ in range(writers)]
    assert len({id(p.producer) for p in producers}) == (1 if shared else writers)
    restarts_done = threading.Event()

    def restart() -> None:  # while records are in flight: the case that loses a batch
        for _ in range(RESTARTS):
            time.sleep(1.0)
            durable_broker.stop_service("kafka")
            durable_broker.up(only=("kafka",))
        time.sleep(1.0)
        restarts_done.set()

    flushed: list[bytes] = []
    errors: list[BaseException] = []

    def write(k: int) -> None:
        producer, batch, n = producers[k], [], 0
        try:
            while not restarts_done.is_set():
                value = f"w{k}-r-{n}".encode()
                n += 1
                producer.send(topic, value, key=value)
                batch.append(value)
                if len(batch) == FLUSH_EVERY:
                    producer.flush()  # raises if not delivered within 60 s
                    flushed.extend(batch)
                    batch = []
        except BaseException as exc:  # the assertion below says which
            errors.append(exc)

    threads = [threading.Thread(target=restart)]
    threads += [threading.Thread(target=write, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    for producer in producers:
        producer.close()
    transport.close()

    offsets: dict[bytes, list[int]] = collections.defaultdict(list)
    for record in read_topic(settings, topic):
        offsets[record.value].append(record.offset)
    missing = [v for v in flushed if not offsets[v]]
    doubled = [(v, at) for v, at in offsets.items() if len(at) > 1]  # where each copy is
    uncertain = sum(p.uncertain for p in producers)
    replaced = sum(p.replaced for p in producers)
    print(
        f"{len(flushed)} flushed; {uncertain} acknowledged without an offset; {replaced} replaced"
    )
    assert not errors, errors
    assert not missing, f"{len(missing)} flushed records not in the log: {missing[:5]}"
    assert not doubled, f"{len(doubled)} records twice in the log: {doubled[:5]}"
    assert len(flushed) > RESTARTS * FLUSH_EVERY


def test_records_stuck_on_a_producer_are_read_back_and_only_the_missing_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "STALL_S", 0.5)
    monkeypatch.setattr(delivery, "SLICE_S", 0.1)
    log: list[tuple[bytes | None, bytes]] = []
    producers = [FakeProducer(stuck=True, log=log), FakeProducer(stuck=False, log=log)]
    made = iter(producers)

    readback = reading(log)
    writer = delivery.ReliableProducer(lambda **_: next(made), timeout_s=5, readback=readback)
    for i in range(4):
        writer.send("t", f"r-{i}".encode(), key=f"r-{i}".encode())
    log += [(b"r-0", b"r-0"), (b"r-2", b"r-2")]  # two made it to the log before the stall

    landed = writer.flush()

    assert producers[0].closed  # given up: it can send nothing more
    assert producers[0].sent == 4 and producers[1].sent == 2  # only r-1 and r-3 again
    assert sorted(log) == [(f"r-{i}".encode(), f"r-{i}".encode()) for i in range(4)]
    assert sorted((d.key, d.offset) for d in landed) == [
        (b"r-0", 0),
        (b"r-1", 2),
        (b"r-2", 1),
        (b"r-3", 3),
    ]


def test_a_replacement_waits_briefly_for_the_broker_and_is_tried_again_next_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the broker is down a fresh producer cannot be made: the replacement is given
    a short bootstrap (not kafka-python's 30 s) and tried again on the flush's next round,
    not a whole stall later (CI: a 60 s flush ran out that way during broker restarts)."""
    monkeypatch.setattr(delivery, "STALL_S", 1.0)
    monkeypatch.setattr(delivery, "SLICE_S", 0.05)
    log: list[tuple[bytes | None, bytes]] = []
    calls: list[tuple[float, dict[str, Any]]] = []
    producers = iter([FakeProducer(stuck=True, log=log), FakeProducer(stuck=False, log=log)])

    def factory(**options: Any) -> FakeProducer:
        calls.append((time.monotonic(), options))
        if len(calls) == 2:  # the first replacement: the broker is not back yet
            raise KafkaTimeoutError("Unable to bootstrap")
        return next(producers)

    readback = reading(log)
    writer = delivery.ReliableProducer(factory, timeout_s=10, readback=readback)
    writer.send("t", b"r-0", key=b"r-0")

    landed = writer.flush()

    assert [d.key for d in landed] == [b"r-0"] and log == [(b"r-0", b"r-0")]
    assert [options for _, options in calls] == [{}] + [
        {"bootstrap_timeout_ms": int(delivery.REPLACE_BOOTSTRAP_S * 1000)}
    ] * 2
    retried_after_s = calls[2][0] - calls[1][0]
    assert retried_after_s < 0.5, f"tried again {retried_after_s:.2f}s after (stall: 1 s)"


def test_a_record_acknowledged_without_an_offset_before_one_with_is_found_not_sent_again() -> None:
    """A flush's earlier record acknowledged without an offset (stored), a later one with:
    the read-back starts where the writer's last complete flush left off, not past the later
    record, so the earlier is found there (from past it, it was sent again: a duplicate)."""
    log: Log = [(b"other", b"other")]
    producer = FakeProducer(stuck=False, log=log, unsure=frozenset({b"r-1"}))
    made = iter([producer, FakeProducer(stuck=False, log=log)])
    writer = delivery.ReliableProducer(lambda **_: next(made), timeout_s=5, readback=reading(log))
    writer.send("t", b"r-0", key=b"r-0")
    assert [(d.key, d.offset) for d in writer.flush()] == [(b"r-0", 1)]
    writer.send("t", b"r-1", key=b"r-1")  # stored at 2, acknowledged without an offset
    writer.send("t", b"r-2", key=b"r-2")  # stored at 3, acknowledged with it

    landed = writer.flush()

    # (found on read-back, it is reported as acknowledged: without an offset)
    assert sorted((d.key, d.offset) for d in landed) == [(b"r-1", -1), (b"r-2", 3)]
    assert log.count((b"r-1", b"r-1")) == 1 and writer.producer is producer  # not sent again
