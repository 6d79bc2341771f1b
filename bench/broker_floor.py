"""The broker's share of a lone request's latency: one hop measured with the bare client.

A lone request crosses the broker twice: the client's request to the dispatcher (which
reads every bucket topic of both lanes) and the worker's reply to the client (one reply
topic). Each hop here is kafka-python alone, with the pipeline's own producer and consumer
settings (linger, acks, the eager fetch wait): the time from the producer's ``send`` to the
consumer's ``poll`` returning the record, for records sent one at a time. Whatever the
pipeline's latency has beyond two such hops is its own (Python, Redis, Celery).
"""

from __future__ import annotations

import threading
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer

from headrace.config.settings import Settings
from headrace.transport.kafka import clients


def hop_ms(settings: Settings, topics: int, records: int = 60, gap_s: float = 0.05) -> list[float]:
    """Send-to-read milliseconds of ``records`` records sent ``gap_s`` apart to the first of
    ``topics`` new topics, read by a group member subscribed to all of them."""
    names = [f"floor-{uuid.uuid4().hex[:8]}-{i}" for i in range(topics)]
    clients.ensure_topics(settings, names)
    consumer = KafkaConsumer(
        *names,
        **clients.consumer_options(
            settings,
            group_id=f"floor-{uuid.uuid4().hex[:8]}",
            fetch_max_wait_ms=settings.kafka_fetch_wait_eager_ms,
        ),
    )
    producer = clients.producer(settings)
    read_at: dict[bytes, float] = {}
    arrived = threading.Condition()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for batch in consumer.poll(timeout_ms=30).values():
                now = time.perf_counter()
                with arrived:
                    read_at.update((r.value, now) for r in batch)
                    arrived.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _send(producer, names[0], b"warm", read_at, arrived, timeout_s=30.0)  # joined, assigned
        out = []
        for i in range(records):
            time.sleep(gap_s)
            out.append(_send(producer, names[0], f"r{i}".encode(), read_at, arrived))
        return out
    finally:
        stop.set()
        reader.join()
        consumer.close()
        producer.close()


def _send(
    producer: KafkaProducer,
    topic: str,
    value: bytes,
    read_at: dict[bytes, float],
    arrived: threading.Condition,
    timeout_s: float = 10.0,
) -> float:
    sent = time.perf_counter()
    producer.send(topic, value)
    producer.flush()
    with arrived:
        if not arrived.wait_for(lambda: value in read_at, timeout_s):
            raise TimeoutError(f"a record sent to {topic} was not read within {timeout_s} s")
    return (read_at[value] - sent) * 1000
